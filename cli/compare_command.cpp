// meshplan compare PLAN.json MEASURED [--json OUT.json]: predicted against measured.

#include <fmt/format.h>

#include "commands.h"
#include "meshplan/compare.h"
#include "meshplan/output_set.h"
#include "meshplan/plan_file.h"

namespace meshplan::cli {

void register_compare_command(CLI::App& app) {
  struct Arguments {
    std::string plan_path, measured_path, json_path;
  };
  auto args = std::make_shared<Arguments>();
  CLI::App* compare = app.add_subcommand("compare",
                                         "Predicted against measured: meshplan execute --json, "
                                         "Megatron-LM, torchtitan or DeepSpeed log");
  compare->add_option("PLAN.json", args->plan_path, "Plan file")->required();
  compare
      ->add_option("MEASURED", args->measured_path,
                   "execute's --json, a Megatron-LM, torchtitan or DeepSpeed log")
      ->required();
  compare->add_option("--json", args->json_path, "Write the comparison as JSON");
  compare->callback([args] {
    reports::OutputSet outputs;
    outputs.add("--json", args->json_path);
    outputs.add_input("the plan file", args->plan_path);
    outputs.add_input("MEASURED", args->measured_path);
    const planner::Plan plan = planner::read_plan_file(args->plan_path);
    const reports::MeasuredRun measured = reports::read_measured_run(args->measured_path, plan);
    const reports::Comparison comparison = reports::compare_plan(plan, measured);
    const reports::Report report =
        reports::compare_report(comparison, args->plan_path, args->measured_path, measured);
    fmt::print("{}", report.table);
    if (outputs.wants("--json")) {
      outputs.set("--json", report.json.dump(2) + "\n");
    }
    outputs.commit();
  });
}

}  // namespace meshplan::cli
