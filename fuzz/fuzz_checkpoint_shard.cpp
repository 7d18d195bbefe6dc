// libFuzzer target: a checkpoint shard (the one rank's .bin file), read by
// executor::Checkpoints::resume under a valid manifest. The manifest is rewritten with the
// input's size and CRC-32C, so inputs reach the shard parser instead of stopping at the
// checksum check (which fuzz_checkpoint_manifest covers). Seeds: fuzz/corpus/fuzz_checkpoint_shard.

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "checkpoint_fixture.h"
#include "crc32c.h"

namespace {

meshplan::fuzz::CheckpointFixture* fixture = nullptr;
std::string valid_manifest;  // the fixture's manifest.json as written

// Every shard entry of `manifest` gets the input's byte count and CRC-32C (as the writer
// formats it: 8 lower-case hex digits).
std::string manifest_for(const uint8_t* data, size_t size) {
  nlohmann::json manifest = nlohmann::json::parse(valid_manifest);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  char crc[9];
  std::snprintf(crc, sizeof(crc), "%08x", meshplan::executor::crc32c(bytes));
  for (nlohmann::json& checkpoint : manifest.at("checkpoints")) {
    for (nlohmann::json& shard : checkpoint.at("shards")) {
      shard["bytes"] = size;
      shard["crc32c"] = crc;
    }
  }
  return manifest.dump(2);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  fixture = &meshplan::fuzz::checkpoint_fixture(argc, argv);
  std::ifstream in(fixture->options.checkpoint_dir + "/manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  valid_manifest = text.str();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string manifest = manifest_for(data, size);
  meshplan::fuzz::write_input(fixture->options.checkpoint_dir + "/manifest.json",
                              reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size());
  meshplan::fuzz::write_input(fixture->shard_path, data, size);
  return meshplan::fuzz::read_back(*fixture);
}
