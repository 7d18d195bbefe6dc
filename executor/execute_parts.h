#pragma once
// The parts of execute.cpp the GPU driver (gpu/gpu_execute.cpp) shares with the CPU one: the
// data every rank trains on, and the measured-versus-predicted report gathered on rank 0.

#include <mpi.h>

#include <csignal>
#include <memory>
#include <vector>

#include "data_source.h"
#include "meshplan/executor.h"
#include "process_groups.h"
#include "trainer.h"

namespace meshplan::executor {

/// Throws InputError "<source>: model.<field>: ... not implemented in the GPU executor yet
/// (<value>)" for a model the GPU executor's kernels do not run but the CPU executor does: a
/// sliding window shorter than seq_length (gpu/flash_attention.cu applies the causal mask only),
/// the gated GELU MLP (gpu/elementwise.cu has GELU and SwiGLU only), Gemma's (1 + weight) norms
/// and sqrt(h) embedding scale, per-head q/k norms (qk_norm) and sandwich norms.
/// Compiled without CUDA too, so it is tested everywhere; gpu::validate_plan_for_gpu calls it.
void refuse_model_for_gpu_executor(const models::TransformerConfig& model,
                                   const std::string& source);

/// Collective: "synthetic", or the text file rank 0 reads and shares (InputError on every rank
/// when it cannot be read).
std::shared_ptr<const TokenSource> load_data(const planner::Plan& plan,
                                             const ExecuteOptions& options, MPI_Comm world);

/// This rank's figures after the run: its pipeline stage, the peak bytes of its allocator (the
/// CPU MemoryTracker or the GPU arena), cudaMemGetInfo's used bytes (0 on CPUs), and the
/// collectives of its last step.
struct RankMeasurement {
  int stage = 0;
  int64_t peak_bytes = 0;
  int64_t device_used_bytes = 0;
  TrafficCounts traffic;
};

/// Collective: every rank's measurement, compared on rank 0 with the planner's estimate of the
/// plan (the other ranks get an empty report).
ExecuteReport gather_measurements(const planner::Plan& plan, const RankMeasurement& mine,
                                  MPI_Comm world);

/// One step of `trainer` (the CPU Trainer or the GPU one) as execute runs it: the fault the
/// tests inject (options.kill_rank dies or hangs before kill_step), the step, its record
/// appended to `steps` and handed to on_step. Returns the trainer's outcome.
template <class AnyTrainer>
StepOutcome run_step(AnyTrainer& trainer, const planner::Plan& plan, int rank,
                     const ExecuteOptions& options, const ExecuteCallbacks& callbacks,
                     std::vector<StepRecord>& steps) {
  if (rank == options.kill_rank && trainer.steps_done() + 1 == options.kill_step) {
    ::raise(options.kill_signal);
  }
  const StepOutcome outcome = trainer.train_step();
  const double tokens_per_step =
      static_cast<double>(plan.layout.global_batch * plan.model.seq_length);
  steps.push_back(StepRecord{outcome.step, outcome.loss, outcome.step_time_s,
                             tokens_per_step / outcome.step_time_s, outcome.gemm_time_s});
  if (callbacks.on_step) {
    callbacks.on_step(steps.back());
  }
  return outcome;
}

}  // namespace meshplan::executor
