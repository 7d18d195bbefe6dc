// libFuzzer target: a cluster description through models::load_cluster, the loader
// `plan --cluster FILE` uses. Seeds: fuzz/corpus/fuzz_cluster_config.

#include "fuzz_input.h"
#include "meshplan/models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = meshplan::fuzz::scratch_path("cluster.json");
  meshplan::fuzz::write_input(path, data, size);
  return meshplan::fuzz::run_loader([&] { meshplan::models::load_cluster(path); });
}
