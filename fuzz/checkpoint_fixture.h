#pragma once
// The checkpoint fuzz targets' fixture: one real rank (MPI_COMM_SELF), the `tiny` preset on
// `local-cpu`, and a valid checkpoint written once after one step; each input then replaces
// one of its files and is read back with executor::Checkpoints::resume, as `execute --resume`
// does.
// MESHPLAN_FUZZ_SEED_DIR=DIR in the environment copies the valid manifest and shard into DIR.

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "checkpoint.h"
#include "fuzz_input.h"
#include "meshplan/models.h"

// Open MPI's libraries are built without frame pointers: ASan's default (fast) unwinder loses
// the stacks of their allocations, so their leaks could not be matched to lsan.supp. The slow
// unwinder keeps every leak attributable (meshplan's own are still reported).
extern "C" const char* __asan_default_options() {
  return "fast_unwind_on_malloc=0";
}

namespace meshplan::fuzz {

struct CheckpointFixture {
  planner::Plan plan;
  executor::ExecuteOptions options;         // the run that wrote the checkpoint
  executor::ExecuteOptions resume_options;  // the same, resuming
  std::unique_ptr<executor::Trainer> trainer;
  std::string shard_path;  // the one rank's shard named by the valid manifest
};

/// Initialises MPI (singleton) and writes the valid checkpoint; call once per process.
inline CheckpointFixture& checkpoint_fixture(int* argc, char*** argv) {
  static CheckpointFixture fixture;
  // Open MPI unloads unused components during MPI_Init; kept loaded, their allocations stay
  // attributable to Open MPI's libraries (tests/sanitizers/lsan.supp suppresses only those).
  ::setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
  MPI_Init(argc, argv);
  fixture.plan.model = models::load_model("tiny");
  fixture.plan.cluster = models::load_cluster("local-cpu");
  fixture.plan.layout.micro_batch = 2;
  fixture.plan.layout.global_batch = 4;
  fixture.plan.num_gpus = fixture.plan.layout.num_gpus();
  fixture.options.checkpoint_dir = scratch_path("checkpoint");
  fixture.options.checkpoint_every = 1;
  std::filesystem::remove_all(fixture.options.checkpoint_dir);
  fixture.trainer = std::make_unique<executor::Trainer>(
      fixture.plan, executor::make_synthetic_source(fixture.plan.model.vocab_size),
      executor::AdamWConfig{}, MPI_COMM_SELF);
  fixture.trainer->train_step();
  executor::Checkpoints(fixture.plan, fixture.options, MPI_COMM_SELF).write(*fixture.trainer);
  fixture.resume_options = fixture.options;
  fixture.resume_options.resume = true;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(fixture.options.checkpoint_dir)) {
    if (entry.path().extension() == ".bin") {  // one step, one rank: the only shard
      fixture.shard_path = entry.path().string();
    }
  }
  if (fixture.shard_path.empty()) {
    std::fprintf(stderr, "fuzz: no shard (*.bin) in %s\n", fixture.options.checkpoint_dir.c_str());
    std::abort();
  }
  // MESHPLAN_FUZZ_SEED_DIR=DIR copies the valid files there: the seeds of fuzz/corpus/.
  if (const char* seeds = std::getenv("MESHPLAN_FUZZ_SEED_DIR")) {
    std::filesystem::copy_file(fixture.options.checkpoint_dir + "/manifest.json",
                               std::string(seeds) + "/manifest.json");
    std::filesystem::copy_file(fixture.shard_path, std::string(seeds) + "/shard.bin");
  }
  return fixture;
}

/// Reads the checkpoint back into the fixture's trainer; an InputError is the expected answer.
inline int read_back(CheckpointFixture& fixture) {
  return run_loader([&] {
    executor::Checkpoints(fixture.plan, fixture.resume_options, MPI_COMM_SELF)
        .resume(*fixture.trainer);
  });
}

}  // namespace meshplan::fuzz
