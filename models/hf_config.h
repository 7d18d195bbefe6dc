#pragma once
// Hugging Face config.json -> TransformerConfig, and checks shared by both model formats.
// Private to models/.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/models.h"

namespace meshplan::models {

/// True when `json` is a Hugging Face config: an object with an `architectures` or a
/// `model_type` field.
bool is_hf_config(const nlohmann::json& json);

/// Maps a config.json whose first `architectures` entry is a supported class (kFamilies in
/// hf_config.cpp: Llama, Mistral, Phi-3, Qwen2/3, GPT-2, GPT-NeoX, MPT, Mixtral, Qwen2/3-MoE,
/// DeepSeek-V3 and Kimi K2, GLM-4.5, Gemma 1/2/3 text, gpt-oss) or, without `architectures`, whose
/// `model_type` is one of theirs. What changes the cost in a way meshplan does not model is
/// rejected by name. The name is `source`. Does not validate sizes (model_from_json does).
/// Throws InputError naming the field for any other architecture or model_type (with a hint for
/// a vision-language wrapper's text_config), for an activation the MLP does not compute
/// (hidden_act, activation_function), for a partial rotary factor on a whole-head family and for
/// GPT-2 cross-attention; the sliding window goes into TransformerConfig::sliding_window, and a
/// config that windows only some layers into TransformerConfig::window_attn_layers or
/// window_attn_skip_freq.
TransformerConfig model_from_hf_config(const nlohmann::json& json, const std::string& source);

/// The config's own key for TransformerConfig field `field` (num_kv_heads: num_key_value_heads,
/// GPT-2's n_layer, MPT's d_model, ...), so that a bound or consistency error validate_model
/// raises names what the user wrote; `field` itself when the names agree. `json` must be a
/// config model_from_hf_config accepted.
std::string hf_config_key(const nlohmann::json& json, const std::string& field);

/// Throws InputError "<source>: <field>: mixture-of-experts field in a dense architecture; ..."
/// when a dense family's config has num_local_experts > 1, num_experts > 1,
/// n_routed_experts >= 1, or a moe_* field that is set (not null, false or 0).
void reject_mixture_of_experts(const nlohmann::json& json, const std::string& source);

/// h / a. Throws InputError when h or a is not positive or a does not divide h.
int64_t default_head_dim(int64_t hidden_size, int64_t num_attention_heads,
                         const std::string& source);

}  // namespace meshplan::models
