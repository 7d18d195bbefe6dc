// Which transformer layers each pipeline stage holds: the even split, or an uneven per-stage
// list (Megatron-Core's first/last stage counts, or any explicit list).

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

// Megatron-Core's embedding/loss-accounted split (--account-for-embedding-in-pipeline-split,
// --account-for-loss-in-pipeline-split; transformer_block.py get_num_layers_to_build): every
// stage holds L slots, L / vpp per chunk; the embedding takes a slot of the first chunk of stage
// 0 and the loss (LM head) one of the last chunk of the last stage, so those chunks build one
// layer less (Llama 3, Sec. 3.3.2: "the first model chunk on the first stage has only the
// embedding, and the last model chunk on the last stage has only output projection and loss
// calculation" at one layer per chunk).
// Whether `layers` is the accounted form for vpp chunks: every stage L layers except a first
// and/or last stage of L - 1 (at least one of them), with L divisible by vpp.
bool accounted_split(const std::vector<int64_t>& layers, int64_t vpp) {
  if (layers.size() < 2) {
    return false;
  }
  // L is the middle stages' count; with pp 2 (no middle) two equal counts are both short.
  const bool two_equal = layers.size() == 2 && layers.front() == layers.back();
  const int64_t slots = *std::max_element(layers.begin(), layers.end()) + (two_equal ? 1 : 0);
  const bool embedding = layers.front() == slots - 1;
  const bool loss = layers.back() == slots - 1;
  const auto full = [slots](int64_t n) { return n == slots; };
  const bool middle_full = std::all_of(layers.begin() + 1, layers.end() - 1, full);
  const bool ends_ok = (embedding || full(layers.front())) && (loss || full(layers.back()));
  return middle_full && ends_ok && (embedding || loss) && slots % vpp == 0;
}

// Whether every stage's count divides by vpp (Megatron-Core's first/last rule applies).
bool divisible_by_vpp(const std::vector<int64_t>& layers, int64_t vpp) {
  return std::all_of(layers.begin(), layers.end(), [vpp](int64_t n) { return n % vpp == 0; });
}

// stage_layer_range of an uneven split, computed for one (stage, chunk).
LayerRange uneven_layer_range(const Layout& layout, int64_t stage, int64_t chunk) {
  const std::vector<int64_t>& layers = layout.stage_layers;
  const int64_t vpp = layout.vpp;
  const int64_t front = layers.front();
  if (is_accounted_split(layers, vpp)) {
    // The short ends are the counts vpp does not divide (L - 1 with L % vpp == 0).
    const bool embedding = front % vpp != 0;
    const bool loss = layers.back() % vpp != 0;
    // Virtual stage v starts after v chunks of L / vpp slots, less the embedding's slot when
    // v > 0 (transformer_layer.py get_transformer_layer_offset: "offset -= 1" off the first
    // stage).
    const int64_t per_chunk = (embedding ? front + 1 : front) / vpp;
    const int64_t v = virtual_stage(layout.pp, stage, chunk);
    const int64_t first = v * per_chunk - (embedding && v > 0 ? 1 : 0);
    const bool has_embedding = embedding && v == 0;
    const bool has_loss = loss && v == layout.pp * vpp - 1;
    return {first, first + per_chunk - (has_embedding ? 1 : 0) - (has_loss ? 1 : 0)};
  }
  // Any other split: each stage's layers over its chunks as evenly as they go, the longer
  // chunks last (chunk_layer_count), laid out in virtual-stage order v = c pp + s as Megatron-
  // Core's --pipeline-model-parallel-layout lists them (pipeline_parallel_layer_layout.py
  // get_layer_offset). Counts vpp divides give every chunk n_s / vpp, which is also Megatron-
  // Core's get_transformer_layer_offset for uneven first/last stages. Chunks 0..chunk-1 of
  // stage s hold chunk (n_s / vpp) layers plus one for each of them among its last n_s % vpp.
  int64_t first = 0;
  for (int64_t s = 0; s < layout.pp; ++s) {
    const int64_t n = layers[static_cast<size_t>(s)];
    first += chunk * (n / vpp) + std::max<int64_t>(0, chunk - (vpp - n % vpp));
    if (s < stage) {
      first += chunk_layer_count(n, vpp, chunk);
    }
  }
  return {first, first + chunk_layer_count(layers[static_cast<size_t>(stage)], vpp, chunk)};
}

}  // namespace

