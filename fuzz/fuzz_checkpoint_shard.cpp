// libFuzzer target: a checkpoint shard (the one rank's .bin file), read by
// executor::read_checkpoint under a valid manifest. Seeds: fuzz/corpus/fuzz_checkpoint_shard.

#include "checkpoint_fixture.h"

namespace {
meshplan::fuzz::CheckpointFixture* fixture = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fixture = &meshplan::fuzz::checkpoint_fixture(argc, argv);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshplan::fuzz::write_input(fixture->shard_path, data, size);
  return meshplan::fuzz::read_back(*fixture);
}
