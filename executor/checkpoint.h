#pragma once
// Checkpoints: every K steps each rank writes its shard (parameters, AdamW moments, step) to
// DIR/step_<N>/rank_<R>.bin (N zero-padded to 8 digits, R to 5) and, once all shards are on
// disk, world rank 0 writes DIR/manifest.json: the run's id, its identity (model, layout, data,
// learning rate), and the run's kept checkpoints, each with every shard's size and CRC-32C;
// every file goes to a temporary name, is flushed (fsync) and renamed (json_io.h's
// write_file_atomic), so a crash leaves the previous checkpoint whole. Only the run's own
// checkpoints are ever removed (the shards it wrote, then their step directory if empty), the
// oldest first once more than `keep_checkpoints` are on disk; a resumed run continues the run
// it resumes (same id, same list). A fresh run refuses a DIR that holds another run's manifest,
// or a step directory it would write, unless told to overwrite (then it replaces those files
// and deletes nothing of the other run's). A resumed run loads the manifest's newest step,
// verifies each shard's size and CRC-32C, and continues bit for bit: data are addressed by
// global sample index and AdamW's step count comes back with the moments. DIR must be one
// shared file system.

#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/executor.h"
#include "trainer.h"

namespace meshplan::executor {

class Checkpoints {
 public:
  /// Collective, before the first step. Throws InputError on every rank when DIR cannot be
  /// created or written, or (a fresh run, no overwrite) holds another run's checkpoint or a
  /// step directory this run would write.
  Checkpoints(const planner::Plan& plan, const ExecuteOptions& options, MPI_Comm world);

  /// Collective: the manifest's newest checkpoint into `trainer`. Returns its step directory.
  /// Throws InputError (on every rank) when the manifest or a shard is missing, malformed,
  /// corrupt (size or CRC-32C differs from the manifest: the file is named), or from another
  /// plan, data or learning rate.
  std::string resume(Trainer& trainer);

  /// Collective: writes the trainer's step, then removes this run's checkpoints beyond the
  /// newest keep_checkpoints. Returns the step directory. Throws RuntimeError naming the rank
  /// and path when a file cannot be written.
  std::string write(Trainer& trainer);

 private:
  std::string check_directory_() const;
  std::string check_planned_steps_(int64_t steps_done, const nlohmann::json& own) const;
  nlohmann::json read_manifest_() const;
  void verify_and_load_(const nlohmann::json& checkpoint, Trainer& trainer) const;
  nlohmann::json gather_shards_(const std::string& bytes) const;
  /// Completes a request on world_ under the watchdog's deadline (--collective-timeout).
  void wait_(MPI_Request* request, const char* what) const;
  std::string broadcast_string_(const std::string& text) const;
  void update_manifest_(int64_t step, const std::string& directory, nlohmann::json shards);

  const planner::Plan& plan_;
  const ExecuteOptions& options_;
  MPI_Comm world_;
  int rank_ = 0;
  std::string run_id_;
  nlohmann::json kept_ = nlohmann::json::array();  // rank 0: this run's checkpoints, oldest first
};

}  // namespace meshplan::executor
