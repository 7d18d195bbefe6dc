#pragma once
// meshplan execute: trains a real GPT exactly as a plan file says, one MPI process per rank:
// on CPUs in fp32 (Eigen + MPI) for a local-cpu plan, on one GPU per rank (CUDA + NCCL, fp32,
// tp = pp = 1 so far, executor/gpu/gpu_execute.h) for a GPU cluster's plan. It measures step
// time, memory and collective traffic beside the planner's prediction for the same plan. Its
// tables and JSON are written by reports/ (meshplan/execute_report.h).

#include <mpi.h>

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/plan_file.h"

namespace meshplan::executor {

/// Default deadline (seconds) of one wait on another rank (the watchdog, executor/watchdog.h).
/// Megatron-LM passes torch.distributed's process-group timeout through
/// (`--distributed-timeout-minutes`, default 10); five minutes outlasts the largest CPU step this
/// executor runs and still ends a hung job well before a person would notice.
inline constexpr double kDefaultCollectiveTimeoutSeconds = 300;

struct ExecuteOptions {
  int64_t steps = 10;                  // optimizer steps this run (a resumed run adds these)
  std::string data = "synthetic";      // "synthetic", or a text file trained on byte by byte
  std::string checkpoint_dir;          // empty: no checkpoints
  int64_t checkpoint_every = 0;        // with checkpoint_dir: write every K steps (K >= 1; 0 when
                                       // resuming: write none)
  int64_t keep_checkpoints = 2;        // this run's newest checkpoints kept on disk (>= 1)
  bool overwrite_checkpoints = false;  // a fresh run may replace another run's checkpoint
  bool resume = false;                 // continue from checkpoint_dir's manifest, bit-exactly
  double learning_rate = 1e-3;         // AdamW, constant
  double collective_timeout_seconds = kDefaultCollectiveTimeoutSeconds;  // watchdog deadline
  int kill_rank = -1;         // fault injection: this world rank raises kill_signal ...
  int64_t kill_step = 0;      // ... as step kill_step begins
  int kill_signal = SIGKILL;  // SIGKILL (the rank dies) or SIGSTOP (it hangs)
};

struct StepRecord {
  int64_t step = 0;         // from 1; a resumed run continues the numbering
  double loss = 0;          // mean token loss of the global batch
  double step_time_s = 0;   // slowest rank
  double tokens_per_s = 0;  // global_batch * seq_length / step_time_s
  double gemm_time_s = 0;   // largest time a rank spent in GEMMs (Eigen products) this step
};

struct StageMemory {
  int64_t stage = 0;
  int64_t measured_bytes = 0;   // peak bytes of live tensors (executor allocator, or the GPU
                                // arena's high-water mark), max over ranks
  int64_t peak_rss_bytes = 0;   // process peak resident set (VmHWM), max over the stage's ranks
  int64_t predicted_bytes = 0;  // planner: estimate.stages[stage].memory.total_bytes()
  int64_t predicted_tensor_bytes = 0;  // the same less reserved_bytes: what the allocator sees
  int64_t device_used_bytes = 0;       // GPU runs: cudaMemGetInfo total - free after a step (CUDA
                                       // context, cuBLAS, NCCL included), max over ranks; 0 on CPUs
};

struct CollectiveRecord {
  int64_t stage = 0;
  planner::CollectiveKind kind = planner::CollectiveKind::kAllReduce;
  planner::CommGroup group = planner::CommGroup::kTp;
  int64_t measured_bytes = 0;   // message bytes of one step (the last), per rank of the stage
  int64_t predicted_bytes = 0;  // sum of message_bytes * calls_per_step in the planner's list
  int64_t measured_calls = 0;   // collectives (sends) issued in that step, per rank of the stage
  int64_t predicted_calls = 0;  // sum of calls_per_step in the planner's list
  bool matches() const {
    return measured_bytes == predicted_bytes && measured_calls == predicted_calls;
  }
};

/// A checkpoint written after `step`, or (resumed) read before the run's first step.
struct CheckpointEvent {
  bool resumed = false;
  int64_t step = 0;       // the optimizer steps the checkpoint holds
  std::string directory;  // DIR/step_<N>
};

/// What execute_plan reports while it runs, on every rank.
struct ExecuteCallbacks {
  std::function<void(const StepRecord&)> on_step;             // after each step
  std::function<void(const CheckpointEvent&)> on_checkpoint;  // after each write or resume
};

/// The measured report; complete on world rank 0 (other ranks get the steps only).
struct ExecuteReport {
  std::vector<StepRecord> steps;
  std::vector<StageMemory> memory;
  std::vector<CollectiveRecord> collectives;
};

/// Reads and validates the plan on world rank 0 and shares it, so every rank gets the same plan
/// or the same InputError: malformed file, world size != num_gpus, anything the CPU executor
/// cannot run (precision other than fp32, alibi, ZeRO 3 with vpp > 1, ...) and, for a GPU
/// cluster's plan, anything the GPU executor refuses (tp > 1, ZeRO 1-3, ...), or in a build
/// without CUDA that it was built so.
planner::Plan load_plan(const std::string& path, MPI_Comm world);

/// Trains the plan (collective over `world`). Options, data and the checkpoint directory are
/// checked before the first step. Throws InputError (consistently on every rank) for bad
/// options, data or checkpoints, and RuntimeError naming the rank for failures while running.
ExecuteReport execute_plan(const planner::Plan& plan, const ExecuteOptions& options, MPI_Comm world,
                           const ExecuteCallbacks& callbacks);

/// Collective: world rank 0 checks that `path` (an output it will write at the end, given with
/// `flag`) can be created, by creating and removing the temporary file write_file_atomic uses.
/// Throws InputError on every rank otherwise: "<path>: <flag>: cannot write the file (<why>)".
void check_output_file(const std::string& path, const std::string& flag, MPI_Comm world);

/// Throws InputError "<source>: <field>: ..." for a plan the CPU executor cannot run (precision
/// other than fp32, alibi, ZeRO 3 with vpp > 1, ...): what load_plan checks, without MPI.
void validate_plan_for_executor(const planner::Plan& plan, const std::string& source);

}  // namespace meshplan::executor
