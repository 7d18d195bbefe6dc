// meshplan execute PLAN.json: trains the plan's model under mpirun, one process per rank, and
// prints (rank 0) the step table and the measured-versus-predicted tables.
//
// MPI lives here: initialised when the command runs, finalised on the way out, so this command
// prints its own errors and exits (main.cpp's handler would print on every rank). Input errors
// are raised consistently on every rank (the executor shares the plan and agrees on errors): rank
// 0 prints the one line and every rank exits 2. A run-time failure on one rank prints one line
// naming it and aborts the whole job (exit 1).

#include <fmt/format.h>
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "commands.h"
#include "error_line.h"
#include "meshplan/errors.h"
#include "meshplan/execute_report.h"
#include "meshplan/executor.h"
#include "meshplan/json_io.h"
#include "meshplan/output_set.h"

namespace meshplan::cli {

namespace {

struct ExecuteArguments {
  std::string plan_path;
  std::string json_path;
  executor::ExecuteOptions options;
  bool keep_checkpoints_given = false;  // its default (2) is not a request
};

// MESHPLAN_FAULT_KILL="RANK:STEP" (or MESHPLAN_FAULT_STOP): world rank RANK sends itself SIGKILL
// (SIGSTOP) as step STEP begins. Test hooks for the lost-rank and hung-rank paths; in the README.
void read_fault_injection(executor::ExecuteOptions* options) {
  for (const auto& [variable, signal] :
       {std::pair{"MESHPLAN_FAULT_KILL", SIGKILL}, std::pair{"MESHPLAN_FAULT_STOP", SIGSTOP}}) {
    const char* text = std::getenv(variable);
    if (text == nullptr) {
      continue;
    }
    int rank = -1;
    long long step = 0;
    char tail = 0;
    if (std::sscanf(text, "%d:%lld%c", &rank, &step, &tail) != 2 || rank < 0 || step < 1) {
      throw InputError(fmt::format("{}: expected RANK:STEP, e.g. 1:2 ({})", variable, text));
    }
    options->kill_rank = rank;
    options->kill_step = step;
    options->kill_signal = signal;
  }
}

void run_execute(const ExecuteArguments& args) {
  run_as_mpi_rank([&](int rank) {
    executor::ExecuteOptions options = args.options;
    read_fault_injection(&options);
    if (args.keep_checkpoints_given && options.checkpoint_dir.empty()) {
      throw InputError(
          fmt::format("--keep-checkpoints: needs --checkpoint-dir ({})", options.keep_checkpoints));
    }
    reports::OutputSet clash_check;  // every rank alike: --json must not be the plan file
    clash_check.add("--json", args.json_path);
    clash_check.add_input("the plan file", args.plan_path);
    clash_check.add_input("--data", args.options.data);  // "synthetic" is no file: skipped
    const planner::Plan plan = executor::load_plan(args.plan_path, MPI_COMM_WORLD);
    if (!args.json_path.empty()) {
      executor::check_output_file(args.json_path, "--json", MPI_COMM_WORLD);
    }
    if (rank == 0) {
      std::fputs(reports::execute_header(plan, args.plan_path).c_str(), stdout);
      std::fflush(stdout);
    }
    executor::ExecuteCallbacks callbacks;
    callbacks.on_step = [rank](const executor::StepRecord& step) {
      if (rank == 0) {
        std::fputs(reports::execute_step_row(step).c_str(), stdout);
        std::fflush(stdout);
      }
    };
    callbacks.on_checkpoint = [rank](const executor::CheckpointEvent& event) {
      if (rank == 0) {
        std::fputs(reports::execute_checkpoint_line(event).c_str(), stdout);
        std::fflush(stdout);
      }
    };
    const executor::ExecuteReport report =
        executor::execute_plan(plan, options, MPI_COMM_WORLD, callbacks);
    if (rank == 0) {
      std::fputs(reports::execute_summary(report).c_str(), stdout);
      std::fflush(stdout);
      if (!args.json_path.empty()) {
        write_file_atomic(args.json_path, reports::execute_json(report).dump(2) + "\n");
      }
    }
  });
}

}  // namespace

void run_as_mpi_rank(const std::function<void(int rank)>& body) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    MPI_Init(nullptr, nullptr);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    body(rank);
  } catch (const InputError& e) {
    // Every rank holds the same error: rank 0 prints the one line, and only then (the barrier)
    // do the ranks exit 2, so mpirun cannot stop rank 0 before it has spoken.
    if (rank == 0) {
      print_error("error", e.what());
      std::fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    std::exit(2);
  } catch (const std::exception& e) {
    // One rank failed while the others may be waiting on it: name it and stop the whole job.
    print_error("error", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

void register_execute_command(CLI::App& app) {
  auto args = std::make_shared<ExecuteArguments>();
  CLI::App* execute =
      app.add_subcommand("execute",
                         "Train the plan's model for real under mpirun, one process per rank: "
                         "local-cpu plans on CPUs, "
                         "GPU clusters' plans on one GPU per rank (fp32, tp = pp = 1)");
  execute->add_option("PLAN.json", args->plan_path, "Plan file (meshplan plan --save-plan)")
      ->required();
  execute->add_option("--steps", args->options.steps, "Optimizer steps to run")
      ->capture_default_str();
  execute
      ->add_option("--data", args->options.data,
                   "synthetic, or a text file trained on byte by byte")
      ->capture_default_str();
  execute->add_option("--json", args->json_path, "Write the measured report as JSON");
  execute->add_option("--checkpoint-dir", args->options.checkpoint_dir,
                      "Directory for checkpoints (one shard per rank and a manifest)");
  execute->add_option("--checkpoint-every", args->options.checkpoint_every,
                      "Write a checkpoint every K steps (with --resume: none if not given)");
  execute
      ->add_option("--keep-checkpoints", args->options.keep_checkpoints,
                   "How many of this run's newest checkpoints stay on disk")
      ->capture_default_str();
  execute->add_flag("--overwrite-checkpoints", args->options.overwrite_checkpoints,
                    "Let a fresh run replace another run's checkpoint in --checkpoint-dir");
  execute->add_flag("--resume", args->options.resume,
                    "Continue bit-exactly from --checkpoint-dir's latest checkpoint");
  execute
      ->add_option("--collective-timeout", args->options.collective_timeout_seconds,
                   "Watchdog: seconds any one wait on another rank (collective or pipeline "
                   "transfer) may take before this rank names what it waited for and aborts "
                   "the job")
      ->capture_default_str();
  execute->add_option("--lr", args->options.learning_rate, "AdamW learning rate (constant)")
      ->capture_default_str();
  execute->callback([args, execute] {
    args->keep_checkpoints_given = execute->count("--keep-checkpoints") > 0;
    run_execute(*args);
  });
}

}  // namespace meshplan::cli
