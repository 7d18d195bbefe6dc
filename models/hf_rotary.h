#pragma once
// The fraction of each attention head a Hugging Face config's rotary positions rotate. Private to
// models/.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "meshplan/models.h"

namespace meshplan::models {

/// How a transformers model class applies rotary positions to its heads.
struct HfRotary {
  /// The class's top-level key (transformers 4.x): "partial_rotary_factor", GPT-NeoX's
  /// "rotary_pct".
  const char* legacy_field = "partial_rotary_factor";
  /// The class default when no key states the factor (Phi-3 1.0, GLM-4.5 0.5, GPT-NeoX 0.25).
  double class_default = 1.0;
  /// Whether the class rotates part of a head (Phi-3, GLM-4.5, GPT-NeoX) or whole heads only.
  bool partial = false;
};

/// The rotated fraction of each head, read as transformers 5 reads it
/// (modeling_rope_utils.py RotaryEmbeddingConfigMixin.convert_rope_params_to_dict): the
/// `partial_rotary_factor` inside `rope_parameters` (flat, or one value in every per-layer-type
/// dict), else the class's top-level key, else the class default. For a class that rotates whole
/// heads (`rotary.partial` false: Llama, Mistral, Qwen, Gemma, GPT-OSS, DeepSeek-V3's rope
/// part), a stated factor other than 1 is refused: their apply_rotary_pos_emb multiplies the whole
/// head by a cos/sin of the factor's width and cannot build that model. Throws InputError naming
/// the key: a non-number, a factor differing between layer types, a `rope_parameters` that is not
/// an object. validate_model checks the range.
double read_rotary_percent(const nlohmann::json& json, const HfRotary& rotary,
                           std::string_view architecture, const std::string& source);

/// The key a config states its rotary factor under, for error messages:
/// "rope_parameters.partial_rotary_factor" when that dict states it (flat), else `legacy_field`.
std::string rotary_percent_key(const nlohmann::json& json, const char* legacy_field);

/// The rotary base, read as transformers 5 reads it (modeling_rope_utils.py
/// RotaryEmbeddingConfigMixin.convert_rope_params_to_dict): `rope_parameters.rope_theta` (nested
/// by layer type, as Gemma 3's: the "full_attention" entry's, the global base), else the class's
/// top-level key (`rope_theta`; GPT-NeoX `rotary_emb_base`, whose class reads no other), else the
/// class default (`default_theta`: 10000; Mixtral 1e6, Gemma 3 1e6 for its full-attention
/// layers, gpt-oss 150000, Llama 4 500000). Throws InputError naming the key for a non-number;
/// validate_model checks the range.
double read_rope_theta(const nlohmann::json& json, std::string_view model_type,
                       const std::string& source);

/// The key a config states its rotary base under, for error messages.
std::string rope_theta_key(const nlohmann::json& json, std::string_view model_type);

/// The rotary base of the sliding-window layers, none where the config has none of its own:
/// rope_parameters nested by layer type, its "sliding_attention" entry's rope_theta (transformers
/// 5); else for Gemma 3 (gemma3_text) rope_local_base_freq (4.x), default 10000. The caller keeps
/// it only where it differs from rope_theta on a model with sliding layers. Throws InputError
/// naming the key for a non-number.
std::optional<double> read_rope_local_theta(const nlohmann::json& json, std::string_view model_type,
                                            const std::string& source);

/// The key a config states the sliding layers' base under, for error messages.
std::string rope_local_theta_key(const nlohmann::json& json);

/// The rotary frequency scaling, read as transformers reads it: the dict that states a type
/// ("rope_type", or the older "type"): `rope_parameters` (transformers 5; nested by layer type, its
/// "full_attention" entry), else `rope_scaling` (4.x). "linear" (factor) and "llama3" (factor,
/// low_freq_factor, high_freq_factor, original_max_position_embeddings, all required as
/// transformers' _validate_llama3_parameters requires them) and "yarn" (read_yarn in the .cpp
/// says how) are carried; "default" or none is no scaling, and the types meshplan does not carry
/// (dynamic, longrope) read as none too (they change no cost). A nested "sliding_attention" entry
/// that scales is refused: meshplan scales the layers that turn by rope_theta. Throws InputError
/// naming the key for a non-number or a missing key; validate_model checks the ranges.
RopeScaling read_rope_scaling(const nlohmann::json& json, const std::string& source);

/// The dict a config states its scaling in, for error messages: "rope_parameters",
/// "rope_parameters.full_attention" or "rope_scaling".
std::string rope_scaling_key(const nlohmann::json& json);

}  // namespace meshplan::models
