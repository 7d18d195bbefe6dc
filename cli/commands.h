#pragma once
// Each subcommand lives in its own file and registers itself on the app.

#include <CLI/CLI.hpp>
#include <string>

#include "meshplan/cost_model.h"
#include "meshplan/plan_file.h"

namespace meshplan::cli {

void register_info_commands(CLI::App& app);      // models, clusters
void register_plan_commands(CLI::App& app);      // plan, explain, validate
void register_simulate_command(CLI::App& app);   // simulate
void register_execute_command(CLI::App& app);    // execute
void register_compare_command(CLI::App& app);    // compare
void register_calibrate_command(CLI::App& app);  // calibrate
void register_sweep_command(CLI::App& app);      // sweep

/// explain and simulate refuse a plan the planner rejects (it does not fit its GPUs' memory)
/// unless allow_infeasible: throws InputError "<plan_path>: does not fit: peak memory X GiB per
/// GPU exceeds the Y GiB of each <gpu> (--allow-infeasible to go on)".
void require_feasible(const planner::Plan& plan, const planner::PlanEstimate& estimate,
                      const std::string& plan_path, bool allow_infeasible);

}  // namespace meshplan::cli
