// Context parallelism in the replay: the exposed cp attention traffic of every F and B is a
// task on the rank's links (graph_builder.cpp), with the planner's durations.

#include <doctest/doctest.h>

#include <cmath>

#include "meshplan/models.h"
#include "meshplan/simulator.h"
#include "relative_error.h"

namespace meshplan::simulator {
namespace {

planner::Plan cp_plan(const char* model, const char* cluster, int64_t tp, int64_t cp, int64_t pp,
                      int64_t dp, int64_t global_batch) {
  planner::Plan plan;
  plan.model = models::load_model(model);
  plan.cluster = models::load_cluster(cluster);
  plan.layout.tp = tp;
  plan.layout.cp = cp;
  plan.layout.pp = pp;
  plan.layout.dp = dp;
  plan.layout.global_batch = global_batch;
  plan.layout.zero = 1;
  plan.num_gpus = plan.layout.num_gpus();
  return plan;
}

}  // namespace

TEST_CASE("context parallel: zero communication still equals the planner's closed form") {
  const planner::Plan plans[] = {
      cp_plan("llama3-8b", "dgx-h100", 2, 2, 4, 2, 64),
      cp_plan("llama3-70b", "dgx-h100", 8, 4, 4, 2, 64),
  };
  SimulationOptions options;
  options.zero_communication = true;
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    const SimulationResult result = simulate_plan(plan, options, "test");
    // 1e-9 relative: the same doubles summed in different orders (agreement_test).
    CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-9);
    for (const TaskRecord& task : result.tasks) {
      if (is_communication(task.kind)) {
        REQUIRE(task.end_seconds == task.start_seconds);
      }
    }
  }
}

TEST_CASE("context parallel: exposed ring traffic replays as cp-comm tasks, as planned") {
  // tiny, tp 1, cp 2, pp 1, dp 1: a ring send (2 us latency) outlasts a ring step's attention
  // (under a nanosecond), so every F and B exposes cp traffic. The gradients are still
  // all-reduced over dp x cp = 2 ranks; ZeRO 0 without overlap runs that after the last
  // backward, so nothing shares the cp tasks' NVLink and the step is m (f + b) + the
  // all-reduce + optimizer in both, cp included.
  planner::Plan plan = cp_plan("tiny", "dgx-a100-80gb", 1, 2, 1, 1, 4);
  plan.layout.zero = 0;
  plan.options.overlap_grad_reduce = false;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(estimate.feasible);
  const planner::ChunkCost& chunk = estimate.stages[0].chunks[0];
  REQUIRE(chunk.forward_cp_comm_seconds > 0);
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "test");
  double cp_seconds = 0;
  int num_cp_tasks = 0;
  for (const TaskRecord& task : result.tasks) {
    if (task.kind == TaskKind::kCpComm) {
      cp_seconds += task.end_seconds - task.start_seconds;
      ++num_cp_tasks;
    }
  }
  // m = 4 micro-batches, one task after each F and each B.
  CHECK(num_cp_tasks == 8);
  // 1e-9 relative: sums of the same doubles.
  CHECK(relative(cp_seconds,
                 4.0 * (chunk.forward_cp_comm_seconds + chunk.backward_cp_comm_seconds)) < 1e-9);
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-9);
}

}  // namespace meshplan::simulator
