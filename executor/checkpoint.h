#pragma once
// Checkpoints: every K steps each rank writes its shard (parameters, AdamW moments, step) to
// DIR/step_<N>/rank_<R>.bin and, once all shards are on disk, world rank 0 writes DIR/manifest.json
// naming that step; every file goes to a temporary name, is flushed (fsync) and renamed
// (json_io.h's write_file_atomic), so a crash leaves the previous checkpoint whole. A resumed
// run loads the manifest's step and continues bit for bit: data are addressed by global sample
// index and AdamW's step count comes back with the moments. DIR must be one shared file system.

#include <mpi.h>

#include <string>

#include "meshplan/executor.h"
#include "trainer.h"

namespace meshplan::executor {

/// Collective. Throws RuntimeError naming the rank and path when a file cannot be written.
void write_checkpoint(const std::string& dir, Trainer& trainer, const planner::Plan& plan,
                      const ExecuteOptions& options, MPI_Comm world);

/// Collective. Throws InputError (on every rank) when the manifest or a shard is missing,
/// malformed, or from another plan, data or learning rate.
void read_checkpoint(const std::string& dir, Trainer& trainer, const planner::Plan& plan,
                     const ExecuteOptions& options, MPI_Comm world);

}  // namespace meshplan::executor
