// Which transformer layers each pipeline stage holds: the even split, or an uneven per-stage
// list (Megatron-Core's first/last stage counts, or any explicit list).

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

LayerRange stage_layer_range(const models::TransformerConfig& model, const Layout& layout,
                             int64_t stage, int64_t chunk) {
  if (layout.stage_layers.empty()) {
    const int64_t per_chunk = model.num_layers / (layout.pp * layout.vpp);
    const int64_t v = virtual_stage(layout.pp, stage, chunk);
    return {v * per_chunk, (v + 1) * per_chunk};
  }
  // Megatron-Core transformer_layer.py get_transformer_layer_offset (uneven, interleaved):
  // chunk c of stage s holds n_s / vpp layers after c rounds of l / vpp layers and the chunks
  // c of stages 0..s-1 (vpp 1: the layers of the stages before s).
  const auto begin = layout.stage_layers.begin();
  const int64_t before = std::accumulate(begin, begin + stage, int64_t{0}) / layout.vpp;
  const int64_t first = chunk * (model.num_layers / layout.vpp) + before;
  return {first, first + layout.stage_layers[static_cast<size_t>(stage)] / layout.vpp};
}

int64_t stage_layer_count(const models::TransformerConfig& model, const Layout& layout,
                          int64_t stage) {
  if (layout.stage_layers.empty()) {
    return model.num_layers / layout.pp;
  }
  return layout.stage_layers[static_cast<size_t>(stage)];
}

std::vector<int64_t> canonical_stage_layers(std::vector<int64_t> stage_layers) {
  const bool even = std::adjacent_find(stage_layers.begin(), stage_layers.end(),
                                       std::not_equal_to<>()) == stage_layers.end();
  return even ? std::vector<int64_t>{} : stage_layers;
}

std::vector<int64_t> first_last_stage_layers(int64_t num_layers, int64_t pp,
                                             std::optional<int64_t> first,
                                             std::optional<int64_t> last,
                                             const std::string& field) {
  // Megatron-Core transformer_config.py __post_init__: first and last must be > 0, the rest
  // divides evenly over the pp minus one or two middle stages.
  for (const auto& [count, which] : {std::pair{first, "first"}, {last, "last"}}) {
    if (count && (*count < 1 || *count > num_layers)) {
      throw InputError(fmt::format("{}: {} stage layers must be between 1 and num_layers {} ({})",
                                   field, which, num_layers, *count));
    }
  }
  if (pp < 2) {
    throw InputError(fmt::format("{}: an uneven split needs pp >= 2 (pp {})", field, pp));
  }
  const int64_t ends = (first ? 1 : 0) + (last ? 1 : 0);
  const int64_t middle_stages = pp - ends;
  const int64_t middle_layers = num_layers - first.value_or(0) - last.value_or(0);
  if (middle_stages == 0 ? middle_layers != 0
                         : middle_layers < middle_stages || middle_layers % middle_stages != 0) {
    throw InputError(fmt::format(
        "{}: the other {} layers do not split evenly into {} stages of at least one ({} layers)",
        field, middle_layers, middle_stages, num_layers));
  }
  std::vector<int64_t> layers(static_cast<size_t>(pp),
                              middle_stages == 0 ? 0 : middle_layers / middle_stages);
  if (first) {
    layers.front() = *first;
  }
  if (last) {
    layers.back() = *last;
  }
  return canonical_stage_layers(layers);
}

std::string check_stage_layers(const models::TransformerConfig& model, const Layout& layout) {
  const std::vector<int64_t>& layers = layout.stage_layers;
  if (static_cast<int64_t>(layers.size()) != layout.pp) {
    return fmt::format("stage_layers: {} entries for pp {} ({})", layers.size(), layout.pp,
                       format_stage_layers(layers));
  }
  for (size_t s = 0; s < layers.size(); ++s) {
    if (layers[s] < 1 || layers[s] > model.num_layers) {
      return fmt::format("stage_layers: stage {} has {} layers, expected 1 to num_layers {} ({})",
                         s, layers[s], model.num_layers, format_stage_layers(layers));
    }
  }
  const int64_t sum = std::accumulate(layers.begin(), layers.end(), int64_t{0});
  if (sum != model.num_layers) {
    return fmt::format("stage_layers: sum {} differs from num_layers {} ({})", sum,
                       model.num_layers, format_stage_layers(layers));
  }
  for (size_t s = 0; s < layers.size(); ++s) {
    if (layers[s] % layout.vpp != 0) {
      // Megatron-Core transformer_config.py __post_init__: "number of layers at first stage
      // ... must be divisible by virtual pipeline parallel degree" (and last, middle).
      return fmt::format("stage_layers: stage {} has {} layers, not divisible by vpp {} ({})", s,
                         layers[s], layout.vpp, format_stage_layers(layers));
    }
  }
  return "";
}

}  // namespace meshplan::planner
