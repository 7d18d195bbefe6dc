// libFuzzer target: a model file through the loader `plan --model FILE` uses and then through
// the layout search on 16 H100s, so every model the loader accepts is costed: memory,
// compute, communication and the schedule of each layout. The loader may reject the input
// (InputError), the search may find no layout for it; what it must never do is crash, leave
// undefined behaviour, or rank a plan whose figures are not finite and positive. Seeds:
// fuzz/corpus/fuzz_model_search (model presets and Hugging Face configs).

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "fuzz_input.h"
#include "meshplan/models.h"
#include "meshplan/search.h"

namespace {

// A ranked plan with a figure no user could act on is a finding, as a crash is.
void require_finite(const meshplan::planner::PlanEstimate& estimate) {
  const bool ok = std::isfinite(estimate.step_time_s) && estimate.step_time_s > 0 &&
                  std::isfinite(estimate.mfu) && estimate.mfu >= 0 &&
                  std::isfinite(estimate.tokens_per_s) && estimate.tokens_per_s > 0 &&
                  estimate.peak_memory_bytes > 0;
  if (!ok) {
    std::fprintf(stderr,
                 "ranked plan with figures out of range: step %g s, mfu %g, %g tokens/s, "
                 "peak %lld B\n",
                 estimate.step_time_s, estimate.mfu, estimate.tokens_per_s,
                 static_cast<long long>(estimate.peak_memory_bytes));
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshplan;
  static const std::string path = fuzz::scratch_path("model.json");
  static const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  fuzz::write_input(path, data, size);
  return fuzz::run_loader([&] {
    std::string note;
    const models::TransformerConfig model = models::load_training_model(path, std::nullopt, &note);
    planner::SearchSpace space;
    space.num_gpus = 16;
    space.global_batch = 32;
    const planner::SearchResult result = planner::search_layouts(
        model, cluster, space, planner::PlanOptions{}, planner::Objective::kTime, 8);
    for (const planner::PlanEstimate& estimate : result.best) {
      require_finite(estimate);
    }
  });
}
