// libFuzzer target: a model file (meshplan model JSON or Hugging Face config.json) through
// models::load_model, the loader `plan --model FILE` uses. Seeds: fuzz/corpus/fuzz_model_config.

#include "fuzz_input.h"
#include "meshplan/models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = meshplan::fuzz::scratch_path("model.json");
  meshplan::fuzz::write_input(path, data, size);
  return meshplan::fuzz::run_loader([&] {
    const meshplan::models::TransformerConfig model = meshplan::models::load_model(path);
    meshplan::models::count_parameters(model);
  });
}
