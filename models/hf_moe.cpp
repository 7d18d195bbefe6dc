// Hugging Face configs of the mixture-of-experts families: Mixtral, Qwen2-MoE and Qwen3-MoE,
// DeepSeek-V3 (and Kimi K2), GLM-4.5 and gpt-oss. Field names and defaults follow their
// transformers configuration classes and the layer definitions in their modeling files.

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "hf_families.h"
#include "hf_fields.h"
#include "hf_rotary.h"

namespace meshplan::models::hf {

void reject_moe_field(const std::string& field, const nlohmann::json& value,
                      const std::string& source) {
  throw InputError(fmt::format(
      "{}: {}: mixture-of-experts field in a dense architecture; MoE models load as "
      "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, "
      "Glm4MoeForCausalLM, GptOssForCausalLM or Llama4ForCausalLM ({})",
      source, field, value.dump()));
}

// Mixtral (Jiang et al. 2024; transformers' MixtralSparseMoeBlock): every layer's MLP is E
// SwiGLU experts of intermediate_size under a bias-free h -> E router, top num_experts_per_tok.
void mixtral(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  model.num_experts = optional_size(json, "num_local_experts", 8, source);
  model.experts_per_token = optional_size(json, "num_experts_per_tok", 2, source);
  model.expert_ffn_hidden_size = model.ffn_hidden_size;
}

// One layer count `num_layers` long list of 0 and 1 from `json`'s num_hidden_layers, for a
// model whose MoE layers are not a dense prefix; empty when validate_model will refuse the count.
std::vector<int> moe_layer_list(const nlohmann::json& json, const std::string& source) {
  const int64_t num_layers = require_size(json, "num_hidden_layers", source);
  return num_layers > kMaxLayers ? std::vector<int>{}
                                 : std::vector<int>(static_cast<size_t>(num_layers), 0);
}

// Qwen2-MoE and Qwen3-MoE (transformers' Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock):
// num_experts experts of moe_intermediate_size; Qwen2-MoE adds one shared expert of
// shared_expert_intermediate_size behind an h -> 1 sigmoid gate. Qwen2MoeDecoderLayer builds
// the MoE block where `layer_idx not in mlp_only_layers` and `(layer_idx + 1) %
// decoder_sparse_step == 0` (defaults [] and 1: every layer), the dense MLP of
// intermediate_size elsewhere: read as the model's moe_layers.
void qwen_moe(const nlohmann::json& json, std::string_view model_type, const std::string& source,
              TransformerConfig& model) {
  const bool qwen3 = model_type == "qwen3_moe";
  model.num_experts = optional_size(json, "num_experts", qwen3 ? 128 : 60, source);
  model.experts_per_token = optional_size(json, "num_experts_per_tok", qwen3 ? 8 : 4, source);
  model.expert_ffn_hidden_size =
      optional_size(json, "moe_intermediate_size", qwen3 ? 768 : 1408, source);
  const int64_t sparse_step = optional_size(json, "decoder_sparse_step", 1, source);
  std::vector<int> dense_layers;
  if (is_set(json, "mlp_only_layers")) {
    const nlohmann::json& listed = json["mlp_only_layers"];
    if (!listed.is_array()) {
      throw InputError(fmt::format("{}: mlp_only_layers: expected a list of layer indices ({})",
                                   source, listed.dump()));
    }
    const int64_t num_layers = require_size(json, "num_hidden_layers", source);
    for (size_t i = 0; i < listed.size(); ++i) {
      if (!listed[i].is_number_integer() || listed[i].get<int64_t>() < 0 ||
          listed[i].get<int64_t>() >= num_layers) {
        throw InputError(
            fmt::format("{}: mlp_only_layers[{}]: expected a layer index in [0, {}) ({})", source,
                        i, num_layers, listed[i].dump()));
      }
      dense_layers.push_back(listed[i].get<int>());
    }
  }
  if (sparse_step != 1 || !dense_layers.empty()) {
    model.moe_layers = moe_layer_list(json, source);
    for (size_t layer = 0; layer < model.moe_layers.size(); ++layer) {
      const bool listed = std::find(dense_layers.begin(), dense_layers.end(),
                                    static_cast<int>(layer)) != dense_layers.end();
      model.moe_layers[layer] = !listed && (static_cast<int64_t>(layer) + 1) % sparse_step == 0;
    }
  }
  if (!qwen3) {
    const int64_t shared = is_set(json, "shared_expert_intermediate_size")
                               ? require_int(json, "shared_expert_intermediate_size", source)
                               : 5632;  // Qwen2MoeConfig default
    if (shared < 0) {
      throw InputError(fmt::format("{}: shared_expert_intermediate_size: must not be negative ({})",
                                   source, shared));
    }
    if (shared > 0) {
      model.num_shared_experts = 1;
      model.shared_expert_ffn_hidden_size = shared;
      model.shared_expert_gate = true;
    }
  }
}

// The config class's value for a key the file leaves out (`absent`), where `absent` may be none
// (the key is then required); null in the file means none (`null_value`).
struct MoeKeyDefault {
  std::optional<int64_t> absent;
  int64_t null_value = 0;
};

// The mixture-of-experts blocks DeepSeek-V3 and GLM-4.5 share (transformers' Glm4MoeDecoderLayer
// is DeepseekV3DecoderLayer; DeepSeek-AI 2024, Sec. 2.1): the first first_k_dense_replace layers
// dense (intermediate_size), then n_routed_experts of moe_intermediate_size, top
// num_experts_per_tok, n_shared_experts shared ones of the same size and a sigmoid router with an
// e_score_correction_bias (aux-loss-free balancing, Sec. 2.1.2), limited to topk_group of n_group
// groups per token (one group is no limit). The multi-token-prediction depths (Sec. 2.2),
// num_nextn_predict_layers (1 in deepseek-ai's and zai-org's config.json), become mtp_num_layers,
// Megatron-Core's --mtp-num-layers; absent is 0 (no MTP): neither config class has the key and
// neither CausalLM class builds the module (Glm4MoeModel ignores its weights). validate_model
// checks the value. An absent key takes the config class's default, as transformers reads the
// file.
struct DeepSeekMoeDefaults {
  MoeKeyDefault routed_experts, experts_per_token, expert_ffn_hidden_size;
  MoeKeyDefault shared_experts, groups, group_topk, dense_layers;
};

void deepseek_moe_blocks(const nlohmann::json& json, const std::string& source,
                         const DeepSeekMoeDefaults& defaults, TransformerConfig& model) {
  const auto read = [&json, &source](const char* field, const MoeKeyDefault& key) {
    if (!json.contains(field) && key.absent) {
      return *key.absent;
    }
    if (json.contains(field) && json[field].is_null()) {
      return key.null_value;
    }
    return require_int(json, field, source);
  };
  const auto read_size = [&json, &source](const char* field, const MoeKeyDefault& key) {
    return key.absent ? optional_size(json, field, *key.absent, source)
                      : require_size(json, field, source);
  };
  model.mtp_num_layers = is_set(json, "num_nextn_predict_layers")
                             ? require_int(json, "num_nextn_predict_layers", source)
                             : 0;
  model.num_experts = read_size("n_routed_experts", defaults.routed_experts);
  model.experts_per_token = read_size("num_experts_per_tok", defaults.experts_per_token);
  model.expert_ffn_hidden_size =
      read_size("moe_intermediate_size", defaults.expert_ffn_hidden_size);
  // n_shared_experts shared experts are one DeepseekV3MLP of n_shared_experts x
  // moe_intermediate_size: the same parameters and FLOPs as n of moe_intermediate_size.
  model.num_shared_experts = read("n_shared_experts", defaults.shared_experts);
  model.shared_expert_ffn_hidden_size =
      model.num_shared_experts > 0 ? model.expert_ffn_hidden_size : 0;
  model.router_score_bias = true;
  // Node-limited routing (Sec. 2.1.2; DeepseekV3TopkRouter.get_topk_indices).
  const int64_t groups = read("n_group", defaults.groups);
  if (groups != 1) {
    model.router_num_groups = groups;
    model.router_group_topk = read("topk_group", defaults.group_topk);
  }
  model.first_dense_layers = read("first_k_dense_replace", defaults.dense_layers);
}

// DeepSeek-V3 (DeepSeek-AI 2024; transformers' DeepseekV3Model): MLA attention and
// deepseek_moe_blocks with DeepseekV3Config's defaults (transformers configuration_deepseek_v3.py:
// n_shared_experts 1, n_group 8, topk_group 4, first_k_dense_replace 3, q_lora_rank 1536; the
// expert sizes required); null is none (0 shared experts, one group, no dense prefix, no query
// compression: DeepSeek-V2-Lite's q_lora_rank null).
void deepseek_v3(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  require_unmodelled(json, "attention_bias", false, "MLA with attention biases is not modelled",
                     source);
  deepseek_moe_blocks(json, source,
                      {.routed_experts = {},
                       .experts_per_token = {},
                       .expert_ffn_hidden_size = {},
                       .shared_experts = {1, 0},
                       .groups = {8, 1},
                       .group_topk = {4, 0},
                       .dense_layers = {3, 0}},
                      model);
  // deepseek-ai's remote DeepseekV3DecoderLayer (modeling_deepseek.py): MoE where `layer_idx >=
  // first_k_dense_replace and layer_idx % moe_layer_freq == 0` (1 in every published config;
  // transformers' own class has no such key).
  const int64_t moe_layer_freq = optional_size(json, "moe_layer_freq", 1, source);
  if (moe_layer_freq != 1) {
    model.moe_layers = moe_layer_list(json, source);
    for (size_t layer = 0; layer < model.moe_layers.size(); ++layer) {
      const auto index = static_cast<int64_t>(layer);
      model.moe_layers[layer] = index >= model.first_dense_layers && index % moe_layer_freq == 0;
    }
    model.first_dense_layers = 0;
  }
  model.q_lora_rank = !json.contains("q_lora_rank")   ? 1536
                      : json["q_lora_rank"].is_null() ? 0
                                                      : require_int(json, "q_lora_rank", source);
  if (is_set(json, "q_lora_rank") && model.q_lora_rank <= 0) {
    throw InputError(fmt::format("{}: q_lora_rank: must be positive, or null for none ({})", source,
                                 model.q_lora_rank));
  }
  model.kv_lora_rank = require_size(json, "kv_lora_rank", source);
  model.qk_nope_head_dim = require_size(json, "qk_nope_head_dim", source);
  model.qk_rope_head_dim = require_size(json, "qk_rope_head_dim", source);
  model.v_head_dim = require_size(json, "v_head_dim", source);
  model.head_dim = model.qk_nope_head_dim + model.qk_rope_head_dim;
  model.num_kv_heads = model.num_attention_heads;
}

// GLM-4.5 and GLM-4.5-Air (GLM-4.5 Team 2025, "GLM-4.5: Agentic, Reasoning, and Coding (ARC)
// Foundation Models", Table 1; transformers models/glm4_moe/modular_glm4_moe.py): Llama's layout
// with grouped-query attention of head_dim-wide heads (96 x 128 over h 5120 or 4096), q, k and
// v_proj with bias = attention_bias and o_proj without, RMSNorm q_norm and k_norm over head_dim
// when use_qk_norm, and deepseek_moe_blocks with Glm4MoeConfig's defaults (n_routed_experts 128,
// num_experts_per_tok 8, moe_intermediate_size 1408, n_shared_experts 1, n_group 1, topk_group 1,
// first_k_dense_replace 1) and partial_rotary_factor (0.5: half of each head rotated).
// routed_scaling_factor and norm_topk_prob scale the routing weights only.
void glm4_moe(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  model.qkv_bias = optional_bool(json, "attention_bias", false, source);
  model.attention_output_bias = false;
  model.qk_norm = optional_bool(json, "use_qk_norm", false, source);
  model.rotary_percent = read_rotary_percent(
      json, {.legacy_field = "partial_rotary_factor", .class_default = 0.5, .partial = true},
      "Glm4MoeForCausalLM", source);
  deepseek_moe_blocks(json, source,
                      {.routed_experts = {128, 0},
                       .experts_per_token = {8, 0},
                       .expert_ffn_hidden_size = {1408, 0},
                       .shared_experts = {1, 0},
                       .groups = {1, 1},
                       .group_topk = {1, 0},
                       .dense_layers = {1, 0}},
                      model);
}

// GptOssConfig's defaults (transformers configuration_gpt_oss.py): head_dim 64, sliding_window
// 128 on every other layer (layer_types None: "sliding_attention" if bool((i + 1) % 2)),
// 128 experts, top 4, swiglu_alpha 1.702 and swiglu_limit 7.0.
constexpr int64_t kGptOssDefaultHeadDim = 64;
constexpr int64_t kGptOssDefaultSlidingWindow = 128;
constexpr int64_t kGptOssWindowPattern = 2;
constexpr int64_t kGptOssDefaultExperts = 128;
constexpr int64_t kGptOssDefaultExpertsPerToken = 4;
constexpr double kGptOssSwigluAlpha = 1.702;
constexpr double kGptOssDefaultSwigluLimit = 7.0;

// gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Sec. 2; transformers
// modeling_gpt_oss.py): Llama's pre-RMSNorm layout with q/k/v/o biases (attention_bias, default
// true), a learned sink logit per head (GptOssAttention.sinks), every layer an MoE of E experts
// of intermediate_size under a router with a bias (GptOssTopKRouter), the experts' gate/up and
// down projections with biases (GptOssExperts: gate_up_proj_bias, down_proj_bias, always) and
// the clamped quick-GELU unit (gate.clamp(max=limit) * sigmoid(alpha gate) * (up.clamp(-limit,
// limit) + 1)); hidden_act is not read by the experts. No dropout but attention_dropout (default
// 0.0), an untied head. rope_scaling (YaRN) changes no cost.
void gpt_oss(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  if (!json.contains("head_dim")) {
    model.head_dim = kGptOssDefaultHeadDim;  // null: hidden_size / num_attention_heads
  }
  model.qkv_bias = optional_bool(json, "attention_bias", true, source);
  model.attention_output_bias = model.qkv_bias;
  model.mlp_bias = true;
  model.attention_sinks = true;
  model.router_bias = true;
  require_unmodelled(json, "swiglu_alpha", kGptOssSwigluAlpha,
                     "the experts' gate is quick GELU, x sigmoid(1.702 x); another gain is not "
                     "modelled",
                     source);
  model.activation = Activation::kQuickGeglu;
  model.glu_linear_offset = 1.0;
  reject_null(json, "swiglu_limit", source);
  model.activation_clamp_value = kGptOssDefaultSwigluLimit;
  if (json.contains("swiglu_limit")) {
    // GptOssExperts clamps the gate to <= limit and up to [-limit, limit]; meshplan's
    // activation_clamp_value 0 means no clamp, so a limit of 0 or less would be read as none.
    const double limit = require_number(json, "swiglu_limit", source);
    if (!(limit > 0)) {
      throw InputError(fmt::format(
          "{}: swiglu_limit: must be positive, the experts' clamp (gate <= limit, up in "
          "[-limit, limit]) ({})",
          source, limit));
    }
    model.activation_clamp_value = limit;
  }
  model.num_experts = optional_size(json, "num_local_experts", kGptOssDefaultExperts, source);
  model.experts_per_token =
      optional_size(json, "num_experts_per_tok", kGptOssDefaultExpertsPerToken, source);
  // openai's config.json states experts_per_token beside num_experts_per_tok, the key
  // GptOssConfig and GptOssTopKRouter read: one that differs would be silently ignored.
  if (is_set(json, "experts_per_token")) {
    const int64_t stated = require_int(json, "experts_per_token", source);
    if (stated != model.experts_per_token) {
      throw InputError(fmt::format(
          "{}: experts_per_token: differs from num_experts_per_tok, the key transformers reads "
          "({} != {})",
          source, stated, model.experts_per_token));
    }
  }
  model.expert_ffn_hidden_size = model.ffn_hidden_size;
  if (!json.contains("sliding_window")) {
    model.sliding_window = kGptOssDefaultSlidingWindow;
  } else {
    model.sliding_window =
        is_set(json, "sliding_window") ? require_size(json, "sliding_window", source) : 0;
  }
  if (model.sliding_window > 0) {
    read_alternating_windows(json, kGptOssWindowPattern, source, model);
  }
}

// Llama 4's defaults (transformers configuration_llama4.py Llama4TextConfig): 16 experts, top 1,
// a dense MLP of 16384, NoPE every fourth layer, chunks of 8192 tokens.
constexpr int64_t kLlama4DefaultExperts = 16;
constexpr int64_t kLlama4DefaultExpertsPerToken = 1;
constexpr int64_t kLlama4DefaultDenseFfn = 16384;
constexpr int64_t kLlama4DefaultNoRopeInterval = 4;
constexpr int64_t kLlama4DefaultChunk = 8192;

// A list of layer indices (Llama4TextConfig moe_layers) as one 0/1 entry per layer.
std::vector<int> indexed_layers(const nlohmann::json& json, const char* field,
                                const std::string& source) {
  std::vector<int> layers = moe_layer_list(json, source);
  const nlohmann::json& listed = json[field];
  if (layers.empty()) {
    return layers;  // validate_model refuses the layer count first
  }
  if (!listed.is_array()) {
    throw InputError(
        fmt::format("{}: {}: expected a list of layer indices ({})", source, field, listed.dump()));
  }
  for (size_t i = 0; i < listed.size(); ++i) {
    const nlohmann::json& entry = listed[i];
    if (!entry.is_number_integer() || entry.get<int64_t>() < 0 ||
        entry.get<int64_t>() >= static_cast<int64_t>(layers.size())) {
      throw InputError(fmt::format("{}: {}[{}]: expected a layer index in [0, {}) ({})", source,
                                   field, i, layers.size(), entry.dump()));
    }
    layers[entry.get<size_t>()] = 1;
  }
  return layers;
}

// Llama4TextConfig no_rope_layers (1 = rotary, at least one entry per layer) or, when absent or
// empty, a NoPE layer every no_rope_layer_interval layers ((layer + 1) % interval == 0), as
// meshplan's no_rope_freq (1 = NoPE).
std::vector<int> llama4_nope_layers(const nlohmann::json& json, const std::string& source) {
  std::vector<int> nope = moe_layer_list(json, source);
  const bool listed = is_set(json, "no_rope_layers") && json["no_rope_layers"].is_array() &&
                      !json["no_rope_layers"].empty();
  if (!listed) {
    if (is_set(json, "no_rope_layers") && !json["no_rope_layers"].is_array()) {
      throw InputError(
          fmt::format("{}: no_rope_layers: expected a list of 1 (rotary) and 0 (NoPE) "
                      "({})",
                      source, json["no_rope_layers"].dump()));
    }
    const int64_t interval =
        optional_size(json, "no_rope_layer_interval", kLlama4DefaultNoRopeInterval, source);
    for (size_t layer = 0; layer < nope.size(); ++layer) {
      nope[layer] = (static_cast<int64_t>(layer) + 1) % interval == 0 ? 1 : 0;
    }
    return nope;
  }
  const nlohmann::json& rope = json["no_rope_layers"];
  if (rope.size() < nope.size()) {
    throw InputError(fmt::format("{}: no_rope_layers: expected an entry per layer, {} ({} entries)",
                                 source, nope.size(), rope.size()));
  }
  for (size_t layer = 0; layer < nope.size(); ++layer) {
    if (!rope[layer].is_number_integer() || (rope[layer] != 0 && rope[layer] != 1)) {
      throw InputError(fmt::format("{}: no_rope_layers[{}]: must be 1 (rotary) or 0 (NoPE) ({})",
                                   source, layer, rope[layer].dump()));
    }
    nope[layer] = rope[layer] == 0 ? 1 : 0;
  }
  return nope;
}

// Llama 4 text (Meta 2025, "The Llama 4 herd"; transformers models/llama4, Llama4TextConfig and
// modeling_llama4.py): Llama's layout, q/k/v/o with bias = attention_bias. The MoE layers
// (moe_layers, else every interleave_moe_layer_step-th layer from step - 1:
// Llama4TextDecoderLayer.is_moe_layer) hold num_local_experts SwiGLU experts of
// intermediate_size, top num_experts_per_tok under a bias-free router, and one shared expert of
// intermediate_size (Llama4TextMoe.shared_expert = Llama4TextMLP(config)); the other layers a
// dense SwiGLU MLP of intermediate_size_mlp. NoPE layers (no_rope_layers), the gainless q/k L2
// norm on the rotary layers (use_qk_norm) and chunked attention on them (attention_chunk_size,
// null none) become no_rope_freq, qk_l2_norm and attention_chunk_size, the router's sigmoid of
// the chosen logit scaling the expert's input router_probs_on_input. Not modelled, as it changes
// no GEMM, parameter or stored tensor: attn_temperature_tuning, which scales the NoPE layers'
// queries by position (elementwise).
void llama4_text(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  model.qkv_bias = optional_bool(json, "attention_bias", false, source);
  model.attention_output_bias = model.qkv_bias;
  const int64_t expert_width = model.ffn_hidden_size;  // intermediate_size, llama_family's
  model.ffn_hidden_size =
      optional_size(json, "intermediate_size_mlp", kLlama4DefaultDenseFfn, source);
  model.num_experts = optional_size(json, "num_local_experts", kLlama4DefaultExperts, source);
  model.experts_per_token =
      optional_size(json, "num_experts_per_tok", kLlama4DefaultExpertsPerToken, source);
  model.expert_ffn_hidden_size = expert_width;
  model.num_shared_experts = 1;
  model.shared_expert_ffn_hidden_size = expert_width;
  // Llama4TextMoe.forward: router_scores = sigmoid(top-k logits), routed_in = hidden_states *
  // router_scores; the expert outputs are summed unscaled.
  model.router_probs_on_input = true;
  if (is_set(json, "moe_layers")) {
    model.moe_layers = indexed_layers(json, "moe_layers", source);
  } else {
    const int64_t step = optional_size(json, "interleave_moe_layer_step", 1, source);
    model.moe_layers = moe_layer_list(json, source);
    for (size_t layer = 0; layer < model.moe_layers.size(); ++layer) {
      model.moe_layers[layer] = (static_cast<int64_t>(layer) + 1) % step == 0 ? 1 : 0;
    }
  }
  model.no_rope_freq = llama4_nope_layers(json, source);
  model.qk_l2_norm = optional_bool(json, "use_qk_norm", true, source);
  if (!json.contains("attention_chunk_size")) {
    model.attention_chunk_size = kLlama4DefaultChunk;
  } else if (!json["attention_chunk_size"].is_null()) {
    model.attention_chunk_size = require_size(json, "attention_chunk_size", source);
  }
}

}  // namespace meshplan::models::hf
