// Checkpoints on one real rank (MPI_COMM_SELF): a reload continues bit for bit; a checkpoint
// from another run, a corrupt shard, and a directory holding another run's checkpoint are
// refused with the file or field named; only this run's checkpoints are ever removed.
#include "checkpoint.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "meshplan/errors.h"
#include "tiny_plan.h"

namespace meshplan::executor {
namespace {

namespace fs = std::filesystem;
using testing::make_layout;

std::string scratch_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() /
                   ("meshplan_checkpoint_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

std::shared_ptr<const TokenSource> synthetic(const planner::Plan& plan) {
  return make_synthetic_source(plan.model.vocab_size);
}

TEST_CASE("a reloaded checkpoint continues bit for bit") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("reload");
  options.checkpoint_every = 2;
  Trainer straight(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  straight.train_step();
  straight.train_step();
  Checkpoints(plan, options, MPI_COMM_SELF).write(straight);
  const double expected = straight.train_step().loss;

  ExecuteOptions resume = options;
  resume.resume = true;
  Trainer resumed(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  CHECK(Checkpoints(plan, resume, MPI_COMM_SELF).resume(resumed) ==
        (fs::path(options.checkpoint_dir) / "step_00000002").string());
  CHECK(resumed.steps_done() == 2);
  const StepOutcome third = resumed.train_step();
  CHECK(third.step == 3);
  CHECK(third.loss == expected);  // bitwise: same state, same data, same order
  CHECK(resumed.shard_bytes() == straight.shard_bytes());
  fs::remove_all(options.checkpoint_dir);
}

TEST_CASE("a checkpoint from another run or a missing one is refused") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("refuse");
  options.checkpoint_every = 1;
  options.resume = true;
  Trainer trainer(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  const std::string manifest = options.checkpoint_dir + "/manifest.json";
  // Refused before the directory is made (a failed --resume used to leave it behind, empty).
  CHECK_THROWS_WITH_AS(Checkpoints(plan, options, MPI_COMM_SELF).resume(trainer),
                       (options.checkpoint_dir +
                        ": --resume: no checkpoint to resume from (no manifest.json, no directory)")
                           .c_str(),
                       InputError);
  CHECK_FALSE(fs::exists(options.checkpoint_dir));
  trainer.train_step();
  ExecuteOptions first_run = options;
  first_run.resume = false;
  Checkpoints(plan, first_run, MPI_COMM_SELF).write(trainer);
  ExecuteOptions other = options;
  other.learning_rate = 2e-3;
  CHECK_THROWS_WITH_AS(
      Checkpoints(plan, other, MPI_COMM_SELF).resume(trainer),
      (manifest + ": identity.learning_rate: the checkpoint was written by another run (0.002 "
                  "here)")
          .c_str(),
      InputError);
  // A fresh run (no --resume) refuses the directory before it writes anything.
  ExecuteOptions fresh = options;
  fresh.resume = false;
  CHECK_THROWS_WITH_AS(Checkpoints(plan, fresh, MPI_COMM_SELF),
                       (options.checkpoint_dir +
                        ": --checkpoint-dir: holds another run's checkpoint (manifest.json); "
                        "--resume continues it, --overwrite-checkpoints replaces it")
                           .c_str(),
                       InputError);
  fresh.overwrite_checkpoints = true;
  CHECK_NOTHROW(Checkpoints(plan, fresh, MPI_COMM_SELF));
  fs::remove_all(options.checkpoint_dir);
}

TEST_CASE("a flipped bit in a shard is refused on resume, naming the file") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("flip");
  options.checkpoint_every = 1;
  Trainer trainer(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  trainer.train_step();
  Checkpoints(plan, options, MPI_COMM_SELF).write(trainer);
  const std::string shard = options.checkpoint_dir + "/step_00000001/rank_00000.bin";
  {
    // Flip one bit of a parameter (past the 24-byte header), in place.
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(1000);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    file.seekp(1000);
    file.write(&byte, 1);
  }
  options.resume = true;
  Trainer resumed(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  try {
    Checkpoints(plan, options, MPI_COMM_SELF).resume(resumed);
    FAIL("the corrupt shard was resumed");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.rfind(shard + ": corrupt checkpoint shard: CRC-32C ", 0) == 0);
    CHECK(what.find(", the manifest says ") != std::string::npos);
  }
  fs::remove_all(options.checkpoint_dir);
}

TEST_CASE("a shard of another size says what differs") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  Trainer trainer(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  std::string bytes = trainer.shard_bytes();
  // Header: steps done, stored parameters, AdamW moments (3 x int64). Same total size, another
  // parameter count: the message names the counts, not two equal byte sizes.
  int64_t header[3] = {0, 0, 0};
  std::memcpy(header, bytes.data(), sizeof(header));
  const int64_t stored = header[1];
  header[1] = stored + 1;
  std::memcpy(bytes.data(), header, sizeof(header));
  CHECK_THROWS_WITH_AS(trainer.load_shard_bytes(bytes, "s.bin"),
                       fmt::format("s.bin: checkpoint shard does not match this rank's parameters "
                                   "(it stores {} parameters, this rank {})",
                                   stored + 1, stored)
                           .c_str(),
                       InputError);
}

TEST_CASE("only this run's oldest checkpoints are removed, keep_checkpoints are kept") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("keep");
  options.checkpoint_every = 1;
  options.keep_checkpoints = 2;
  const fs::path root(options.checkpoint_dir);
  fs::create_directories(root / "step_important");
  std::ofstream(root / "step_important" / "notes.txt") << "not meshplan's\n";
  Trainer trainer(plan, synthetic(plan), AdamWConfig{}, MPI_COMM_SELF);
  Checkpoints checkpoints(plan, options, MPI_COMM_SELF);
  for (int step = 1; step <= 4; step++) {
    trainer.train_step();
    checkpoints.write(trainer);
  }
  CHECK(fs::exists(root / "step_important" / "notes.txt"));
  CHECK(!fs::exists(root / "step_00000001"));
  CHECK(!fs::exists(root / "step_00000002"));
  CHECK(fs::exists(root / "step_00000003" / "rank_00000.bin"));
  CHECK(fs::exists(root / "step_00000004" / "rank_00000.bin"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace meshplan::executor
