// The rotated fraction of each head in a Hugging Face config: transformers 4.x keeps it in a
// top-level key of the classes that rotate part of a head (Phi3Config and Glm4MoeConfig
// partial_rotary_factor, GPTNeoXConfig rotary_pct); transformers 5 moves it into
// `rope_parameters` (modeling_rope_utils.py RotaryEmbeddingConfigMixin.convert_rope_params_to_dict
// sets the top-level key only as that dict's default; GPTNeoXConfig does the same with
// rotary_pct), per layer type where the dict is nested by layer type.

#include "hf_rotary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"

namespace meshplan::models {

namespace {

constexpr const char* kFactorKey = "partial_rotary_factor";

bool states(const nlohmann::json& object, const char* key) {
  return object.is_object() && object.contains(key) && !object[key].is_null();
}

// The config's rope_parameters, or null when absent or null.
const nlohmann::json* rope_parameters(const nlohmann::json& json, const std::string& source) {
  if (!states(json, "rope_parameters")) {
    return nullptr;
  }
  const nlohmann::json& params = json["rope_parameters"];
  if (!params.is_object()) {
    throw InputError(
        fmt::format("{}: rope_parameters: must be an object ({})", source, params.dump()));
  }
  return &params;
}

// transformers 5 nests rope_parameters by layer type (Gemma 3's "full_attention" and
// "sliding_attention"): every value is itself a dict.
bool nested_by_layer_type(const nlohmann::json& params) {
  return !params.empty() &&
         std::all_of(params.begin(), params.end(), [](const auto& v) { return v.is_object(); });
}

// The factor rope_parameters states, if any; one value across layer types, a per-type dict that
// states none taking `outside` (the factor the config states outside the dict).
std::optional<double> stated_in_rope_parameters(const nlohmann::json& params, double outside,
                                                const std::string& source) {
  const std::string params_source = source + ": rope_parameters";
  if (!nested_by_layer_type(params)) {
    if (!states(params, kFactorKey)) {
      return std::nullopt;
    }
    return require_number(params, kFactorKey, params_source);
  }
  std::optional<double> common;
  bool any_stated = false;
  for (const auto& [layer_type, entry] : params.items()) {
    const bool stated = states(entry, kFactorKey);
    any_stated = any_stated || stated;
    const double value =
        stated ? require_number(entry, kFactorKey, params_source + "." + layer_type) : outside;
    if (common && *common != value) {
      throw InputError(fmt::format(
          "{}: {}: differs between layer types ({} and {}); meshplan rotates one fraction of "
          "every head",
          params_source, kFactorKey, *common, value));
    }
    common = value;
  }
  return any_stated ? common : std::nullopt;
}

constexpr const char* kThetaKey = "rope_theta";
constexpr const char* kLocalBaseKey = "rope_local_base_freq";
// Gemma 3's local base (Gemma Team 2025, Sec. 2.2: "keep the frequency of the local layers at
// 10k"; Gemma3TextConfig's default).
constexpr double kGemma3DefaultLocalTheta = 10000.0;

// The class's own key for the base outside rope_parameters: GPTNeoXConfig rotary_emb_base
// (transformers 5's GPTNeoXConfig pops only that one), rope_theta for the others.
const char* legacy_theta_key(std::string_view model_type) {
  return model_type == "gpt_neox" ? "rotary_emb_base" : kThetaKey;
}

// The transformers class's default_theta (configuration_<model>.py): Gemma3TextConfig's
// "global" one, the base of its full-attention layers.
double class_default_theta(std::string_view model_type) {
  if (model_type == "mixtral" || model_type == "gemma3_text") {
    return 1e6;
  }
  if (model_type == "gpt_oss") {
    return 150000.0;
  }
  if (model_type == "llama4_text") {
    return 500000.0;
  }
  return kDefaultRopeTheta;
}

// The entry of rope_parameters that states the base, if any: the dict itself, or nested by layer
// type its "full_attention" entry, else the one value the other types state alike; never the
// "sliding_attention" entry's (Gemma3TextConfig keeps the local base of its sliding-window layers
// there, rope_local_base_freq in 4.x: read_rope_local_theta).
const nlohmann::json* theta_entry(const nlohmann::json& params, std::string& key,
                                  const std::string& source) {
  if (!nested_by_layer_type(params)) {
    key = fmt::format("rope_parameters.{}", kThetaKey);
    return states(params, kThetaKey) ? &params : nullptr;
  }
  if (states(params, "full_attention") && states(params["full_attention"], kThetaKey)) {
    key = fmt::format("rope_parameters.full_attention.{}", kThetaKey);
    return &params["full_attention"];
  }
  const nlohmann::json* common = nullptr;
  for (const auto& [layer_type, entry] : params.items()) {
    if (layer_type == "sliding_attention" || !states(entry, kThetaKey)) {
      continue;
    }
    if (common != nullptr && (*common)[kThetaKey] != entry[kThetaKey]) {
      throw InputError(fmt::format(
          "{}: rope_parameters.{}.{}: differs between layer types without a full_attention entry "
          "({} and {}); meshplan carries one base",
          source, layer_type, kThetaKey, (*common)[kThetaKey].dump(), entry[kThetaKey].dump()));
    }
    common = &entry;
    key = fmt::format("rope_parameters.{}.{}", layer_type, kThetaKey);
  }
  return common;
}

}  // namespace

double read_rope_theta(const nlohmann::json& json, std::string_view model_type,
                       const std::string& source) {
  if (const nlohmann::json* params = rope_parameters(json, source)) {
    std::string key;
    if (const nlohmann::json* entry = theta_entry(*params, key, source)) {
      const std::string entry_source = source + ": " + key.substr(0, key.rfind('.'));
      return require_number(*entry, kThetaKey, entry_source);
    }
  }
  const char* legacy = legacy_theta_key(model_type);
  return states(json, legacy) ? require_number(json, legacy, source)
                              : class_default_theta(model_type);
}

std::optional<double> read_rope_local_theta(const nlohmann::json& json, std::string_view model_type,
                                            const std::string& source) {
  if (const nlohmann::json* params = rope_parameters(json, source)) {
    if (nested_by_layer_type(*params) && states(*params, "sliding_attention") &&
        states((*params)["sliding_attention"], kThetaKey)) {
      return require_number((*params)["sliding_attention"], kThetaKey,
                            source + ": rope_parameters.sliding_attention");
    }
  }
  if (model_type != "gemma3_text") {
    return std::nullopt;
  }
  // Gemma3TextConfig(rope_local_base_freq=10_000.0) in 4.x; default_theta["local"] in 5.
  return states(json, kLocalBaseKey) ? require_number(json, kLocalBaseKey, source)
                                     : kGemma3DefaultLocalTheta;
}

std::string rope_local_theta_key(const nlohmann::json& json) {
  if (states(json, "rope_parameters") && json["rope_parameters"].is_object() &&
      nested_by_layer_type(json["rope_parameters"]) &&
      states(json["rope_parameters"], "sliding_attention")) {
    return fmt::format("rope_parameters.sliding_attention.{}", kThetaKey);
  }
  return kLocalBaseKey;
}

std::string rope_theta_key(const nlohmann::json& json, std::string_view model_type) {
  if (states(json, "rope_parameters") && json["rope_parameters"].is_object()) {
    std::string key;
    try {
      if (theta_entry(json["rope_parameters"], key, "") != nullptr) {
        return key;
      }
    } catch (const InputError&) {
      // The read refused it already; name the top-level key.
    }
  }
  return legacy_theta_key(model_type);
}

namespace {

// The dict of a config that states the scaling type, and its key: rope_parameters (its
// full_attention entry when nested by layer type) when it states one, else rope_scaling.
const nlohmann::json* scaling_entry(const nlohmann::json& json, std::string& key) {
  const auto states_type = [](const nlohmann::json& entry) {
    return states(entry, "rope_type") || states(entry, "type");
  };
  if (states(json, "rope_parameters") && json["rope_parameters"].is_object()) {
    const nlohmann::json& params = json["rope_parameters"];
    if (!nested_by_layer_type(params) && states_type(params)) {
      key = "rope_parameters";
      return &params;
    }
    if (nested_by_layer_type(params) && states(params, "full_attention") &&
        states_type(params["full_attention"])) {
      key = "rope_parameters.full_attention";
      return &params["full_attention"];
    }
  }
  if (states(json, "rope_scaling")) {
    key = "rope_scaling";
    return &json["rope_scaling"];
  }
  return nullptr;
}

std::string scaling_type(const nlohmann::json& entry, const std::string& entry_source) {
  const char* type_key = states(entry, "rope_type") ? "rope_type" : "type";
  return states(entry, type_key) ? require_string(entry, type_key, entry_source) : "default";
}

// A YaRN dict as transformers _compute_yarn_parameters reads it (5.x; 4.x the same where both
// define it): original_max_position_embeddings (else the config's max_position_embeddings),
// factor (else max_position_embeddings over the original), beta_fast / beta_slow (`or 32`,
// `or 1`: 0 means the default), truncate (default true), and the attention factor: stated, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero, else
// get_mscale(factor). meshplan derives it from mscale and mscale_all_dim
// (models::rope_attention_factor), so a dict whose factor those cannot state is refused.
RopeScaling read_yarn(const nlohmann::json& json, const nlohmann::json& entry,
                      const std::string& entry_source, const std::string& source) {
  RopeScaling scaling;
  scaling.type = RopeScalingType::kYarn;
  scaling.original_max_positions =
      states(entry, "original_max_position_embeddings")
          ? require_int(entry, "original_max_position_embeddings", entry_source)
          : require_int(json, "max_position_embeddings", source);
  if (states(entry, "factor")) {
    scaling.factor = require_number(entry, "factor", entry_source);
  } else {
    const int64_t longest = require_int(json, "max_position_embeddings", source);
    scaling.factor =
        scaling.original_max_positions > 0
            ? static_cast<double>(longest) / static_cast<double>(scaling.original_max_positions)
            : 0.0;  // validate_model names the original's range
  }
  const auto optional_nonzero = [&](const char* key, double fallback) {
    const double value = states(entry, key) ? require_number(entry, key, entry_source) : 0.0;
    return value != 0.0 ? value : fallback;
  };
  scaling.beta_fast = optional_nonzero("beta_fast", 32.0);
  scaling.beta_slow = optional_nonzero("beta_slow", 1.0);
  if (states(entry, "truncate")) {
    scaling.truncate = require_bool(entry, "truncate", entry_source);
  }
  const double mscale = optional_nonzero("mscale", 0.0);
  const double mscale_all_dim = optional_nonzero("mscale_all_dim", 0.0);
  if (mscale != 0.0 && mscale_all_dim != 0.0) {
    scaling.mscale = mscale;
    scaling.mscale_all_dim = mscale_all_dim;
  } else if (mscale_all_dim != 0.0 || (mscale != 0.0 && mscale != 1.0)) {
    // transformers then uses get_mscale(factor) for cos and sin, ignoring the one stated, while
    // Megatron-Core and DeepSeek's softmax read it.
    throw InputError(fmt::format(
        "{}: {}: given without {}, which transformers and Megatron-Core read differently ({})",
        entry_source, mscale_all_dim != 0.0 ? "mscale_all_dim" : "mscale",
        mscale_all_dim != 0.0 ? "mscale" : "mscale_all_dim",
        mscale_all_dim != 0.0 ? mscale_all_dim : mscale));
  }
  if (states(entry, "attention_factor")) {
    const double stated = require_number(entry, "attention_factor", entry_source);
    const double derived = rope_attention_factor(scaling);
    // Equal up to the rounding of a value a config writes out in decimal (1e-9 relative).
    if (!(std::abs(stated - derived) <= 1e-9 * derived)) {
      throw InputError(fmt::format(
          "{}: attention_factor: {:g} differs from YaRN's {:.6g} for factor {:g} (mscale {:g}, "
          "mscale_all_dim {:g}); meshplan derives it and cannot carry another",
          entry_source, stated, derived, scaling.factor, scaling.mscale, scaling.mscale_all_dim));
    }
  }
  return scaling;
}

}  // namespace

RopeScaling read_rope_scaling(const nlohmann::json& json, const std::string& source) {
  if (const nlohmann::json* params = rope_parameters(json, source);
      params != nullptr && nested_by_layer_type(*params) && states(*params, "sliding_attention")) {
    const std::string sliding_source = source + ": rope_parameters.sliding_attention";
    const std::string type = scaling_type((*params)["sliding_attention"], sliding_source);
    if (type == "linear" || type == "llama3" || type == "yarn") {
      throw InputError(fmt::format(
          "{}: rope_type: meshplan scales the layers that turn by rope_theta, not the sliding "
          "ones ({})",
          sliding_source, type));
    }
  }
  std::string key;
  const nlohmann::json* entry = scaling_entry(json, key);
  if (entry == nullptr) {
    return {};
  }
  const std::string entry_source = source + ": " + key;
  if (!entry->is_object()) {
    throw InputError(fmt::format("{}: must be an object ({})", entry_source, entry->dump()));
  }
  const std::string type = scaling_type(*entry, entry_source);
  RopeScaling scaling;
  if (type == "linear") {
    scaling.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    scaling.type = RopeScalingType::kLlama3;
    scaling.low_freq_factor = require_number(*entry, "low_freq_factor", entry_source);
    scaling.high_freq_factor = require_number(*entry, "high_freq_factor", entry_source);
    scaling.original_max_positions =
        require_int(*entry, "original_max_position_embeddings", entry_source);
  } else if (type == "yarn") {
    return read_yarn(json, *entry, entry_source, source);
  } else {
    return {};  // default, or a type meshplan does not carry (README, Rotary scaling)
  }
  scaling.factor = require_number(*entry, "factor", entry_source);
  return scaling;
}

std::string rope_scaling_key(const nlohmann::json& json) {
  std::string key = "rope_scaling";
  scaling_entry(json, key);
  return key;
}

double read_rotary_percent(const nlohmann::json& json, const HfRotary& rotary,
                           std::string_view architecture, const std::string& source) {
  const bool legacy_stated = states(json, rotary.legacy_field);
  // The factor outside rope_parameters: the 4.x key, else the class default.
  const double outside =
      legacy_stated ? require_number(json, rotary.legacy_field, source) : rotary.class_default;
  const nlohmann::json* params = rope_parameters(json, source);
  const std::optional<double> in_params =
      params != nullptr ? stated_in_rope_parameters(*params, outside, source) : std::nullopt;
  const double factor = in_params.value_or(outside);
  if (!rotary.partial && (in_params || legacy_stated) && factor != 1.0) {
    throw InputError(fmt::format(
        "{}: {}: {} rotates whole heads (its apply_rotary_pos_emb has no partial path, so "
        "transformers cannot build this model); a partial factor is read for Phi-3, GLM-4.5 and "
        "GPT-NeoX ({})",
        source, rotary_percent_key(json, rotary.legacy_field), architecture, factor));
  }
  return factor;
}

std::string rotary_percent_key(const nlohmann::json& json, const char* legacy_field) {
  const bool in_params = states(json, "rope_parameters") && json["rope_parameters"].is_object() &&
                         states(json["rope_parameters"], kFactorKey);
  return in_params ? fmt::format("rope_parameters.{}", kFactorKey) : std::string(legacy_field);
}

}  // namespace meshplan::models
