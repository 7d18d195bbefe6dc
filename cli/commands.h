#pragma once
// Each subcommand lives in its own file and registers itself on the app.

#include <CLI/CLI.hpp>
#include <functional>
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

/// Runs `body(rank)` as one rank of an MPI job (initialising MPI if needed, finalising it after)
/// with the job's error rules: an InputError every rank holds is printed once, by rank 0, and
/// every rank exits 2 after a barrier (so mpirun cannot stop rank 0 before it has spoken); any
/// other error is printed by the rank that met it and aborts the whole job (exit 1).
void run_as_mpi_rank(const std::function<void(int rank)>& body);

}  // namespace meshplan::cli
