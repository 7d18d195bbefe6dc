// libFuzzer target: a plan file through what `simulate --allow-infeasible --trace --svg --json`
// does with it: planner::read_plan_file, the estimate, the discrete-event replay (one rank per
// stage) and the three reports. A plan the reader accepts must be replayed or refused with an
// InputError; a crash, undefined behaviour, or a replayed step time that is not finite and
// positive is a finding. Plans of more than kMaxReplayedOps forward and backward ops are read
// and estimated but not replayed (their replay is correct and only slow; the fuzzer's 10 s
// limit is for hangs). Seeds: fuzz/corpus/fuzz_plan_simulate (plan files of every schedule).

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "fuzz_input.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/plan_file.h"
#include "meshplan/reports.h"
#include "meshplan/simulator.h"

namespace {

constexpr int64_t kMaxReplayedOps = 20000;  // micro-batches x chunks per stage x stages

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshplan;
  static const std::string path = fuzz::scratch_path("plan.json");
  fuzz::write_input(path, data, size);
  return fuzz::run_loader([&] {
    const planner::Plan plan = planner::read_plan_file(path);
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    const int64_t ops = plan.layout.num_micro_batches() * plan.layout.vpp * plan.layout.pp;
    if (ops > kMaxReplayedOps) {
      return;
    }
    simulator::SimulationOptions options;
    options.with_trace = true;
    options.bucket_bytes = planner::dp_bucket_bytes(plan.cluster, plan.layout, plan.options);
    const simulator::SimulationResult result = simulator::simulate_plan(plan, options, path);
    if (!(std::isfinite(result.step_time_s) && result.step_time_s > 0)) {
      std::fprintf(stderr, "replayed step time out of range: %g s (estimate %g s)\n",
                   result.step_time_s, estimate.step_time_s);
      std::abort();
    }
    reports::simulation_report(result);
    reports::chrome_trace_json(result);
    reports::pipeline_svg(result);
  });
}
