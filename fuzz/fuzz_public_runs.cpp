// libFuzzer target: a published-runs file (validation/README.md) through
// planner::validate_runs, as `meshplan validate RUNS.json` reads it. Seeds:
// fuzz/corpus/fuzz_public_runs.

#include "fuzz_input.h"
#include "meshplan/json_io.h"
#include "meshplan/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = meshplan::fuzz::scratch_path("runs.json");
  meshplan::fuzz::write_input(path, data, size);
  return meshplan::fuzz::run_loader(
      [&] { meshplan::planner::validate_runs(meshplan::read_json_file(path), path); });
}
