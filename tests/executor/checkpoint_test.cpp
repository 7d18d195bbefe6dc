// Checkpoints on one real rank (MPI_COMM_SELF): a reload continues bit for bit, and a checkpoint
// from another run is refused with the field named.
#include "checkpoint.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>

#include "meshplan/errors.h"
#include "tiny_plan.h"

namespace meshplan::executor {
namespace {

using testing::make_layout;

std::string scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meshplan_checkpoint_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST_CASE("a reloaded checkpoint continues bit for bit") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("reload");
  options.checkpoint_every = 2;
  AdamWConfig adamw;
  const std::shared_ptr<const TokenSource> data = make_synthetic_source(plan.model.vocab_size);
  Trainer straight(plan, data, adamw, MPI_COMM_SELF);
  straight.train_step();
  straight.train_step();
  write_checkpoint(options.checkpoint_dir, straight, plan, options, MPI_COMM_SELF);
  const double expected = straight.train_step().loss;

  Trainer resumed(plan, data, adamw, MPI_COMM_SELF);
  read_checkpoint(options.checkpoint_dir, resumed, plan, options, MPI_COMM_SELF);
  CHECK(resumed.steps_done() == 2);
  const StepOutcome third = resumed.train_step();
  CHECK(third.step == 3);
  CHECK(third.loss == expected);  // bitwise: same state, same data, same order
  CHECK(resumed.shard_bytes() == straight.shard_bytes());
  std::filesystem::remove_all(options.checkpoint_dir);
}

TEST_CASE("a checkpoint from another run or a missing one is refused") {
  const planner::Plan plan = testing::tiny_plan(make_layout(1, 1, 1, 4, 8));
  ExecuteOptions options;
  options.checkpoint_dir = scratch_dir("refuse");
  options.checkpoint_every = 1;
  const std::shared_ptr<const TokenSource> data = make_synthetic_source(plan.model.vocab_size);
  Trainer trainer(plan, data, AdamWConfig{}, MPI_COMM_SELF);
  const std::string manifest = options.checkpoint_dir + "/manifest.json";
  CHECK_THROWS_WITH_AS(
      read_checkpoint(options.checkpoint_dir, trainer, plan, options, MPI_COMM_SELF),
      (manifest + ": cannot read file").c_str(), InputError);
  trainer.train_step();
  write_checkpoint(options.checkpoint_dir, trainer, plan, options, MPI_COMM_SELF);
  ExecuteOptions other = options;
  other.learning_rate = 2e-3;
  CHECK_THROWS_WITH_AS(
      read_checkpoint(options.checkpoint_dir, trainer, plan, other, MPI_COMM_SELF),
      (manifest + ": identity.learning_rate: the checkpoint was written by another run (0.002 "
                  "here)")
          .c_str(),
      InputError);
  std::filesystem::remove_all(options.checkpoint_dir);
}

}  // namespace
}  // namespace meshplan::executor
