// simulation_input (simulator/plan_input.cpp) takes every data-parallel bucket from the
// planner: its lists equal planner::dp_buckets' call for call, for every ZeRO stage.

#include <doctest/doctest.h>

#include <algorithm>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/simulator.h"

namespace meshplan::simulator {
namespace {

// The replay lists every call; the planner gives runs of equal calls, in order unless runs
// interleave layer by layer (DpBucket::layer_run; checked below).
void check_same(const std::vector<Bucket>& replay, const std::vector<planner::DpBucket>& planner) {
  REQUIRE(static_cast<int64_t>(replay.size()) == planner::total_calls(planner));
  size_t k = 0;
  for (const planner::DpBucket& run : planner) {
    REQUIRE(run.layer_run < 0);
    for (int64_t call = 0; call < run.num_calls; ++call, ++k) {
      CHECK(replay[k].bytes == run.bytes);
      CHECK(replay[k].seconds == run.seconds);
    }
  }
}

// The same calls, as many of each size and time, whatever their order.
void check_same_calls(const std::vector<Bucket>& replay,
                      const std::vector<planner::DpBucket>& planner) {
  REQUIRE(static_cast<int64_t>(replay.size()) == planner::total_calls(planner));
  for (const planner::DpBucket& run : planner) {
    int64_t planner_calls = 0;
    for (const planner::DpBucket& other : planner) {
      if (other.bytes == run.bytes && other.seconds == run.seconds) {
        planner_calls += other.num_calls;
      }
    }
    const auto replay_calls = std::count_if(replay.begin(), replay.end(), [&](const Bucket& b) {
      return b.bytes == run.bytes && b.seconds == run.seconds;
    });
    CHECK(replay_calls == planner_calls);
  }
}

// A ZeRO-3 data-parallel plan of `model` on A100s under `framework`.
planner::Plan zero3_dp_plan(const char* model, int64_t dp, int64_t global_batch,
                            planner::Framework framework) {
  planner::Plan plan;
  plan.model = models::load_model(model);
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.layout.dp = dp;
  plan.layout.global_batch = global_batch;
  plan.layout.zero = 3;
  plan.options.framework = framework;
  plan.num_gpus = plan.layout.num_gpus();
  return plan;
}

}  // namespace

TEST_CASE("plan input: the simulator's buckets are the planner's, ZeRO 0-3") {
  for (int zero = 0; zero <= 3; ++zero) {
    for (int64_t vpp : {1, 2}) {
      CAPTURE(zero);
      CAPTURE(vpp);
      planner::Plan plan;
      plan.model = models::load_model("tiny");
      plan.cluster = models::load_cluster("dgx-a100-80gb");
      plan.layout.pp = 2;
      plan.layout.dp = 3;  // pads under ZeRO (see tests/planner/dp_buckets_test.cpp)
      plan.layout.vpp = vpp;
      plan.layout.global_batch = 12;
      plan.layout.zero = zero;
      plan.layout.schedule =
          vpp > 1 ? planner::ScheduleKind::kInterleaved : planner::ScheduleKind::kOneFOneB;
      plan.num_gpus = plan.layout.num_gpus();
      SimulationOptions options;
      options.bucket_bytes = 50'000;  // several buckets per stage
      plan.options.bucket_bytes = options.bucket_bytes;
      const planner::PlanEstimate estimate =
          planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
      REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
      const SimulationInput input = simulation_input(plan, estimate, options);
      for (int64_t stage = 0; stage < plan.layout.pp; ++stage) {
        const planner::DpBuckets expected =
            planner::dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, stage);
        const StageCosts& costs = input.stages[static_cast<size_t>(stage)];
        check_same(costs.grad_buckets, expected.step_grad);
        check_same(costs.param_buckets, expected.step_param);
        check_same(costs.chunk_grad_buckets, expected.chunk_grad);
        check_same(costs.chunk_param_buckets, expected.chunk_param);
        // Every ZeRO stage has some data-parallel call with dp = 3.
        CHECK(costs.grad_buckets.size() + costs.chunk_grad_buckets.size() > 0);
      }
    }
  }
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {

TEST_CASE("plan input: DeepSpeed's backward gathers replayed as the planner lists them") {
  // GPT-3 175B, tp 1, dp 1536, full recompute under deepspeed: the coordinator gathers 672
  // module calls before each backward against 384 before each forward
  // (tests/planner/dp_buckets_test.cpp); the replay takes both lists as they are. Without
  // recompute the two lists agree and the backward list stays unset.
  planner::Plan plan = zero3_dp_plan("gpt3-175b", 1536, 1536, planner::Framework::kDeepSpeed);
  plan.layout.recompute = planner::Recompute::kFull;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const planner::DpBuckets expected =
      planner::dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
  const SimulationInput input = simulation_input(plan, estimate, SimulationOptions{});
  check_same_calls(input.stages[0].chunk_param_buckets, expected.chunk_param);
  REQUIRE(input.stages[0].chunk_param_backward_buckets.has_value());
  check_same_calls(*input.stages[0].chunk_param_backward_buckets, expected.chunk_param_backward);
  CHECK(input.stages[0].chunk_param_backward_buckets->size() == 672);
  // Before a forward the coordinator fetches module by module through each layer in turn: the
  // 96 layers' four modules (query_key_value, dense, dense_h_to_4h, dense_4h_to_h, tp 1:
  // 3h^2, h^2, 4h^2, 4h^2 elements of h = 12,288, the embedding and LM head spread over them;
  // layers differ by a dp block at most), so call 4i + j is module j of layer i.
  const std::vector<Bucket>& forward = input.stages[0].chunk_param_buckets;
  REQUIRE(forward.size() == 384);
  for (size_t call = 4; call < forward.size(); ++call) {
    CAPTURE(call);
    CHECK(static_cast<double>(forward[call].bytes) ==
          doctest::Approx(static_cast<double>(forward[call - 4].bytes)).epsilon(1e-4).scale(0));
  }
  const auto bytes = [&](size_t call) { return static_cast<double>(forward[call].bytes); };
  CHECK(bytes(1) == doctest::Approx(bytes(0) / 3).epsilon(0.01).scale(0));      // dense
  CHECK(bytes(2) == doctest::Approx(bytes(0) * 4 / 3).epsilon(0.01).scale(0));  // dense_h_to_4h
  CHECK(bytes(3) == doctest::Approx(bytes(2)).epsilon(1e-4).scale(0));
  plan.layout.recompute = planner::Recompute::kNone;
  const SimulationInput plain = simulation_input(
      plan, planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options),
      SimulationOptions{});
  CHECK_FALSE(plain.stages[0].chunk_param_backward_buckets.has_value());
}

TEST_CASE("plan input: errors name the plan file, not the command") {
  planner::Plan plan;
  plan.model = models::load_model("tiny");
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.layout.global_batch = 2;
  plan.num_gpus = 1;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  SimulationOptions options;
  options.bucket_bytes = 0;
  CHECK_THROWS_WITH_AS(simulation_input(plan, estimate, options, "p.json"),
                       "p.json: bucket_bytes: must be positive (0)", InputError);
  options.bucket_bytes = 1;
  // The replay's own checks carry the same source.
  SimulationInput input = simulation_input(plan, estimate, options, "p.json");
  CHECK(input.source == "p.json");
  input.gpus_per_node = 0;
  CHECK_THROWS_WITH_AS(simulate(input), "p.json: gpus_per_node: must be at least 1 (0)",
                       InputError);
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {

TEST_CASE("plan input: Megatron-FSDP, FSDP and DeepSpeed keep ZeRO-3 collectives in their pass") {
  // SimulationInput::sharded_pass_boundaries: set for the frameworks whose backward ends by
  // waiting for its last reduce-scatter (Megatron-FSDP's and FSDP's root post-backward
  // callbacks, DeepSpeed's independent_gradient_partition_epilogue); meshplan's executor lets
  // it overlap the next op.
  using planner::Framework;
  for (Framework framework :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kFsdp, Framework::kMeshplan}) {
    CAPTURE(planner::to_string(framework));
    const planner::Plan plan = zero3_dp_plan("tiny", 4, 8, framework);
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    const SimulationInput input = simulation_input(plan, estimate, SimulationOptions{});
    CHECK(input.sharded_pass_boundaries == (framework != Framework::kMeshplan));
  }
}

}  // namespace meshplan::simulator
