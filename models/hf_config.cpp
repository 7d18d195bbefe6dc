// Hugging Face transformers config.json files mapped onto TransformerConfig. Field names and
// defaults follow the transformers configuration classes (LlamaConfig, MistralConfig,
// Qwen2Config, GPT2Config, GPTNeoXConfig) and the layer definitions in their modeling files.

#include "hf_config.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

#include "meshplan/json_io.h"

namespace meshplan::models {

namespace {

constexpr std::array<std::string_view, 5> kArchitectures = {
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel",
    "GPTNeoXForCausalLM"};

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

// Hugging Face PretrainedConfig fields that may be absent take the library's documented default.
int64_t optional_size(const nlohmann::json& json, const char* field, int64_t hf_default,
                      const std::string& source) {
  return is_set(json, field) ? require_size(json, field, source) : hf_default;
}

bool optional_bool(const nlohmann::json& json, const char* field, bool hf_default,
                   const std::string& source) {
  return is_set(json, field) ? require_bool(json, field, source) : hf_default;
}

// Llama, Mistral and Qwen2 share one layout: pre-RMSNorm, rotary positions, a gated SiLU MLP
// (gate_proj, up_proj, down_proj), grouped-query attention and untied heads by default
// (tie_word_embeddings defaults to false in LlamaConfig, MistralConfig and Qwen2Config).
TransformerConfig llama_family(const nlohmann::json& json, const std::string& source) {
  TransformerConfig model;
  model.name = source;
  model.num_layers = require_size(json, "num_hidden_layers", source);
  model.hidden_size = require_size(json, "hidden_size", source);
  model.num_attention_heads = require_size(json, "num_attention_heads", source);
  model.num_kv_heads =
      optional_size(json, "num_key_value_heads", model.num_attention_heads, source);
  model.head_dim = is_set(json, "head_dim")
                       ? require_size(json, "head_dim", source)
                       : default_head_dim(model.hidden_size, model.num_attention_heads, source);
  model.ffn_hidden_size = require_size(json, "intermediate_size", source);
  model.vocab_size = require_size(json, "vocab_size", source);
  model.max_position_embeddings = require_size(json, "max_position_embeddings", source);
  model.seq_length = optional_size(json, "seq_length", model.max_position_embeddings, source);
  model.activation = Activation::kSwiglu;
  model.norm = Norm::kRmsNorm;
  model.positions = Positions::kRope;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", false, source);
  return model;
}

// GPT-2 (Radford et al. 2019): learned positions, pre-LayerNorm, GELU MLP, biases on every
// projection (Conv1D c_attn, c_proj, c_fc, c_proj), n_inner = null meaning 4 n_embd. The LM
// head is tied (PretrainedConfig's tie_word_embeddings defaults to true).
TransformerConfig gpt2(const nlohmann::json& json, const std::string& source) {
  TransformerConfig model;
  model.name = source;
  model.num_layers = require_size(json, "n_layer", source);
  model.hidden_size = require_size(json, "n_embd", source);
  model.num_attention_heads = require_size(json, "n_head", source);
  model.num_kv_heads = model.num_attention_heads;
  model.head_dim = default_head_dim(model.hidden_size, model.num_attention_heads, source);
  model.ffn_hidden_size = optional_size(json, "n_inner", 4 * model.hidden_size, source);
  model.vocab_size = require_size(json, "vocab_size", source);
  model.max_position_embeddings = require_size(json, "n_positions", source);
  model.seq_length = model.max_position_embeddings;
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  model.positions = Positions::kLearned;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", true, source);
  model.qkv_bias = true;
  model.attention_output_bias = true;
  model.mlp_bias = true;
  return model;
}

// GPT-NeoX (Black et al. 2022; Pythia): rotary positions (on rotary_pct of each head, which does
// not change the parameter count), LayerNorm, GELU MLP with biases, query_key_value and dense
// with bias = attention_bias (default true), and an untied `embed_out` without bias
// (tie_word_embeddings defaults to false in GPTNeoXConfig).
TransformerConfig gpt_neox(const nlohmann::json& json, const std::string& source) {
  TransformerConfig model;
  model.name = source;
  model.num_layers = require_size(json, "num_hidden_layers", source);
  model.hidden_size = require_size(json, "hidden_size", source);
  model.num_attention_heads = require_size(json, "num_attention_heads", source);
  model.num_kv_heads = model.num_attention_heads;
  model.head_dim = default_head_dim(model.hidden_size, model.num_attention_heads, source);
  model.ffn_hidden_size = require_size(json, "intermediate_size", source);
  model.vocab_size = require_size(json, "vocab_size", source);
  model.max_position_embeddings = require_size(json, "max_position_embeddings", source);
  model.seq_length = model.max_position_embeddings;
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  model.positions = Positions::kRope;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", false, source);
  model.qkv_bias = optional_bool(json, "attention_bias", true, source);
  model.attention_output_bias = model.qkv_bias;
  model.mlp_bias = true;
  return model;
}

void reject_moe_field(const std::string& field, const nlohmann::json& value,
                      const std::string& source) {
  throw InputError(fmt::format("{}: {}: mixture-of-experts models are not supported yet ({})",
                               source, field, value.dump()));
}

}  // namespace

bool is_hf_config(const nlohmann::json& json) {
  return json.is_object() && json.contains("architectures");
}

void reject_mixture_of_experts(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    return;
  }
  // Mixtral (num_local_experts), Qwen2-MoE and others (num_experts): one expert is dense.
  for (const char* field : {"num_local_experts", "num_experts"}) {
    if (is_set(json, field) && require_int(json, field, source) > 1) {
      reject_moe_field(field, json[field], source);
    }
  }
  // DeepSeek-V2/V3: n_routed_experts experts beside shared ones.
  if (is_set(json, "n_routed_experts") && require_int(json, "n_routed_experts", source) >= 1) {
    reject_moe_field("n_routed_experts", json["n_routed_experts"], source);
  }
  for (const auto& [key, value] : json.items()) {
    const bool unset = value.is_null() || value == false || value == 0;
    if (key.rfind("moe_", 0) == 0 && !unset) {
      reject_moe_field(key, value, source);
    }
  }
}

