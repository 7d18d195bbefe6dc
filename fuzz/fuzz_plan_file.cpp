// libFuzzer target: a plan file through planner::read_plan_file, the reader `explain`,
// `simulate` and `execute` use. Seeds: fuzz/corpus/fuzz_plan_file.

#include "fuzz_input.h"
#include "meshplan/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = meshplan::fuzz::scratch_path("plan.json");
  meshplan::fuzz::write_input(path, data, size);
  return meshplan::fuzz::run_loader([&] { meshplan::planner::read_plan_file(path); });
}
