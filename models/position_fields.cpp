// no_rope_freq, qk_l2_norm and attention_chunk_size in meshplan's model format (models.h has
// their meaning and sources), and the training-length check of chunked attention.

#include "position_fields.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"

namespace meshplan::models {

namespace {

// Megatron-Core transformer_config.py: an integer N is [0] * (N - 1) + [1] repeated, after
// asserting num_layers % N == 0.
std::vector<int> no_rope_pattern(int64_t every, int64_t num_layers, const std::string& source) {
  if (every < 2) {
    throw InputError(fmt::format(
        "{}: no_rope_freq: an integer N makes every N-th layer NoPE; must be 2 or more ({})",
        source, every));
  }
  if (num_layers <= 0 || num_layers > kMaxLayers) {
    return {};  // validate_model refuses the layer count
  }
  if (num_layers % every != 0) {
    throw InputError(
        fmt::format("{}: no_rope_freq: must divide num_layers, as Megatron-Core asserts ({} % {})",
                    source, num_layers, every));
  }
  std::vector<int> layers(static_cast<size_t>(num_layers), 0);
  for (int64_t layer = every - 1; layer < num_layers; layer += every) {
    layers[static_cast<size_t>(layer)] = 1;
  }
  return layers;
}

std::vector<int> no_rope_list(const nlohmann::json& list, const std::string& source) {
  std::vector<int> layers;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& entry = list[i];
    if (!entry.is_number_integer() || (entry != 0 && entry != 1)) {
      throw InputError(fmt::format("{}: no_rope_freq[{}]: must be 1 (NoPE) or 0 (rotary) ({})",
                                   source, i, entry.dump()));
    }
    layers.push_back(entry.get<int>());
  }
  return layers;
}

}  // namespace

void read_position_variant_fields(const nlohmann::json& json, const std::string& source,
                                  TransformerConfig& model) {
  if (json.contains("no_rope_freq")) {
    const nlohmann::json& value = json["no_rope_freq"];
    if (value.is_array()) {
      model.no_rope_freq = no_rope_list(value, source);
    } else if (value.is_number_integer()) {
      model.no_rope_freq = no_rope_pattern(value.get<int64_t>(), model.num_layers, source);
    } else {
      const std::string text = value.dump();
      throw InputError(fmt::format(
          "{}: no_rope_freq: expected an integer N (every N-th layer NoPE) or a list of 0 and 1, "
          "one per layer ({})",
          source, text.size() > 60 ? text.substr(0, 57) + "..." : text));
    }
  }
  if (json.contains("qk_l2_norm")) {
    model.qk_l2_norm = require_bool(json, "qk_l2_norm", source);
  }
  if (json.contains("attention_chunk_size")) {
    model.attention_chunk_size = require_int(json, "attention_chunk_size", source);
  }
}

void validate_position_variants(const TransformerConfig& model, const std::string& source) {
  const bool standard_rope = model.positions == Positions::kRope && !model.is_mla();
  const std::vector<int>& layers = model.no_rope_freq;
  if (!layers.empty()) {
    if (!standard_rope) {
      throw InputError(fmt::format(
          "{}: no_rope_freq: NoPE layers need rotary positions and standard attention, not {}",
          source,
          model.is_mla() ? "MLA (kv_lora_rank)"
                         : fmt::format("positions {}", to_string(model.positions))));
    }
    if (static_cast<int64_t>(layers.size()) != model.num_layers) {
      throw InputError(
          fmt::format("{}: no_rope_freq: expected one entry per layer, {} ({} entries)", source,
                      model.num_layers, layers.size()));
    }
    if (model.has_mtp()) {
      throw InputError(fmt::format(
          "{}: no_rope_freq: NoPE layers beside multi-token prediction are not modelled (the MTP "
          "depth's layer has no entry; mtp_num_layers {})",
          source, model.mtp_num_layers));
    }
    if (std::all_of(layers.begin(), layers.end(), [](int entry) { return entry == 1; })) {
      throw InputError(fmt::format(
          "{}: no_rope_freq: every layer NoPE is a model without positions, not modelled", source));
    }
  }
  if (model.qk_l2_norm) {
    if (!standard_rope) {
      throw InputError(fmt::format(
          "{}: qk_l2_norm: Llama 4's norm applies on the layers with rotary positions; it needs "
          "rotary positions and standard attention",
          source));
    }
    if (model.qk_norm) {
      throw InputError(fmt::format(
          "{}: qk_l2_norm: one per-head norm, qk_norm (RMSNorm with gains) or qk_l2_norm (none), "
          "not both",
          source));
    }
  }
  if (model.attention_chunk_size < 0 || model.attention_chunk_size > kMaxSequence) {
    throw InputError(fmt::format("{}: attention_chunk_size: must be in [0, {}], 0 for none ({})",
                                 source, kMaxSequence, model.attention_chunk_size));
  }
  if (model.attention_chunk_size > 0 && !standard_rope) {
    throw InputError(fmt::format(
        "{}: attention_chunk_size: Llama 4 chunks the attention of its rotary layers; it needs "
        "rotary positions and standard attention",
        source));
  }
}

void normalize_no_rope_freq(TransformerConfig& model) {
  std::vector<int>& layers = model.no_rope_freq;
  if (std::all_of(layers.begin(), layers.end(), [](int entry) { return entry == 0; })) {
    layers.clear();
  }
}

void write_position_variant_fields(const TransformerConfig& model, nlohmann::json& json) {
  if (!model.no_rope_freq.empty()) {
    json["no_rope_freq"] = model.no_rope_freq;
  }
  if (model.qk_l2_norm) {
    json["qk_l2_norm"] = true;
  }
  if (model.attention_chunk_size > 0) {
    json["attention_chunk_size"] = model.attention_chunk_size;
  }
}

void validate_training_length(const TransformerConfig& model, const std::string& source) {
  if (model.attention_chunk_size > 0 && model.seq_length > model.attention_chunk_size) {
    throw InputError(fmt::format(
        "{}: attention_chunk_size: chunked attention is not modelled; sequences of at most {} "
        "tokens attend as without it (seq_length {})",
        source, model.attention_chunk_size, model.seq_length));
  }
}

}  // namespace meshplan::models
