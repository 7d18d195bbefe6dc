// meshplan models | meshplan clusters: list the presets.

#include <fmt/format.h>

#include "commands.h"
#include "meshplan/plan_report.h"

namespace meshplan::cli {

void register_info_commands(CLI::App& app) {
  CLI::App* models_command = app.add_subcommand("models", "List the model presets");
  models_command->callback([] { fmt::print("{}", reports::format_model_presets()); });
  CLI::App* clusters_command = app.add_subcommand("clusters", "List the cluster presets");
  clusters_command->callback([] { fmt::print("{}", reports::format_cluster_presets()); });
}

}  // namespace meshplan::cli