LayerRange stage_layer_range(const models::TransformerConfig& model, const Layout& layout,
                             int64_t stage, int64_t chunk) {
  if (layout.stage_layers.empty() && layout.virtual_stage_layers.empty()) {
    const int64_t per_chunk = model.num_layers / (layout.pp * layout.vpp);
    const int64_t v = virtual_stage(layout.pp, stage, chunk);
    return {v * per_chunk, (v + 1) * per_chunk};
  }
  // Uneven: every (stage, chunk) of the split at once, kept for the next call (this runs for
  // every chunk of every layout the search costs, and consecutive layouts share splits). One
  // entry per thread, as peak_in_flight's memo (sweep searches in parallel).
  struct Memo {
    std::vector<int64_t> stage_layers, virtual_stage_layers;
    int64_t vpp = 0;
    std::vector<LayerRange> ranges;  // [chunk * pp + stage]
  };
  static thread_local Memo memo;
  if (memo.vpp != layout.vpp || memo.stage_layers != layout.stage_layers ||
      memo.virtual_stage_layers != layout.virtual_stage_layers) {
    memo.ranges.clear();
    int64_t first = 0;
    for (int64_t c = 0; c < layout.vpp; ++c) {
      for (int64_t s = 0; s < layout.pp; ++s) {
        if (layout.virtual_stage_layers.empty()) {
          memo.ranges.push_back(uneven_layer_range(layout, s, c));
        } else {
          // A layout string's counts, in the virtual-stage order they are listed in
          // (pipeline_parallel_layer_layout.py get_layer_offset).
          const int64_t count = layout.virtual_stage_layers[memo.ranges.size()];
          memo.ranges.push_back({first, first + count});
          first += count;
        }
      }
    }
    memo.stage_layers = layout.stage_layers;
    memo.virtual_stage_layers = layout.virtual_stage_layers;
    memo.vpp = layout.vpp;
  }
  return memo.ranges[static_cast<size_t>(virtual_stage(layout.pp, stage, chunk))];
}

int64_t chunk_layer_count(int64_t stage_layer_count, int64_t vpp, int64_t chunk) {
  // n / vpp layers each, and one more in the last n % vpp chunks.
  return stage_layer_count / vpp + (chunk >= vpp - stage_layer_count % vpp ? 1 : 0);
}

int64_t max_chunk_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage) {
  int64_t most = 0;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    most = std::max(most, stage_layer_range(model, layout, stage, chunk).count());
  }
  return most;
}

bool is_accounted_split(const std::vector<int64_t>& stage_layers, int64_t vpp) {
  return !stage_layers.empty() && !divisible_by_vpp(stage_layers, vpp) &&
         accounted_split(stage_layers, vpp);
}

bool split_allows_vpp(const std::vector<int64_t>& stage_layers, int64_t num_layers, int64_t pp,
                      int64_t vpp) {
  if (stage_layers.empty()) {
    return num_layers % (pp * vpp) == 0;
  }
  return divisible_by_vpp(stage_layers, vpp) || accounted_split(stage_layers, vpp);
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

std::vector<int64_t> checked_stage_layers(const models::TransformerConfig& model, int64_t pp,
                                          std::vector<int64_t> stage_layers,
                                          const std::string& where) {
  Layout stated;
  stated.pp = pp;
  stated.stage_layers = std::move(stage_layers);
  const std::string reason = check_stage_layers(model, stated);
  if (!reason.empty()) {
    throw InputError(fmt::format("{}: {}", where, reason));
  }
  return canonical_stage_layers(std::move(stated.stage_layers));
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
  if (middle_layers < 0) {
    throw InputError(fmt::format("{}: first and last stage layers ({} + {}) exceed num_layers {}",
                                 field, first.value_or(0), last.value_or(0), num_layers));
  }
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

namespace {

// A virtual-stage list (Layout::virtual_stage_layers) against pp, vpp and the per-stage counts.
std::string check_virtual_stage_layers(const models::TransformerConfig& model,
                                       const Layout& layout) {
  const std::vector<int64_t>& layers = layout.virtual_stage_layers;
  if (static_cast<int64_t>(layers.size()) != layout.pp * layout.vpp) {
    return fmt::format("virtual_stage_layers: {} entries for pp {} x vpp {} ({})", layers.size(),
                       layout.pp, layout.vpp, format_stage_layers(layers));
  }
  if (layout.stage_layers.empty() && model.num_layers % layout.pp != 0) {
    return fmt::format(
        "virtual_stage_layers: num_layers {} not divisible by pp {} without "
        "stage_layers ({})",
        model.num_layers, layout.pp, format_stage_layers(layers));
  }
  for (size_t v = 0; v < layers.size(); ++v) {
    if (layers[v] < 0 || layers[v] > model.num_layers) {
      return fmt::format(
          "virtual_stage_layers: virtual stage {} has {} layers, expected 0 to num_layers {} ({})",
          v, layers[v], model.num_layers, format_stage_layers(layers));
    }
  }
  const std::vector<int64_t> sums = stage_sums_of_virtual_stages(layout.pp, layers);
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    const int64_t sum = sums[static_cast<size_t>(stage)];
    const int64_t expected = layout.stage_layers.empty()
                                 ? model.num_layers / layout.pp
                                 : layout.stage_layers[static_cast<size_t>(stage)];
    if (sum != expected || sum < 1) {
      return fmt::format(
          "virtual_stage_layers: stage {} sums to {} layers, its stage holds {} (at least one) "
          "({})",
          stage, sum, expected, format_stage_layers(layers));
    }
  }
  return "";
}

}  // namespace

std::string check_stage_layers(const models::TransformerConfig& model, const Layout& layout) {
  if (layout.stage_layers.empty()) {
    return layout.virtual_stage_layers.empty() ? "" : check_virtual_stage_layers(model, layout);
  }
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
  // Every split into vpp chunks is admitted: the counts vpp divides and the embedding/loss-
  // accounted form as Megatron-Core's flags write them, any other as its
  // --pipeline-model-parallel-layout does (stage_layer_range).
  return layout.virtual_stage_layers.empty() ? "" : check_virtual_stage_layers(model, layout);
}

}  // namespace meshplan::planner
