// Speed of `meshplan simulate` (simulate_plan: estimate, task graph, replay, breakdown) on
// Llama-3 405B (126 layers) on DGX H100 nodes. Prints one row per case, nccl-tests style.
//
// Layouts: 126 layers admit no pipeline depth that divides 16,384 GPUs beyond pp = 2 (Llama 3
// itself ran pp 16 with one layer fewer on the first and last stage, Dubey et al. 2024,
// Sec. 3.3.2; the planner has no uneven stages). So the 16,384-GPU cluster runs the planner's
// best pipeline layout that fits it: tp 8 x pp 18 x dp 112 = 16,128 GPUs, vpp 7 interleaved,
// sequence parallel, ZeRO-2, micro-batch 1, global batch 2,016 (m = 18 micro-batches per
// pipeline, 16.5M tokens: Llama 3's 16M-token batch). --all-ranks runs the same pipeline with
// dp 8: 1,152 ranks, at least the 1,024 of the target.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "meshplan/models.h"
#include "meshplan/simulator.h"

namespace {

using meshplan::planner::Plan;
using meshplan::simulator::SimulationOptions;
using meshplan::simulator::SimulationResult;

Plan llama3_405b(int64_t dp) {
  Plan plan;
  plan.model = meshplan::models::load_model("llama3-405b");
  plan.cluster = meshplan::models::load_cluster("dgx-h100");
  plan.layout.tp = 8;
  plan.layout.pp = 18;
  plan.layout.vpp = 7;
  plan.layout.dp = dp;
  plan.layout.micro_batch = 1;
  plan.layout.global_batch = 18 * dp;
  plan.layout.sequence_parallel = true;
  plan.layout.zero = 2;
  plan.layout.schedule = meshplan::planner::ScheduleKind::kInterleaved;
  plan.num_gpus = plan.layout.num_gpus();
  return plan;
}

struct Timing {
  SimulationResult result;
  double seconds = 0;  // fastest of the repeats
};

Timing time_simulation(const Plan& plan, bool all_ranks, int repeats) {
  SimulationOptions options;
  options.all_ranks = all_ranks;
  Timing timing;
  timing.seconds = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    timing.result = meshplan::simulator::simulate_plan(plan, options, "bench");
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    timing.seconds = std::min(timing.seconds, elapsed.count());
  }
  return timing;
}

}  // namespace

int main() {
  std::printf(
      "# simulator_bench: Llama-3 405B on dgx-h100, tp 8 pp 18 vpp 7 interleaved, sp, "
      "ZeRO-2, m = 18\n");
  std::printf(
      "# wall time: fastest of 3 runs of simulate_plan (estimate, build, replay, "
      "breakdown)\n#\n");
  std::printf("#%9s %6s %10s %8s %10s %10s %11s %12s %10s %10s\n", "gpus", "dp", "mode", "ranks",
              "tasks", "events", "wall", "events/s", "step sim", "analytic");
  std::printf("#%9s %6s %10s %8s %10s %10s %11s %12s %10s %10s\n", "", "", "", "", "", "", "(s)",
              "", "(s)", "(s)");
  bool ok = true;
  struct Case {
    int64_t dp;
    bool all_ranks;
    double target_seconds;
  };
  for (const Case& c : {Case{112, false, 1.0}, Case{8, true, 10.0}}) {
    const Plan plan = llama3_405b(c.dp);
    const Timing timing = time_simulation(plan, c.all_ranks, 3);
    const SimulationResult& r = timing.result;
    std::printf(" %9lld %6lld %10s %8zu %10zu %10lld %11.4f %12.3e %10.4f %10.4f\n",
                static_cast<long long>(plan.num_gpus), static_cast<long long>(c.dp),
                c.all_ranks ? "all-ranks" : "default", r.ranks.size(), r.tasks.size(),
                static_cast<long long>(r.num_events), timing.seconds,
                static_cast<double>(r.num_events) / timing.seconds, r.step_time_s,
                r.analytic_step_time_s);
    ok = ok && timing.seconds < c.target_seconds;
  }
  std::printf("#\n# targets: default < 1 s, all-ranks < 10 s: %s\n", ok ? "OK" : "MISSED");
  return ok ? 0 : 1;
}
