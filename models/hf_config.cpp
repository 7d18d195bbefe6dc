// Hugging Face transformers config.json files mapped onto TransformerConfig: which family a
// config is, the dense families (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
// Phi3Config, GPT2Config, GPTNeoXConfig, MPT) and the dispatch to the mixture-of-experts
// (hf_moe.cpp) and Gemma (hf_gemma.cpp) readers. Field names and defaults follow the
// transformers configuration classes and the layer definitions in their modeling files; the
// shared field readers are in hf_fields.cpp, the rotary fraction in hf_rotary.cpp.

#include "hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "hf_families.h"
#include "hf_fields.h"
#include "hf_rotary.h"
#include "meshplan/json_io.h"

namespace meshplan::models {

namespace hf {

// A supported model class and the `model_type` of its configuration class (LlamaConfig "llama",
// ...). A config.json names both; one saved without `architectures` names only the model_type.
struct HfFamily {
  std::string_view architecture;
  std::string_view model_type;
};
constexpr std::array<HfFamily, 19> kFamilies = {{{"LlamaForCausalLM", "llama"},
                                                 {"MistralForCausalLM", "mistral"},
                                                 {"Phi3ForCausalLM", "phi3"},
                                                 {"Qwen2ForCausalLM", "qwen2"},
                                                 {"Qwen3ForCausalLM", "qwen3"},
                                                 {"GPT2LMHeadModel", "gpt2"},
                                                 {"GPTNeoXForCausalLM", "gpt_neox"},
                                                 {"MixtralForCausalLM", "mixtral"},
                                                 {"Qwen2MoeForCausalLM", "qwen2_moe"},
                                                 {"Qwen3MoeForCausalLM", "qwen3_moe"},
                                                 {"DeepseekV3ForCausalLM", "deepseek_v3"},
                                                 {"Glm4MoeForCausalLM", "glm4_moe"},
                                                 {"MptForCausalLM", "mpt"},
                                                 {"MPTForCausalLM", "mpt"},
                                                 {"GemmaForCausalLM", "gemma"},
                                                 {"Gemma2ForCausalLM", "gemma2"},
                                                 {"Gemma3ForCausalLM", "gemma3_text"},
                                                 {"GptOssForCausalLM", "gpt_oss"},
                                                 {"Llama4ForCausalLM", "llama4_text"}}};

bool is_moe_family(std::string_view model_type) {
  return model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe" ||
         model_type == "deepseek_v3" || model_type == "glm4_moe" || model_type == "gpt_oss" ||
         model_type == "llama4_text";
}

// Llama, Mistral, Qwen2 and Qwen3 share one layout: pre-RMSNorm, rotary positions, a gated SiLU MLP
// (gate_proj, up_proj, down_proj), grouped-query attention and untied heads by default
// (tie_word_embeddings defaults to false in LlamaConfig, MistralConfig and Qwen2Config).
TransformerConfig llama_family(const nlohmann::json& json, const std::string& source) {
  TransformerConfig model;
  model.name = source;
  model.num_layers = require_size(json, "num_hidden_layers", source);
  model.hidden_size = require_size(json, "hidden_size", source);
  model.num_attention_heads = require_size(json, "num_attention_heads", source);
  model.num_kv_heads =
      optional_size_or_none(json, "num_key_value_heads", model.num_attention_heads, source);
  model.head_dim = is_set(json, "head_dim")
                       ? require_size(json, "head_dim", source)
                       : default_head_dim(model.hidden_size, model.num_attention_heads, source);
  model.ffn_hidden_size = require_size(json, "intermediate_size", source);
  model.vocab_size = require_size(json, "vocab_size", source);
  model.max_position_embeddings = require_size(json, "max_position_embeddings", source);
  model.seq_length =
      optional_size_or_none(json, "seq_length", model.max_position_embeddings, source);
  model.activation = Activation::kSwiglu;
  model.norm = Norm::kRmsNorm;
  model.positions = Positions::kRope;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", false, source);
  // LlamaConfig, MistralConfig, Qwen2Config: attention_dropout, default 0.0; no hidden dropout.
  model.dropout = any_dropout(json, {{"attention_dropout", 0.0}}, source);
  return model;
}

// GPT-2 (Radford et al. 2019): learned positions, pre-LayerNorm, GELU MLP, biases on every
// projection (Conv1D c_attn, c_proj, c_fc, c_proj), n_inner = null meaning 4 n_embd. The LM
// head is tied (PretrainedConfig's tie_word_embeddings defaults to true).
TransformerConfig gpt2(const nlohmann::json& json, const std::string& source) {
  TransformerConfig model;
  model.name = source;
  if (optional_bool(json, "add_cross_attention", false, source)) {
    throw InputError(fmt::format(
        "{}: add_cross_attention: cross-attention blocks are not supported (true)", source));
  }
  model.num_layers = require_size(json, "n_layer", source);
  model.hidden_size = require_size(json, "n_embd", source);
  model.num_attention_heads = require_size(json, "n_head", source);
  model.num_kv_heads = model.num_attention_heads;
  model.head_dim = default_head_dim(model.hidden_size, model.num_attention_heads, source);
  model.ffn_hidden_size = optional_size_or_none(json, "n_inner", 4 * model.hidden_size, source);
  model.vocab_size = require_size(json, "vocab_size", source);
  model.max_position_embeddings = require_size(json, "n_positions", source);
  // Not a GPT2Config field: read as in every family, so that load_training_model's "the config
  // states its length" holds for whichever family states it.
  model.seq_length =
      optional_size_or_none(json, "seq_length", model.max_position_embeddings, source);
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  model.positions = Positions::kLearned;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", true, source);
  // GPT2Config: resid_pdrop, embd_pdrop and attn_pdrop, each default 0.1.
  model.dropout =
      any_dropout(json, {{"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}}, source);
  model.qkv_bias = true;
  model.attention_output_bias = true;
  model.mlp_bias = true;
  return model;
}

// GPT-NeoX (Black et al. 2022; Pythia): parallel attention and MLP, rotary positions (on rotary_pct
// of each head, which does not change the parameter count), LayerNorm, GELU MLP with biases,
// query_key_value and dense with bias = attention_bias (default true), and an untied `embed_out`
// without bias (tie_word_embeddings defaults to false in GPTNeoXConfig).
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
  model.seq_length =
      optional_size_or_none(json, "seq_length", model.max_position_embeddings, source);
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  model.positions = Positions::kRope;
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", false, source);
  // GPTNeoXConfig: attention_dropout and hidden_dropout, each default 0.0.
  model.dropout = any_dropout(json, {{"attention_dropout", 0.0}, {"hidden_dropout", 0.0}}, source);
  model.qkv_bias = optional_bool(json, "attention_bias", true, source);
  model.attention_output_bias = model.qkv_bias;
  model.mlp_bias = true;
  // GPTNeoXConfig use_parallel_residual, default true (Pythia, GPT-NeoX-20B):
  // modeling_gpt_neox.py GPTNeoXLayer adds attn(input_layernorm(x)) and
  // mlp(post_attention_layernorm(x)) to x.
  model.parallel_residual = optional_bool(json, "use_parallel_residual", true, source);
  // GPTNeoXConfig rotary_pct, default 0.25 (Pythia and GPT-NeoX-20B: a quarter of each head).
  model.rotary_percent = read_rotary_percent(
      json, {.legacy_field = "rotary_pct", .class_default = 0.25, .partial = true},
      "GPTNeoXForCausalLM", source);
  return model;
}

// Kimi K2 (moonshotai/Kimi-K2-Base and -Instruct) is DeepseekV3ForCausalLM under model_type
// "kimi_k2": Moonshot's deployment guide says the model reuses the DeepSeek-V3 architecture and
// names it kimi_k2 only so that inference engines can tell the two apart, and that it runs with
// model_type changed to deepseek_v3 (as slime's and Miles's weight conversions do). Read as
// deepseek_v3, its absent keys taking transformers' DeepseekV3Config defaults as after that edit;
// only with the architecture named (alone, kimi_k2 stays an unsupported model_type).
bool is_model_type_alias(const HfFamily& family, std::string_view model_type) {
  return family.model_type == "deepseek_v3" && model_type == "kimi_k2";
}

const HfFamily& hf_family(const nlohmann::json& json, const std::string& source);

// For an unsupported config that wraps its language model in `text_config` (transformers'
// vision-language classes: Gemma3ForConditionalGeneration, Llama4ForConditionalGeneration, Kimi
// K2.5, ...): what to do about it, appended to the error; empty otherwise. meshplan costs no
// vision tower, so it does not plan the wrapper as if it were its language model.
std::string text_config_hint(const nlohmann::json& json) {
  if (!json.contains("text_config") || !json["text_config"].is_object()) {
    return "";
  }
  nlohmann::json text = json["text_config"];
  text.erase("text_config");  // one level: a hint, not a search
  try {
    return fmt::format(
        "; it wraps a language model in text_config ({}, supported) beside other towers meshplan "
        "does not cost: to plan the language model alone, save text_config as a config.json of "
        "its own",
        hf_family(text, "text_config").model_type);
  } catch (const InputError&) {
    return "; the language model it wraps in text_config is not a supported family either";
  }
}

// The supported family of `json`: by its first `architectures` entry, else by `model_type`.
// When both are given they must agree, as transformers picks the class by model_type.
const HfFamily& hf_family(const nlohmann::json& json, const std::string& source) {
  const std::string model_type =
      is_set(json, "model_type") ? require_string(json, "model_type", source) : "";
  if (is_set(json, "architectures")) {
    const auto& architectures = json["architectures"];
    if (!architectures.is_array() || architectures.empty() || !architectures[0].is_string()) {
      throw InputError(fmt::format("{}: architectures: expected a non-empty list of strings ({})",
                                   source, architectures.dump()));
    }
    const std::string architecture = architectures[0].get<std::string>();
    for (const HfFamily& family : kFamilies) {
      if (architecture != family.architecture) {
        continue;
      }
      if (!model_type.empty() && model_type != family.model_type &&
          !is_model_type_alias(family, model_type)) {
        throw InputError(fmt::format("{}: model_type: {} is model_type {}, not {}", source,
                                     architecture, family.model_type, model_type));
      }
      return family;
    }
    std::vector<std::string_view> names;
    for (const HfFamily& family : kFamilies) {
      names.push_back(family.architecture);
    }
    throw InputError(
        fmt::format("{}: architectures: unsupported architecture ({}); supported: {}{}", source,
                    architecture, fmt::join(names, ", "), text_config_hint(json)));
  }
  if (model_type.empty()) {
    throw InputError(fmt::format(
        "{}: model_type: missing (a Hugging Face config needs architectures or model_type)",
        source));
  }
  std::vector<std::string_view> names;
  for (const HfFamily& family : kFamilies) {
    if (model_type == family.model_type) {
      return family;
    }
    if (std::find(names.begin(), names.end(), family.model_type) == names.end()) {
      names.push_back(family.model_type);  // MPT has two class names for one model_type
    }
  }
  throw InputError(fmt::format("{}: model_type: unsupported model type ({}); supported: {}{}",
                               source, model_type, fmt::join(names, ", "), text_config_hint(json)));
}

// MPT (MosaicML 2023: transformers' MptForCausalLM, llm-foundry's MPTForCausalLM, the name
// mosaicml/mpt-7b's config.json gives): pre-LayerNorm blocks, a fused Wqkv and out_proj, an
// up/down GELU MLP of expansion_ratio x d_model, no biases (no_bias, default true) and the LM
// head tied to wte. Positions: ALiBi when attn_config.alibi (MptAttentionConfig's default true),
// rotary when llm-foundry's attn_config.rope, else a learned table (learned_pos_emb). Absent
// sizes take MptConfig's defaults (d_model 2048, n_heads 16, n_layers 24, expansion_ratio 4,
// max_seq_len 2048, vocab_size 50368). What changes the cost in a way meshplan does not model
// (qk_ln, prefix_lm, an ffn_type other than mptmlp) is refused, naming the field.
TransformerConfig mpt(const nlohmann::json& json, const std::string& source) {
  const nlohmann::json attn =
      is_set(json, "attn_config") ? json["attn_config"] : nlohmann::json::object();
  const std::string attn_source = source + ": attn_config";
  if (!attn.is_object()) {
    throw InputError(fmt::format("{}: not an object ({})", attn_source, attn.dump()));
  }
  for (const char* field : {"qk_ln", "qk_gn", "prefix_lm"}) {
    if (optional_bool(attn, field, false, attn_source)) {
      throw InputError(fmt::format("{}: {}: not modelled (true)", attn_source, field));
    }
  }
  // llm-foundry's attn_config (configuration_mpt.py): sliding_window_size -1 is full attention;
  // n >= 0 lets query i attend keys i - n <= j <= i (llmfoundry/models/layers/attention.py
  // scaled_multihead_dot_product_attention: triu(diagonal=-n) of the causal mask;
  // flash_attn_fn: window_size=(n, n) with causal), n + 1 keys: meshplan's window w = n + 1.
  int64_t mpt_window_tokens = 0;
  if (is_set(attn, "sliding_window_size")) {
    const int64_t n = require_int(attn, "sliding_window_size", attn_source);
    if (n < -1) {
      throw InputError(
          fmt::format("{}: sliding_window_size: must be -1 (full attention) or a window of n "
                      "keys before the query, n >= 0 ({})",
                      attn_source, n));
    }
    mpt_window_tokens = n == -1 ? 0 : n + 1;
  }
  require_unmodelled(attn, "attn_logit_softcapping", nlohmann::json(),
                     "logit soft-capping is not modelled", attn_source);
  if (is_set(json, "block_overrides")) {
    throw InputError(
        fmt::format("{}: block_overrides: per-layer block overrides are not modelled ({})", source,
                    json["block_overrides"].dump()));
  }
  // llm-foundry ffn.py: ffn_hidden_size, when given, replaces expansion_ratio x d_model;
  // ffn_act_fn defaults to {name: gelu}.
  std::optional<int64_t> ffn_hidden_size;
  if (is_set(json, "ffn_config")) {
    const nlohmann::json& ffn = json["ffn_config"];
    const std::string ffn_source = source + ": ffn_config";
    if (!ffn.is_object()) {
      throw InputError(fmt::format("{}: not an object ({})", ffn_source, ffn.dump()));
    }
    const std::string ffn_type =
        is_set(ffn, "ffn_type") ? require_string(ffn, "ffn_type", ffn_source) : "mptmlp";
    if (ffn_type != "mptmlp") {
      throw InputError(fmt::format("{}: ffn_type: only MPT's GELU MLP (mptmlp) is modelled ({})",
                                   ffn_source, ffn_type));
    }
    if (is_set(ffn, "ffn_hidden_size")) {
      ffn_hidden_size = require_size(ffn, "ffn_hidden_size", ffn_source);
    }
    if (is_set(ffn, "ffn_act_fn")) {
      const nlohmann::json& act = ffn["ffn_act_fn"];
      if (!act.is_object() || !act.contains("name") || act["name"] != "gelu") {
        throw InputError(
            fmt::format("{}: ffn_act_fn: only GELU ({{\"name\": \"gelu\"}}) is "
                        "modelled ({})",
                        ffn_source, act.dump()));
      }
    }
  }
  TransformerConfig model;
  model.name = source;
  model.num_layers = optional_size(json, "n_layers", 24, source);
  model.hidden_size = optional_size(json, "d_model", 2048, source);
  model.num_attention_heads = optional_size(json, "n_heads", 16, source);
  const std::string attn_type = is_set(attn, "attn_type")
                                    ? require_string(attn, "attn_type", attn_source)
                                    : "multihead_attention";
  if (attn_type == "multihead_attention") {
    model.num_kv_heads = model.num_attention_heads;
  } else if (attn_type == "multiquery_attention") {
    model.num_kv_heads = 1;
  } else if (attn_type == "grouped_query_attention") {  // llm-foundry's kv_n_heads
    model.num_kv_heads = require_size(attn, "kv_n_heads", attn_source);
  } else {
    throw InputError(
        fmt::format("{}: attn_type: expected multihead_attention, multiquery_attention or "
                    "grouped_query_attention ({})",
                    attn_source, attn_type));
  }
  model.head_dim = default_head_dim(model.hidden_size, model.num_attention_heads, source);
  const double expansion_ratio =
      is_set(json, "expansion_ratio") ? require_number(json, "expansion_ratio", source) : 4.0;
  if (!(expansion_ratio > 0 && expansion_ratio <= 1024)) {
    throw InputError(
        fmt::format("{}: expansion_ratio: must be in (0, 1024] ({})", source, expansion_ratio));
  }
  // llm-foundry MPTMLP: int(expansion_ratio * d_model) columns (default_head_dim above bounds
  // d_model, so the product fits the cast), or ffn_config.ffn_hidden_size when given.
  model.ffn_hidden_size = ffn_hidden_size.value_or(
      static_cast<int64_t>(expansion_ratio * static_cast<double>(model.hidden_size)));
  model.vocab_size = optional_size(json, "vocab_size", 50368, source);
  model.max_position_embeddings = optional_size(json, "max_seq_len", 2048, source);
  model.seq_length =
      optional_size_or_none(json, "seq_length", model.max_position_embeddings, source);
  model.activation = Activation::kGelu;
  model.norm = Norm::kLayerNorm;
  if (optional_bool(attn, "alibi", true, attn_source)) {
    model.positions = Positions::kAlibi;
  } else if (optional_bool(attn, "rope", false, attn_source)) {
    model.positions = Positions::kRope;
    // llm-foundry's attn_config.rope_theta, default 10000 (llmfoundry/models/layers/blocks.py
    // attn_config_defaults).
    model.rope_theta = is_set(attn, "rope_theta") ? require_number(attn, "rope_theta", attn_source)
                                                  : kDefaultRopeTheta;
  } else if (optional_bool(json, "learned_pos_emb", true, source)) {  // MptConfig default true
    model.positions = Positions::kLearned;
  } else {
    throw InputError(fmt::format(
        "{}: learned_pos_emb: a model without position encoding (no ALiBi, rotary or learned "
        "table) is not modelled (false)",
        source));
  }
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", true, source);
  // MptConfig resid_pdrop and emb_pdrop, MptAttentionConfig attn_pdrop: each default 0.0.
  model.dropout = any_dropout(json, {{"resid_pdrop", 0.0}, {"emb_pdrop", 0.0}}, source) ||
                  any_dropout(attn, {{"attn_pdrop", 0.0}}, attn_source);
  const bool biases = !optional_bool(json, "no_bias", true, source);
  model.qkv_bias = biases;
  model.attention_output_bias = biases;
  model.mlp_bias = biases;
  model.sliding_window = mpt_window_tokens;
  return model;
}

}  // namespace hf

bool is_hf_config(const nlohmann::json& json) {
  return json.is_object() && (json.contains("architectures") || json.contains("model_type"));
}

void reject_mixture_of_experts(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    return;
  }
  // Mixtral (num_local_experts), Qwen2-MoE and others (num_experts): one expert is dense.
  for (const char* field : {"num_local_experts", "num_experts"}) {
    if (hf::is_set(json, field) && require_int(json, field, source) > 1) {
      hf::reject_moe_field(field, json[field], source);
    }
  }
  // DeepSeek-V2/V3: n_routed_experts experts beside shared ones.
  if (hf::is_set(json, "n_routed_experts") && require_int(json, "n_routed_experts", source) >= 1) {
    hf::reject_moe_field("n_routed_experts", json["n_routed_experts"], source);
  }
  for (const auto& [key, value] : json.items()) {
    const bool unset = value.is_null() || value == false || value == 0;
    if (key.rfind("moe_", 0) == 0 && !unset) {
      hf::reject_moe_field(key, value, source);
    }
  }
}

std::string hf_config_key(const nlohmann::json& json, const std::string& field) {
  const std::string model_type(hf::hf_family(json, "").model_type);
  // seq_length is the config's own key when it states one; else the length came from the
  // position count.
  const bool states_length = hf::is_set(json, "seq_length");
  using Names = std::initializer_list<std::pair<std::string_view, std::string_view>>;
  const auto lookup = [&field](Names names) -> std::string {
    for (const auto& [internal, key] : names) {
      if (field == internal) {
        return std::string(key);
      }
    }
    return field;
  };
  if (field == "seq_length" && !states_length) {
    return lookup({{"seq_length", model_type == "gpt2"  ? "n_positions"
                                  : model_type == "mpt" ? "max_seq_len"
                                                        : "max_position_embeddings"}});
  }
  if (model_type == "gpt2") {
    return lookup({{"num_layers", "n_layer"},
                   {"hidden_size", "n_embd"},
                   {"num_attention_heads", "n_head"},
                   {"num_kv_heads", "n_head"},
                   {"ffn_hidden_size", "n_inner"},
                   {"max_position_embeddings", "n_positions"}});
  }
  if (model_type == "mpt") {
    return lookup({{"num_layers", "n_layers"},
                   {"hidden_size", "d_model"},
                   {"num_attention_heads", "n_heads"},
                   {"num_kv_heads", "attn_config.kv_n_heads"},
                   {"ffn_hidden_size", hf::is_set(json, "ffn_config") ? "ffn_config.ffn_hidden_size"
                                                                      : "expansion_ratio"},
                   {"max_position_embeddings", "max_seq_len"},
                   {"rope_theta", "attn_config.rope_theta"}});
  }
  const bool llama4 = model_type == "llama4_text";
  const bool local_experts = model_type == "mixtral" || model_type == "gpt_oss" || llama4;
  const bool routed_experts = model_type == "deepseek_v3" || model_type == "glm4_moe";
  const std::string_view experts = local_experts    ? "num_local_experts"
                                   : routed_experts ? "n_routed_experts"
                                                    : "num_experts";
  const std::string rotary_key =
      rotary_percent_key(json, model_type == "gpt_neox" ? "rotary_pct" : "partial_rotary_factor");
  const std::string scaling = rope_scaling_key(json);
  const std::string scaling_type_key = scaling + ".rope_type";
  const std::string scaling_factor_key = scaling + ".factor";
  const std::string scaling_low_key = scaling + ".low_freq_factor";
  const std::string scaling_high_key = scaling + ".high_freq_factor";
  const std::string scaling_original_key = scaling + ".original_max_position_embeddings";
  const std::string scaling_beta_fast_key = scaling + ".beta_fast";
  const std::string scaling_beta_slow_key = scaling + ".beta_slow";
  const std::string scaling_mscale_key = scaling + ".mscale";
  const std::string scaling_mscale_all_dim_key = scaling + ".mscale_all_dim";
  return lookup(
      {{"num_layers", "num_hidden_layers"},
       {"rotary_percent", rotary_key},
       {"rope_theta", rope_theta_key(json, model_type)},
       {"rope_local_theta", rope_local_theta_key(json)},
       {"rope_scaling", scaling_type_key},
       {"rope_scaling_factor", scaling_factor_key},
       {"rope_scaling_low_freq_factor", scaling_low_key},
       {"rope_scaling_high_freq_factor", scaling_high_key},
       {"rope_scaling_original_max_positions", scaling_original_key},
       {"rope_scaling_beta_fast", scaling_beta_fast_key},
       {"rope_scaling_beta_slow", scaling_beta_slow_key},
       {"rope_scaling_mscale", scaling_mscale_key},
       {"rope_scaling_mscale_all_dim", scaling_mscale_all_dim_key},
       {"num_kv_heads", "num_key_value_heads"},
       {"ffn_hidden_size", llama4 ? "intermediate_size_mlp" : "intermediate_size"},
       {"no_rope_freq", "no_rope_layers"},
       {"qk_l2_norm", "use_qk_norm"},
       {"num_experts", experts},
       {"experts_per_token", "num_experts_per_tok"},
       {"activation_clamp_value",
        model_type == "gpt_oss" ? "swiglu_limit" : "activation_clamp_value"},
       {"expert_ffn_hidden_size", local_experts ? "intermediate_size" : "moe_intermediate_size"},
       {"first_dense_layers", "first_k_dense_replace"},
       {"moe_layers", routed_experts ? "moe_layer_freq"
                      : llama4       ? "moe_layers"
                                     : "decoder_sparse_step"},
       {"router_num_groups", "n_group"},
       {"router_group_topk", "topk_group"},
       {"mtp_num_layers", "num_nextn_predict_layers"},
       {"num_shared_experts", "n_shared_experts"},
       {"shared_expert_ffn_hidden_size", model_type == "qwen2_moe"
                                             ? "shared_expert_intermediate_size"
                                         : llama4 ? "intermediate_size"
                                                  : "moe_intermediate_size"}});
}

TransformerConfig model_from_hf_config(const nlohmann::json& json, const std::string& source) {
  const std::string_view model_type = hf::hf_family(json, source).model_type;
  if (!hf::is_moe_family(model_type)) {
    reject_mixture_of_experts(json, source);
  }
  TransformerConfig model;
  if (model_type == "gpt2") {
    hf::check_activation(json, "activation_function", "gelu_new", hf::kGeluActivations, source);
    model = hf::gpt2(json, source);
  } else if (model_type == "gpt_neox") {
    hf::check_activation(json, "hidden_act", "gelu", hf::kGeluActivations, source);
    model = hf::gpt_neox(json, source);
  } else if (model_type == "mpt") {
    model = hf::mpt(json, source);  // MptMLP: GELU, no activation field
  } else if (model_type == "gemma") {
    model = hf::llama_family(json, source);
    hf::gemma(json, source, model);
  } else if (model_type == "gemma2") {
    model = hf::llama_family(json, source);
    hf::gemma2(json, source, model);
  } else if (model_type == "gemma3_text") {
    model = hf::llama_family(json, source);
    hf::gemma3_text(json, source, model);
  } else if (model_type == "gpt_oss") {
    model = hf::llama_family(json, source);
    hf::gpt_oss(json, source, model);
  } else {
    hf::check_activation(json, "hidden_act", "silu", hf::kSiluActivations, source);
    model = hf::llama_family(json, source);
  }
  if (model_type == "llama") {
    // LlamaAttention: q, k, v and o_proj all use bias = attention_bias; LlamaMLP: mlp_bias.
    model.qkv_bias = hf::optional_bool(json, "attention_bias", false, source);
    model.attention_output_bias = model.qkv_bias;
    model.mlp_bias = hf::optional_bool(json, "mlp_bias", false, source);
  } else if (model_type == "qwen2") {
    // Qwen2Attention: q, k, v_proj with bias, o_proj without; Qwen2MLP without biases.
    model.qkv_bias = true;
  } else if (model_type == "qwen3") {
    // Qwen3Attention (transformers models/qwen3/modeling_qwen3.py): q, k, v and o_proj with
    // bias = attention_bias (default false), RMSNorm q_norm and k_norm over head_dim; Qwen3MLP
    // without biases.
    model.qkv_bias = hf::optional_bool(json, "attention_bias", false, source);
    model.attention_output_bias = model.qkv_bias;
    model.qk_norm = true;
  } else if (model_type == "phi3") {
    // Phi3Attention: one fused qkv_proj and o_proj, Phi3MLP: one fused gate_up_proj and
    // down_proj, none with bias (transformers models/phi3/modeling_phi3.py): Llama's weights
    // concatenated, the same parameters and GEMM FLOPs. partial_rotary_factor (Phi3Config default
    // 1.0; Phi-4-mini 0.75) rotates part of each head. Phi3Config: resid_pdrop, embd_pdrop and
    // attention_dropout, each default 0.0.
    hf::require_unmodelled(json, "attention_bias", false,
                           "Phi-3 attention with biases is not modelled", source);
    model.dropout = hf::any_dropout(
        json, {{"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attention_dropout", 0.0}}, source);
    model.rotary_percent = read_rotary_percent(
        json, {.legacy_field = "partial_rotary_factor", .class_default = 1.0, .partial = true},
        "Phi3ForCausalLM", source);
  }  // Mistral: no biases anywhere (MistralAttention, MistralMLP).
  if (model_type == "mixtral") {
    hf::mixtral(json, source, model);
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    // Qwen2MoeAttention: q, k, v_proj with bias; Qwen3MoeAttention: q, k, v, o_proj with bias =
    // attention_bias (default false) and RMSNorm q_norm, k_norm over head_dim.
    const bool qwen3 = model_type == "qwen3_moe";
    model.qkv_bias = qwen3 ? hf::optional_bool(json, "attention_bias", false, source) : true;
    model.attention_output_bias = qwen3 && model.qkv_bias;
    model.qk_norm = qwen3;
    hf::qwen_moe(json, model_type, source, model);
  } else if (model_type == "deepseek_v3") {
    hf::deepseek_v3(json, source, model);
  } else if (model_type == "glm4_moe") {
    hf::glm4_moe(json, source, model);
  } else if (model_type == "llama4_text") {
    hf::llama4_text(json, source, model);
  }
  // Every other rotary family rotates whole heads; a partial factor stated for one is refused.
  const bool reads_partial_rotary =
      model_type == "phi3" || model_type == "glm4_moe" || model_type == "gpt_neox";
  if (model.positions == Positions::kRope && !reads_partial_rotary) {
    model.rotary_percent =
        read_rotary_percent(json, HfRotary{}, hf::hf_family(json, source).architecture, source);
  }
  if (model.positions == Positions::kRope && model_type != "mpt") {
    model.rope_theta = read_rope_theta(json, model_type, source);
    model.rope_scaling = read_rope_scaling(json, source);
  }
  if (model_type != "mpt") {
    hf::read_sliding_window(json, model_type, source, model);
  }
  // Gemma 3's sliding layers rotate with a base of their own (10000 against 1e6); kept where it
  // differs and a layer slides (model_config.cpp validate_rope_local_theta).
  if (model.positions == Positions::kRope && model_type != "mpt") {
    if (const std::optional<double> local_theta = read_rope_local_theta(json, model_type, source)) {
      // Stated, it is a base (0 is not "none" in a config), whether or not a layer slides.
      if (!is_valid_rope_base(*local_theta)) {
        throw InputError(
            fmt::format("{}: {}: must be in (1, {:g}], the sliding layers' rotary base ({})",
                        source, rope_local_theta_key(json), kMaxRopeTheta, *local_theta));
      }
      if (model.has_sliding_layer() && *local_theta != model.rope_theta) {
        model.rope_local_theta = *local_theta;
      }
      // transformers scales only the rope_theta layers (rotary_emb_local is unscaled); with one
      // base meshplan's layers all turn by rope_theta and would all be scaled.
      if (model.has_sliding_layer() && *local_theta == model.rope_theta &&
          model.has_rope_scaling()) {
        throw InputError(fmt::format(
            "{}: {}: equals rope_theta, so meshplan cannot tell the unscaled sliding layers from "
            "the scaled global ones ({:g})",
            source, rope_local_theta_key(json), *local_theta));
      }
    }
  }
  // The classes that read layer_types check it also where no layer ends up windowed
  // (transformers' layer_type_validation in the config's __init__): a malformed list is refused
  // even when sliding_window is null or use_sliding_window false.
  const bool reads_layer_types = model_type == "qwen2" || model_type == "qwen3" ||
                                 model_type == "qwen2_moe" || model_type == "qwen3_moe" ||
                                 model_type == "gemma2" || model_type == "gemma3_text" ||
                                 model_type == "gpt_oss";
  if (reads_layer_types && hf::is_set(json, "layer_types") && model.num_layers <= kMaxLayers) {
    hf::read_layer_types(json, model.num_layers, source);
  }
  return model;
}

}  // namespace meshplan::models
