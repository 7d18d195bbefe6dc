// meshplan simulate PLAN.json: a discrete-event replay of one training step.

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/output_set.h"
#include "meshplan/plan_file.h"
#include "meshplan/reports.h"
#include "meshplan/simulator.h"
#include "meshplan/units.h"

namespace meshplan::cli {
namespace {

struct SimulateArguments {
  std::string plan_path;
  std::string trace_path, svg_path, json_path;
  bool all_ranks = false;
  bool zero_communication = false;
  bool allow_infeasible = false;
  std::optional<double> bucket_mb;  // default: the plan's bucket (planner::dp_bucket_bytes)
};

void run_simulate(const SimulateArguments& args) {
  reports::OutputSet outputs;
  outputs.add("--trace", args.trace_path);
  outputs.add("--svg", args.svg_path);
  outputs.add("--json", args.json_path);
  outputs.add_input("the plan file", args.plan_path);
  if (args.bucket_mb && (!(*args.bucket_mb > 0) || !std::isfinite(*args.bucket_mb))) {
    throw InputError(fmt::format("--bucket-mb: must be positive ({})", *args.bucket_mb));
  }
  const planner::Plan plan = planner::read_plan_file(args.plan_path);
  require_feasible(plan,
                   planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options),
                   args.plan_path, args.allow_infeasible);
  simulator::SimulationOptions options;
  options.all_ranks = args.all_ranks;
  options.zero_communication = args.zero_communication;
  options.with_trace = !args.trace_path.empty();
  options.bucket_bytes = planner::dp_bucket_bytes(plan.cluster, plan.layout, plan.options);
  if (args.bucket_mb) {
    // MiB, as DDP's bucket_cap_mb.
    // Checked before the rounding, which a value past 2^63 bytes would overflow.
    if (!(*args.bucket_mb * static_cast<double>(kBytesPerMiB) >= 0.5) || *args.bucket_mb > 1e6) {
      throw InputError(fmt::format(
          "--bucket-mb: must be in (0, 1e6] MiB and at least one byte ({})", *args.bucket_mb));
    }
    options.bucket_bytes = std::llround(*args.bucket_mb * static_cast<double>(kBytesPerMiB));
    const std::string inert = planner::dp_bucket_size_inert_reason(plan.layout, plan.options);
    if (!inert.empty()) {
      throw InputError(fmt::format("--bucket-mb: no effect on this plan ({})", inert));
    }
  }
  const simulator::SimulationResult result =
      simulator::simulate_plan(plan, options, args.plan_path);
  const reports::Report report = reports::simulation_report(result);
  // Every output is made before any is written, and all are written or none.
  if (outputs.wants("--trace")) {
    outputs.set("--trace", reports::chrome_trace_json(result));
  }
  if (outputs.wants("--svg")) {
    outputs.set("--svg", reports::pipeline_svg(result));
  }
  if (outputs.wants("--json")) {
    outputs.set("--json", report.json.dump(2) + "\n");
  }
  outputs.commit();
  std::fputs(report.table.c_str(), stdout);
}

}  // namespace

void register_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArguments>();
  CLI::App* simulate = app.add_subcommand(
      "simulate", "Replay one training step of a plan as a discrete-event simulation");
  simulate->add_option("PLAN.json", args->plan_path, "Plan file (meshplan plan --save-plan)")
      ->required();
  simulate->add_option("--trace", args->trace_path, "Write a Chrome trace (Perfetto) here");
  simulate->add_option("--svg", args->svg_path, "Write the pipeline schedule as SVG here");
  simulate->add_option("--json", args->json_path, "Write the report as JSON here");
  simulate->add_flag("--all-ranks", args->all_ranks,
                     "Simulate every rank (default: one per pipeline stage)");
  simulate->add_option(
      "--bucket-mb", args->bucket_mb,
      "Data-parallel gradient bucket, MiB (default: the plan's, or its framework's default)");
  simulate->add_flag("--allow-infeasible", args->allow_infeasible,
                     "Simulate a plan that does not fit its GPUs' memory");
  simulate->add_flag("--zero-communication", args->zero_communication,
                     "Every collective and transfer takes no time (checks the closed form)");
  simulate->callback([args] { run_simulate(*args); });
}

}  // namespace meshplan::cli
