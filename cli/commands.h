#pragma once
// Each subcommand lives in its own file and registers itself on the app.

#include <CLI/CLI.hpp>

namespace meshplan::cli {

void register_info_commands(CLI::App& app);     // models, clusters
void register_plan_commands(CLI::App& app);     // plan, explain, validate
void register_simulate_command(CLI::App& app);  // simulate
void register_execute_command(CLI::App& app);   // execute

}  // namespace meshplan::cli
