// MoE all-to-alls in the replay: one task after each forward and backward op of a chunk with MoE
// layers, lasting the planner's ChunkCost ep seconds, on the links of the ep group.
//
// The case: tiny-moe (3 MoE layers) on local-cpu, tp 1, pp 1, dp 2, ep 2 (dp / ep = 1: no
// expert gradient reduction), global batch 4, micro-batch 1: m = 2 micro-batches, so 2 forward
// and 2 backward ops, each followed by its all-to-alls.

#include <doctest/doctest.h>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/simulator.h"

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
  // Forward and backward durations are equal here (no recompute): 4 tasks of that duration.
  CHECK(chunk.forward_ep_comm_seconds == chunk.backward_ep_comm_seconds);
  CHECK(num_forward + num_backward == 4);
}

TEST_CASE("MoE: expert gradient reduction over dp*cp/ep > 1 is refused by name") {
  planner::Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.global_batch = 4;
  plan.num_gpus = 2;
  try {
    simulate_plan(plan, SimulationOptions{}, "moe.json");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "moe.json: layout: the simulator does not replay the expert gradient reduction of a "
          "mixture-of-experts plan with dp*cp/ep > 1 yet (tp=1 pp=1 dp=2 vpp=1 mb=1 "
          "recompute=none sp=off zero=0 schedule=1f1b); plan it with meshplan plan");
  }
}

}  // namespace meshplan::simulator
