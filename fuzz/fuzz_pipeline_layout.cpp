// libFuzzer target: Megatron-Core's layout string through planner::pipeline_layout_split, the
// reader `plan --pipeline-layout` uses, and back through format_pipeline_layout. Input: byte 0
// picks pp (1-16), byte 1 num_layers (1-64), byte 2 mtp_num_layers (0-2), the rest is the string.
// An InputError is the answer to a bad string; a string that is read must be written back to one
// that reads to the same virtual stages (otherwise abort: a finding). Seeds:
// fuzz/corpus/fuzz_pipeline_layout.

#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/pipeline_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) {
    return 0;
  }
  namespace planner = meshplan::planner;
  meshplan::models::TransformerConfig model = meshplan::models::load_model("tiny");
  const int64_t pp = 1 + data[0] % 16;
  model.num_layers = 1 + data[1] % 64;
  model.mtp_num_layers = data[2] % 3;
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);
  return meshplan::fuzz::run_loader([&] {
    const planner::PipelineLayoutSplit split =
        planner::pipeline_layout_split(model, pp, text, "--pipeline-layout");
    const std::vector<int64_t> counts =
        planner::parse_pipeline_layout(model, pp, text, "--pipeline-layout");
    planner::Layout layout;
    layout.pp = pp;
    layout.vpp = split.vpp;
    layout.stage_layers = split.stage_layers;
    layout.virtual_stage_layers = split.virtual_stage_layers;
    if (!planner::check_stage_layers(model, layout).empty()) {
      std::abort();  // a split the reader accepted that the layout check refuses
    }
    const std::string written = planner::format_pipeline_layout(model, layout);
    if (planner::parse_pipeline_layout(model, pp, written, "written") != counts) {
      std::abort();  // written back to other virtual stages
    }
  });
}
