#pragma once
// The parts of execute.cpp the GPU driver (gpu/gpu_execute.cpp) shares with the CPU one: the
// data every rank trains on, and the measured-versus-predicted report gathered on rank 0.

#include <mpi.h>

#include <memory>

#include "data_source.h"
#include "meshplan/executor.h"
#include "process_groups.h"

namespace meshplan::executor {

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

}  // namespace meshplan::executor