TransformerConfig model_from_hf_config(const nlohmann::json& json, const std::string& source) {
  const auto& architectures = json["architectures"];
  if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string()) {
    throw InputError(fmt::format("{}: architectures: expected a non-empty list of strings ({})",
                                 source, architectures.dump()));
  }
  const std::string architecture = architectures[0].get<std::string>();
  if (architecture == "LlamaForCausalLM") {
    // LlamaAttention: q, k, v and o_proj all use bias = attention_bias; LlamaMLP: mlp_bias.
    TransformerConfig model = llama_family(json, source);
    model.qkv_bias = optional_bool(json, "attention_bias", false, source);
    model.attention_output_bias = model.qkv_bias;
    model.mlp_bias = optional_bool(json, "mlp_bias", false, source);
    return model;
  }
  if (architecture == "MistralForCausalLM") {
    return llama_family(json, source);  // no biases anywhere (MistralAttention, MistralMLP)
  }
  if (architecture == "Qwen2ForCausalLM") {
    // Qwen2Attention: q, k, v_proj with bias, o_proj without; Qwen2MLP without biases.
    TransformerConfig model = llama_family(json, source);
    model.qkv_bias = true;
    return model;
  }
  if (architecture == "GPT2LMHeadModel") {
    return gpt2(json, source);
  }
  if (architecture == "GPTNeoXForCausalLM") {
    return gpt_neox(json, source);
  }
  throw InputError(fmt::format("{}: architectures: unsupported architecture ({}); supported: {}",
                               source, architecture, fmt::join(kArchitectures, ", ")));
}

}  // namespace meshplan::models
