// What --recompute-modules saves, measured: the executor's peak of live tensors (its allocator,
// memory_tracker.h) against the planner's stage memory, with one micro-batch in flight. The
// planner counts no norm statistics (N_local floats per RMSNorm), which the executor drops and
// rebuilds with the norm's output: the one term added here by hand.
#include <doctest/doctest.h>
#include <mpi.h>

#include "meshplan/cost_model.h"
#include "shard_dims.h"
#include "tiny_plan.h"
#include "trainer.h"

namespace meshplan::executor {
namespace {

using testing::make_layout;

struct PeakBytes {
  int64_t measured = 0;   // the executor's peak of live tensors over one step, on this rank
  int64_t predicted = 0;  // the planner's weights, gradients, optimizer and activations
};

PeakBytes peak_bytes(const models::TransformerConfig& model, const planner::Layout& layout) {
  planner::Plan plan = testing::make_plan(model, layout);
  validate_plan_for_executor(plan, model.name);
  Trainer trainer(plan, make_synthetic_source(model.vocab_size), AdamWConfig{}, MPI_COMM_WORLD);
  trainer.train_step();
  const planner::PlanEstimate estimate =
      planner::estimate_plan(model, plan.cluster, layout, plan.options);
  const planner::MemoryBreakdown& predicted = estimate.stages[0].memory;
  return {trainer.memory().peak_bytes(), predicted.total_bytes() - predicted.reserved_bytes};
}

TEST_SUITE("mpi2") {
  TEST_CASE("recompute modules: the measured peak falls by the planner's saving") {
    // tp 2 with sequence parallelism, one micro-batch of 4 x 32 tokens (N_local = 64 rows a
    // rank); 4 layers, the last one's dropped tensors rebuilt at the peak.
    planner::Layout one = make_layout(2, 1, 1, 4, 4);
    one.sequence_parallel = true;
    const int64_t rstd_bytes = 64 * 4;
    SUBCASE("tiny: mlp (the norm output and statistics, the SwiGLU input and output)") {
      const models::TransformerConfig tiny = models::load_model("tiny");
      const PeakBytes core =
          peak_bytes(tiny, testing::with_modules(one, planner::kRecomputeCoreAttn));
      const PeakBytes mlp = peak_bytes(
          tiny, testing::with_modules(one, planner::kRecomputeCoreAttn | planner::kRecomputeMlp));
      CHECK(core.predicted - mlp.predicted == 3 * (64 * 64 * 4 + 3 * 128 * 88 * 4));
      CHECK(core.measured - mlp.measured == core.predicted - mlp.predicted + 3 * rstd_bytes);
    }
    SUBCASE("tiny-mla: mla_up_proj and layernorm (Q, K, V less the rotary key; the input norm)") {
      const models::TransformerConfig mla = models::load_model("tiny-mla");
      const PeakBytes core =
          peak_bytes(mla, testing::with_modules(one, planner::kRecomputeCoreAttn));
      const PeakBytes up =
          peak_bytes(mla, testing::with_modules(one, planner::kRecomputeCoreAttn |
                                                         planner::kRecomputeMlaUpProj |
                                                         planner::kRecomputeLayernorm));
      // Per layer: 128 tokens x 3 x 2 heads x 24 x 4 B, less 128 x 8 x 4 B kept; 64 x 64 x 4 B.
      CHECK(core.predicted - up.predicted == 3 * (128 * 6 * 24 * 4 - 128 * 8 * 4 + 64 * 64 * 4));
      CHECK(core.measured - up.measured == core.predicted - up.predicted + 3 * rstd_bytes);
    }
    SUBCASE("tiny-moe with a shared expert: shared_experts (its SwiGLU input and output)") {
      // ep 2 (MoE layers run at tp 1 here), one micro-batch of 4 x 32 = 128 tokens: each MoE
      // layer drops 128 x (2 x 96 + 96) x 4 B; layers 1-3 are MoE, the last rebuilt at the peak.
      models::TransformerConfig moe = models::load_model("tiny-moe");
      moe.num_shared_experts = 1;
      moe.shared_expert_ffn_hidden_size = 96;
      planner::Layout expert = make_layout(1, 1, 2, 4, 8);
      expert.ep = 2;
      const PeakBytes core =
          peak_bytes(moe, testing::with_modules(expert, planner::kRecomputeCoreAttn));
      const PeakBytes shared =
          peak_bytes(moe, testing::with_modules(expert, planner::kRecomputeCoreAttn |
                                                            planner::kRecomputeSharedExperts));
      CHECK(core.predicted - shared.predicted == 2 * 128 * 3 * 96 * 4);
      CHECK(core.measured - shared.measured == core.predicted - shared.predicted);
    }
  }
}

}  // namespace
}  // namespace meshplan::executor
