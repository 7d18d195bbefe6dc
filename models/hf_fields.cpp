// Field readers shared by the Hugging Face config.json loaders: class defaults for absent keys,
// errors naming the key, and the attention-window keys several families read.

#include "hf_fields.h"

#include <algorithm>

namespace meshplan::models::hf {

// MistralConfig's default sliding_window (transformers >= 4.34), used when the key is absent.
constexpr int64_t kMistralDefaultSlidingWindow = 4096;

bool is_set(const nlohmann::json& json, const char* field) {
  return json.contains(field) && !json[field].is_null();
}

// A size read under the config's own field name, so that "num_hidden_layers: must be positive"
// names what the user wrote; validate_model then checks bounds and consistency.
int64_t require_size(const nlohmann::json& json, const char* field, const std::string& source) {
  const int64_t value = require_int(json, field, source);
  if (value <= 0) {
    throw InputError(fmt::format("{}: {}: must be positive ({})", source, field, value));
  }
  return value;
}

// An explicit null where the transformers class keeps None and cannot build the model with it
// (an MPT d_model, a Mixtral expert count, an activation name): not the class default.
void reject_null(const nlohmann::json& json, const char* field, const std::string& source) {
  if (json.contains(field) && json[field].is_null()) {
    throw InputError(fmt::format(
        "{}: {}: null (transformers keeps None here and cannot build the model; give a value or "
        "leave the key out for the class default)",
        source, field));
  }
}

// Hugging Face PretrainedConfig fields that may be absent take the library's documented default;
// an explicit null is refused (reject_null).
int64_t optional_size(const nlohmann::json& json, const char* field, int64_t hf_default,
                      const std::string& source) {
  reject_null(json, field, source);
  return is_set(json, field) ? require_size(json, field, source) : hf_default;
}

// The same for the fields whose class maps None to a value of its own (LlamaConfig
// num_key_value_heads None = num_attention_heads, GPT2Config n_inner None = 4 n_embd): absent or
// null take `none_value`.
int64_t optional_size_or_none(const nlohmann::json& json, const char* field, int64_t none_value,
                              const std::string& source) {
  return is_set(json, field) ? require_size(json, field, source) : none_value;
}

bool optional_bool(const nlohmann::json& json, const char* field, bool hf_default,
                   const std::string& source) {
  return is_set(json, field) ? require_bool(json, field, source) : hf_default;
}

// Whether any of `fields` (dropout probabilities) is above 0, each taking its transformers class
// default when absent. Throws InputError unless each is a number in [0, 1).
bool any_dropout(const nlohmann::json& json,
                 std::initializer_list<std::pair<const char*, double>> fields,
                 const std::string& source) {
  bool any = false;
  for (const auto& [field, hf_default] : fields) {
    const double p = is_set(json, field) ? require_number(json, field, source) : hf_default;
    if (p < 0 || p >= 1) {
      throw InputError(
          fmt::format("{}: {}: dropout probability must be in [0, 1) ({})", source, field, p));
    }
    any = any || p > 0;
  }
  return any;
}

// A config's layer_types (transformers >= 4.53 writes it for Qwen2/3 and Gemma 2/3): one entry
// per layer, 1 for "sliding_attention", 0 for "full_attention". InputError otherwise.
std::vector<int> read_layer_types(const nlohmann::json& json, int64_t num_layers,
                                  const std::string& source) {
  const nlohmann::json& types = json["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != num_layers) {
    throw InputError(fmt::format("{}: layer_types: expected one entry per layer, {} ({})", source,
                                 num_layers, types.dump()));
  }
  std::vector<int> windowed(types.size(), 0);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "sliding_attention" && types[i] != "full_attention") {
      throw InputError(
          fmt::format("{}: layer_types: expected sliding_attention or full_attention ({})", source,
                      types[i].dump()));
    }
    windowed[i] = types[i] == "sliding_attention" ? 1 : 0;
  }
  return windowed;
}

// Qwen2Config's default max_window_layers (transformers configuration_qwen2.py; Qwen3Config,
// Qwen2MoeConfig and Qwen3MoeConfig default it the same), used when the key is absent.
constexpr int64_t kQwenDefaultMaxWindowLayers = 28;

