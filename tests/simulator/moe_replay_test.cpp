// MoE all-to-alls in the replay: one task after each forward and backward op of a chunk with MoE
// layers, lasting the planner's ChunkCost ep seconds, on the links of the ep group.
//
// The case: tiny-moe (3 MoE layers) on local-cpu, tp 1, pp 1, dp 2, ep 2 (dp / ep = 1: no
// expert gradient reduction), global batch 4, micro-batch 1: m = 2 micro-batches, so 2 forward
// and 2 backward ops, each followed by its all-to-alls.

#include <doctest/doctest.h>

#include <algorithm>
#include <iomanip>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/simulator.h"
#include "relative_error.h"

namespace meshplan::simulator {

TEST_CASE("MoE: dispatch and combine all-to-alls are tasks of the planner's duration") {
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.ep = 2;
  plan.layout.global_batch = 4;
  plan.num_gpus = 2;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const planner::ChunkCost& chunk = estimate.stages.at(0).chunks.at(0);
  REQUIRE(chunk.forward_ep_comm_seconds > 0);
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "moe.json");
  int num_forward = 0, num_backward = 0;
  for (const TaskRecord& task : result.tasks) {
    if (task.kind != TaskKind::kEpAllToAll) {
      continue;
    }
    // Forward: 2 all-to-alls x 3 MoE layers; backward the same (moe_all_to_all_seconds each).
    if (task.alone_seconds == chunk.forward_ep_comm_seconds) {
      ++num_forward;
    } else if (task.alone_seconds == chunk.backward_ep_comm_seconds) {
      ++num_backward;
    }
  }
  // The forward also all-gathers the ep ranks' token counts before each dispatch (3 MoE
  // layers); the backward reuses them: 2 tasks of each duration.
  // ep 2 on consecutive ranks (stride tp cp = 1), 2 x 4 experts x 8 bytes gathered.
  CHECK(planner::moe_token_count_bytes(plan.model, plan.layout) == 2 * 4 * 8);
  const double token_counts = planner::collective_seconds(
      plan.cluster, planner::CollectiveKind::kAllGather, 2 * 4 * 8, 2, 1);
  CHECK(chunk.forward_ep_comm_seconds ==
        doctest::Approx(chunk.backward_ep_comm_seconds + 3 * token_counts).epsilon(1e-12).scale(0));
  CHECK(num_forward == 2);
  CHECK(num_backward == 2);
}

TEST_CASE("MoE with etp 1: ep 4 over tp 2 x dp 2 replays the planner's all-to-alls") {
  // The ep group is all 4 ranks (etp 1: ep ranks 1 apart, planner::expert_parallel_ranks); the
  // replay's all-to-all tasks last the planner's ChunkCost ep seconds, as with etp = tp.
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.tp = 2;
  plan.layout.sequence_parallel = true;
  plan.layout.dp = 2;
  plan.layout.ep = 4;
  planner::set_expert_tensor_parallel(plan.layout, 1);
  plan.layout.global_batch = 4;
  plan.num_gpus = 4;
  CHECK(planner::expert_parallel_ranks(plan.layout, 0) == std::vector<int64_t>{0, 1, 2, 3});
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(estimate.feasible);
  const planner::ChunkCost& chunk = estimate.stages.at(0).chunks.at(0);
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "moe.json");
  int num_forward = 0, num_backward = 0;
  for (const TaskRecord& task : result.tasks) {
    if (task.kind == TaskKind::kEpAllToAll) {
      num_forward += task.alone_seconds == chunk.forward_ep_comm_seconds;
      num_backward += task.alone_seconds == chunk.backward_ep_comm_seconds;
    }
  }
  CHECK(num_forward == 2);  // one after each of the 2 micro-batches' forward ops
  CHECK(num_backward == 2);
}

// tiny-moe, dp 2, ep 1: the expert data-parallel group is the 2 dp ranks. Experts: 3 MoE layers
// x 4 experts x 3 SwiGLU matrices of 64 x 96 = 221,184 parameters, fp32 on local-cpu.
namespace {

planner::Plan tiny_moe_expert_dp_plan(int zero) {
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.zero = zero;
  plan.layout.global_batch = 4;
  plan.num_gpus = 2;
  return plan;
}

}  // namespace

TEST_CASE("MoE: the expert gradient reduction over dp*cp/ep > 1 replays as the planner's call") {
  constexpr int64_t kExpertBytes = 3 * 4 * 3 * 64 * 96 * 4;
  for (const bool overlap : {false, true}) {
    planner::Plan plan = tiny_moe_expert_dp_plan(0);
    plan.options.overlap_grad_reduce = overlap;
    const planner::DpBuckets experts =
        planner::expert_dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
    REQUIRE(experts.step_grad.size() == 1);
    CHECK(experts.step_grad[0].bytes == kExpertBytes);
    CHECK(experts.step_grad[0].kind == planner::CollectiveKind::kAllReduce);
    CHECK(experts.step_param.empty());
    const planner::DpBuckets dense =
        planner::dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
    const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "moe.json");
    int64_t num_reduces = 0;
    bool expert_call_seen = false;
    for (const TaskRecord& task : result.tasks) {
      if (task.kind == TaskKind::kGradReduce) {
        ++num_reduces;
        expert_call_seen |= task.alone_seconds == experts.step_grad[0].seconds;
      }
    }
    CHECK(num_reduces == planner::total_calls(dense.step_grad) + 1);
    CHECK(expert_call_seen);
    // Without overlap the reductions follow the last backward one after another: the replay
    // and the planner's closed form add the same durations.
    if (!overlap) {
      CHECK(result.step_time_s ==
            doctest::Approx(result.analytic_step_time_s).epsilon(1e-9).scale(0));
    }
  }
}

