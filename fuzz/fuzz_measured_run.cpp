// libFuzzer target: a measured run through reports::read_measured_run, the reader `compare`
// uses (meshplan execute's --json, Megatron-LM, torchtitan and DeepSpeed logs), against a fixed
// plan of 8 ranks (tp 2, pp 2, dp 2), so rank-to-stage mapping and the batch checks run too.
// Seeds: fuzz/corpus/fuzz_measured_run.

#include "fuzz_input.h"
#include "meshplan/compare.h"
#include "meshplan/models.h"

namespace {

meshplan::planner::Plan fuzz_plan() {
  meshplan::planner::Plan plan;
  plan.model = meshplan::models::load_model("llama2-7b");
  plan.cluster = meshplan::models::load_cluster("dgx-a100-80gb");
  plan.layout.tp = 2;
  plan.layout.pp = 2;
  plan.layout.dp = 2;
  plan.layout.micro_batch = 1;
  plan.layout.global_batch = 16;
  plan.num_gpus = 8;
  return plan;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = meshplan::fuzz::scratch_path("measured.log");
  static const meshplan::planner::Plan plan = fuzz_plan();
  meshplan::fuzz::write_input(path, data, size);
  return meshplan::fuzz::run_loader([&] { meshplan::reports::read_measured_run(path, plan); });
}