// The attention window of a Mistral, Phi-3, Mixtral or Qwen config into model.sliding_window
// (0 for full causal attention) and, when it windows only some layers,
// model.window_attn_layers. Mistral attends
// over `sliding_window` (null: full, absent: MistralConfig's 4096) on every layer. Qwen2 windows
// only when use_sliding_window is true, and then only layers with 0-based index
// >= max_window_layers (transformers Qwen2Config layer_types: "sliding_attention" if
// sliding_window is not None and i >= max_window_layers; Qwen2Attention reads
// config.layer_types[layer_idx]): every layer at 0, none at num_hidden_layers or more, layers
// max_window_layers.. in between, as the list.
void read_sliding_window(const nlohmann::json& json, std::string_view model_type,
                         const std::string& source, TransformerConfig& model) {
  if (model_type == "mistral") {
    if (!json.contains("sliding_window")) {
      model.sliding_window = kMistralDefaultSlidingWindow;
      return;
    }
    model.sliding_window =
        is_set(json, "sliding_window") ? require_size(json, "sliding_window", source) : 0;
    return;
  }
  // MixtralConfig and Phi3Config: sliding_window default None. Phi3Attention passes it to the
  // attention as Mistral does (Phi-3-mini-4k: 2047 of max_position_embeddings 4096).
  if (model_type == "mixtral" || model_type == "phi3") {
    model.sliding_window =
        is_set(json, "sliding_window") ? require_size(json, "sliding_window", source) : 0;
    return;
  }
  const bool qwen = model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen2_moe" ||
                    model_type == "qwen3_moe";
  if (!qwen || !optional_bool(json, "use_sliding_window", false, source) ||
      !is_set(json, "sliding_window")) {
    return;
  }
  const int64_t window_tokens = require_size(json, "sliding_window", source);
  const int64_t num_layers = require_size(json, "num_hidden_layers", source);
  if (num_layers > kMaxLayers) {
    return;  // validate_model refuses the layer count before any window matters
  }
  std::vector<int> windowed(static_cast<size_t>(num_layers), 0);
  // A config that states layer_types (transformers >= 4.53 writes it) is read by it instead:
  // "sliding_attention" layers attend over the window, "full_attention" ones do not.
  if (is_set(json, "layer_types")) {
    windowed = read_layer_types(json, num_layers, source);
  } else {
    const int64_t max_window_layers = is_set(json, "max_window_layers")
                                          ? require_int(json, "max_window_layers", source)
                                          : kQwenDefaultMaxWindowLayers;
    if (max_window_layers < 0) {
      throw InputError(
          fmt::format("{}: max_window_layers: must be 0 or more ({})", source, max_window_layers));
    }
    for (int64_t layer = max_window_layers; layer < num_layers; ++layer) {
      windowed[static_cast<size_t>(layer)] = 1;
    }
  }
  // As model_from_json normalises a meshplan file's list: none windowed is full attention,
  // all windowed needs no list.
  const auto num_windowed = std::count(windowed.begin(), windowed.end(), 1);
  if (num_windowed == 0) {
    return;
  }
  model.sliding_window = window_tokens;
  if (num_windowed < num_layers) {
    model.window_attn_layers = std::move(windowed);
  }
}

// Throws InputError "<source>: <field>: <why> (<value>)" when `field` is set and differs from
// `expected`: a config option that changes the model in a way meshplan does not model.
void require_unmodelled(const nlohmann::json& json, const char* field,
                        const nlohmann::json& expected, const char* why,
                        const std::string& source) {
  if (!is_set(json, field)) {
    return;
  }
  const nlohmann::json& value = json[field];
  // A value of another type is malformed, not an unmodelled option ("1" for 1).
  const bool comparable = expected.is_null() || (value.is_number() && expected.is_number()) ||
                          value.type() == expected.type();
  if (!comparable) {
    throw InputError(fmt::format("{}: {}: expected {} ({})", source, field,
                                 expected.is_number() ? "a number" : expected.type_name(),
                                 value.dump()));
  }
  if (value != expected) {
    throw InputError(fmt::format("{}: {}: {} ({})", source, field, why, value.dump()));
  }
}

// The windowed layers of a config class that alternates windowed and full-attention layers
// (Gemma 2/3, gpt-oss), model.sliding_window already read: the layer_types list when stated
// (transformers >= 4.53), else the class's pattern, layer layer_idx sliding when
// bool((layer_idx + 1) % pattern), Megatron-Core's window_attn_skip_freq N = pattern with layer
// number n = layer_idx + 1.
void read_alternating_windows(const nlohmann::json& json, int64_t pattern,
                              const std::string& source, TransformerConfig& model) {
  if (model.num_layers > kMaxLayers) {
    return;  // validate_model refuses the layer count before any window matters
  }
  if (is_set(json, "layer_types")) {
    std::vector<int> windowed = read_layer_types(json, model.num_layers, source);
    // As read_sliding_window: none windowed is full attention, all windowed needs no list.
    const auto num_windowed = std::count(windowed.begin(), windowed.end(), 1);
    if (num_windowed == 0) {
      model.sliding_window = 0;
    } else if (num_windowed < model.num_layers) {
      model.window_attn_layers = std::move(windowed);
    }
    return;
  }
  if (pattern == 1) {
    model.sliding_window = 0;  // (layer_idx + 1) % 1 is 0: no layer is sliding
  } else {
    model.window_attn_skip_freq = pattern;
  }
}

}  // namespace meshplan::models::hf