TEST_CASE("MoE: ZeRO 1 gathers the expert parameters after the optimizer") {
  const planner::Plan plan = tiny_moe_expert_dp_plan(1);
  const planner::DpBuckets experts =
      planner::expert_dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
  REQUIRE(experts.step_param.size() == 1);
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "moe.json");
  int64_t expert_gathers = 0;
  for (const TaskRecord& task : result.tasks) {
    expert_gathers +=
        task.kind == TaskKind::kParamGather && task.alone_seconds == experts.step_param[0].seconds;
  }
  CHECK(expert_gathers == 1);
}

TEST_CASE(
    "MoE: ZeRO 2 reduces the dense gradients per op and the experts once, after the last "
    "backward") {
  // tiny-moe on 2 local CPUs, dp 2, ep 1 (expert dp 2), ZeRO 2: each backward reduce-scatters
  // its dense gradients, and the expert gradients reduce-scatter in one call once the last
  // backward is done, exposed whole as the planner charges them (estimate.cpp).
  const planner::Plan plan = tiny_moe_expert_dp_plan(2);
  const planner::DpBuckets experts =
      planner::expert_dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
  REQUIRE(experts.step_grad.size() == 1);
  const planner::DpBuckets dense =
      planner::dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, 0);
  REQUIRE(!dense.chunk_grad.empty());
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "moe.json");
  double last_compute_end = 0, expert_start = -1;
  int64_t expert_calls = 0;
  for (const TaskRecord& task : result.tasks) {
    if (task.kind == TaskKind::kGradReduce && task.alone_seconds == experts.step_grad[0].seconds) {
      ++expert_calls;
      expert_start = task.start_seconds;
    }
    if (task.kind == TaskKind::kBackward) {
      last_compute_end = std::max(last_compute_end, task.end_seconds);
    }
  }
  CHECK(expert_calls == 1);
  CHECK(expert_start >= last_compute_end);
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.05);
}

TEST_CASE("MoE: ZeRO 3 is refused by name, as the planner refuses it") {
  CHECK_THROWS_WITH_AS(simulate_plan(tiny_moe_expert_dp_plan(3), SimulationOptions{}, "moe.json"),
                       "moe.json: layout: ZeRO-3 of expert parameters is not modelled (moe_zero3)",
                       InputError);
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {

TEST_CASE("MoE all-to-all overlap (pp 1): the replay's step equals the planner's") {
  // overlap_moe_expert_parallel_comm: m = 4 micro-batches, the first forward and the last
  // backward keep their all-to-alls, the 3 merged pairs lose the planner's ep_overlap_saved.
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.ep = 2;
  plan.layout.global_batch = 8;
  plan.num_gpus = 2;
  plan.options.framework = planner::Framework::kMegatron;
  const SimulationResult off = simulate_plan(plan, SimulationOptions{}, "moe.json");
  plan.options.overlap_moe_expert_parallel_comm = true;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(estimate.feasible);
  const double saved = estimate.stages.at(0).chunks.at(0).ep_overlap_saved_seconds;
  REQUIRE(saved > 0);
  const SimulationResult on = simulate_plan(plan, SimulationOptions{}, "moe.json");
  CHECK(on.step_time_s == doctest::Approx(estimate.step_time_s).epsilon(1e-9).scale(0));
  CHECK(off.step_time_s - on.step_time_s == doctest::Approx(3.0 * saved).epsilon(1e-9).scale(0));
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {

TEST_CASE("MoE all-to-all overlap (interleaved pp 2): the replay agrees with the planner") {
  // overlap_moe_expert_parallel_comm at pp 2, vpp 2 (Megatron's combined 1F1B for interleaved
  // pipelining): both read generate_schedule's merged op lists; the planner adds the replay of
  // those lists less the plain lists' (each stage's own chunk times) to its interleaved closed
  // form, so the replay stays at most the planner's bound (as without the overlap,
  // agreement_test) and both save alike.
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.pp = 2;
  plan.layout.vpp = 2;
  plan.layout.dp = 2;
  plan.layout.ep = 2;
  plan.layout.global_batch = 8;
  plan.layout.schedule = planner::ScheduleKind::kInterleaved;
  plan.num_gpus = 4;
  plan.options.framework = planner::Framework::kMegatron;
  const SimulationResult off = simulate_plan(plan, SimulationOptions{}, "moe.json");
  plan.options.overlap_moe_expert_parallel_comm = true;
  const SimulationResult on = simulate_plan(plan, SimulationOptions{}, "moe.json");
  const double simulated_saving = off.step_time_s - on.step_time_s;
  const double planned_saving = off.analytic_step_time_s - on.analytic_step_time_s;
  MESSAGE(std::setprecision(12) << "off " << off.step_time_s << " (analytic "
                                << off.analytic_step_time_s << "), on " << on.step_time_s
                                << " (analytic " << on.analytic_step_time_s << "), saving "
                                << simulated_saving << " (analytic " << planned_saving << ")");
  CHECK(on.step_time_s <= on.analytic_step_time_s);
  CHECK(simulated_saving > 0);
  // Measured equal to 12 digits; 1e-6 leaves room for summation order only.
  CHECK(relative(simulated_saving, planned_saving) < 1e-6);
}

}  // namespace meshplan::simulator
