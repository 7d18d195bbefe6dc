// cross_entropy_loss_fusion xentropy: llm-foundry's FlashAttention loss under --framework fsdp,
// its bytes per logit, the memory it holds and the layouts and options that refuse it.

#include <doctest/doctest.h>

#include "compute_cost.h"
#include "loss_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

TEST_CASE("xentropy: two reads forward, a read and a write backward, per logit") {
  // cunn_SoftMaxXEntropyForward reads each row twice (max and sum, then the exponentials);
  // cunn_SoftMaxXEntropyBackward reads it once and writes the gradient in the logits' dtype.
  const PassBytes bf16 = cross_entropy_bytes_per_logit(2.0, CrossEntropyFusion::kXentropy);
  CHECK(bf16.forward == 4.0);
  CHECK(bf16.backward == 4.0);
  const PassBytes fp32 = cross_entropy_bytes_per_logit(4.0, CrossEntropyFusion::kXentropy);
  CHECK(fp32.forward == 8.0);
  CHECK(fp32.backward == 8.0);
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kXentropy;
  const PassBytes plan_loss = loss_bytes_per_logit(2.0, options);
  CHECK(plan_loss.forward == 4.0);
  CHECK(plan_loss.backward == 4.0);
  CHECK(to_string(CrossEntropyFusion::kXentropy) == "xentropy");
  CHECK(parse_cross_entropy_fusion("xentropy", "x") == CrossEntropyFusion::kXentropy);
}

TEST_CASE("xentropy: the loss holds the 16-bit logits and one 16-bit gradient, 10 T V fewer") {
  // As the compiled loss (compile_test.cpp): megatron-7.5b (seq 2048, vocab 51,200), fsdp,
  // pp 1, micro-batch 1, bf16, no recompute. torchtitan's eager loss holds the fp32
  // log-softmax (4 T V), its backward two fp32 gradients (8 T V) and the freed bf16 logits'
  // cached segment (2 T V); xentropy saves the bf16 logits (2 T V) and writes one bf16 gradient
  // (2 T V): allocated 8 T V fewer, reserved 2 T V plus the fragmentation share of the 8.
  constexpr double kTokens = 2048, kVocab = 51200;
  PlanOptions options;
  const MemoryBreakdown eager = test::fsdp_loss_test_memory(options);
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kXentropy;
  const MemoryBreakdown xentropy = test::fsdp_loss_test_memory(options);
  CHECK(static_cast<double>(eager.activations_bytes - xentropy.activations_bytes) ==
        doctest::Approx(8.0 * kTokens * kVocab).epsilon(1e-9).scale(0));
  CHECK(static_cast<double>(eager.reserved_bytes - xentropy.reserved_bytes) ==
        doctest::Approx((2.0 + 8.0 * kAllocatorFragmentation) * kTokens * kVocab)
            .epsilon(1e-6)
            .scale(0));
  CHECK(xentropy.weights_bytes == eager.weights_bytes);
}

TEST_CASE("xentropy: fsdp only, tp 1 only, and not with torchtitan's compiled loss") {
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  PlanOptions options;
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kXentropy;
  Layout layout = make_layout(1, 1, 64, 1, 64);
  layout.zero = 3;
  for (const Framework framework :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kMeshplan}) {
    options.framework = framework;
    CAPTURE(to_string(framework));
    CHECK_THROWS_WITH_AS(estimate_plan(model, cluster, layout, options),
                         doctest::Contains("xentropy (llm-foundry's FlashAttention loss) runs "
                                           "under framework fsdp"),
                         InputError);
  }
  options.framework = Framework::kFsdp;
  options.compile = true;
  CHECK_THROWS_WITH_AS(estimate_plan(model, cluster, layout, options),
                       doctest::Contains("xentropy with compile"), InputError);
  options.compile_loss = false;  // compiled blocks, the loss eager: runnable
  CHECK_NOTHROW(estimate_plan(model, cluster, layout, options));
  options.compile = false;
  const Validity tp1 = check_framework(model, options, layout);
  CHECK(tp1.ok());
  Layout tp2_layout = make_layout(2, 1, 32, 1, 64);
  tp2_layout.zero = 3;
  tp2_layout.sequence_parallel = true;  // torchtitan's tensor parallelism
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kOff;
  CHECK(check_framework(model, options, tp2_layout).ok());
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kXentropy;
  const Validity tp2 = check_framework(model, options, tp2_layout);
  CHECK_FALSE(tp2.ok());
  CHECK(tp2.code == "framework");
  CHECK(tp2.reason.find("xentropy (llm-foundry's loss) is modelled without tensor parallelism") !=
        std::string::npos);
}

}  // namespace
}  // namespace meshplan::planner
