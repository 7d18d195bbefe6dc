// libFuzzer target: a checkpoint's manifest.json, read by executor::Checkpoints::resume beside a
// valid shard. Seeds: fuzz/corpus/fuzz_checkpoint_manifest.

#include "checkpoint_fixture.h"

namespace {
meshplan::fuzz::CheckpointFixture* fixture = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fixture = &meshplan::fuzz::checkpoint_fixture(argc, argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshplan::fuzz::write_input(fixture->options.checkpoint_dir + "/manifest.json", data, size);
  return meshplan::fuzz::read_back(*fixture);
}
