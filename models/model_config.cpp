// meshplan's own model format (models/presets/models/*.json), model validation and load_model.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>

#include "hf_config.h"
#include "meshplan/input_kind.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "position_fields.h"
#include "preset_source.h"
#include "rope_scaling_fields.h"

namespace meshplan::models {

namespace {

// Upper bounds that catch unit mistakes and typos (a hidden size in bytes, a vocab in tokens of
// a corpus). They are far above any published model: GPT-3 175B has l = 96, h = 12288;
// Llama-3 405B has l = 126, h = 16384, f = 53248, V = 128256. With these bounds every term of
// count_parameters stays below 2^63: l * 3hf <= 1e5 * 3e13 = 3e18. The layer bound is tighter,
// twice the deepest published transformer (DeepNet, Wang et al. 2022: 1,000 layers), because the
// search's time grows with it: 2,048 layers plan in about 11 s here, 100,000 took 400 s
// (kMaxLayers, models.h).
constexpr int64_t kMaxHidden = 1'000'000;
constexpr int64_t kMaxHeads = 100'000;
constexpr int64_t kMaxHeadDim = 100'000;
constexpr int64_t kMaxAttentionWidth = 1'000'000;  // a * d, like the hidden size
constexpr int64_t kMaxFfnHidden = 10'000'000;
constexpr int64_t kMaxVocab = 100'000'000;
// Routed plus shared expert width E f_e + S f_s is held under kMaxFfnHidden, so an MoE layer's
// MLP stays below 2 * 3 h * 1e7 and the count below 2^63 as above. DeepSeek-V3: 256 * 2048 + 2048.
constexpr int64_t kMaxExperts = 100'000;

// Every key of the format; anything else is rejected so a typo is not silently ignored. The
// bias, attention-variant, MoE and MLA keys are the public lists a published run's model reads
// too (models.h), joined here rather than written again.
constexpr std::array<std::string_view, 33> kCoreModelFields = {"name",
                                                               "num_layers",
                                                               "hidden_size",
                                                               "num_attention_heads",
                                                               "num_kv_heads",
                                                               "head_dim",
                                                               "ffn_hidden_size",
                                                               "vocab_size",
                                                               "seq_length",
                                                               "max_position_embeddings",
                                                               "activation",
                                                               "norm",
                                                               "positions",
                                                               "tied_embeddings",
                                                               "dropout",
                                                               "qk_norm",
                                                               "norm_unit_offset",
                                                               "scale_embeddings",
                                                               "sandwich_norm",
                                                               "parallel_residual",
                                                               "attn_logit_softcapping",
                                                               "final_logit_softcapping",
                                                               "query_pre_attn_scalar",
                                                               "rotary_percent",
                                                               "rope_theta",
                                                               "rope_local_theta",
                                                               "moe_layers",
                                                               "no_rope_freq",
                                                               "qk_l2_norm",
                                                               "attention_chunk_size",
                                                               "router_probs_on_input",
                                                               "mtp_num_layers",
                                                               "source"};
constexpr auto kModelFields =
    joined_fields(kCoreModelFields, kRopeScalingModelFields, kBiasModelFields, kVariantModelFields,
                  kMoeModelFields, kMlaModelFields);
static_assert(kModelFields.size() == 67);

void check_size(int64_t value, int64_t max, const char* field, const std::string& source) {
  if (value <= 0) {
    throw InputError(fmt::format("{}: {}: must be positive ({})", source, field, value));
  }
  if (value > max) {
    throw InputError(
        fmt::format("{}: {}: absurdly large, more than {} ({})", source, field, max, value));
  }
}

// Soft-caps above a million leave any bf16 or fp32 logit of a trained model on tanh's linear
// part (|x| / c < 1e-3 for |x| < 1e3): absurd rather than a cap. The attention scale's scalar is
// bounded as a width (kMaxAttentionWidth).
constexpr double kMaxSoftcap = 1e6;
constexpr double kMaxQueryPreAttnScalar = static_cast<double>(kMaxAttentionWidth);
// The gated unit's offset and clamp act on activations of order 1-10 (gpt-oss: 1.0 and 7.0); a
// thousand is absurd for either, as is a million for a clamp.
constexpr double kMaxGluLinearOffset = 1e3;
constexpr double kMaxActivationClamp = 1e6;

// A real field where 0 means "not set": NaN, infinite, negative or above `max` is refused.
void check_positive_or_zero(double value, double max, const char* field,
                            const std::string& source) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    throw InputError(
        fmt::format("{}: {}: must be 0 (none) or positive and finite ({})", source, field, value));
  }
  if (value > max) {
    throw InputError(
        fmt::format("{}: {}: absurdly large, more than {} ({})", source, field, max, value));
  }
}

template <typename Enum, size_t N>
Enum parse_enum(const nlohmann::json& json, const char* field, const std::string& source,
                const std::array<std::pair<std::string_view, Enum>, N>& choices) {
  const std::string text = require_string(json, field, source);
  std::string supported;
  for (const auto& [name, value] : choices) {
    if (text == name) {
      return value;
    }
    supported += supported.empty() ? "" : ", ";
    supported += name;
  }
  throw InputError(fmt::format("{}: {}: unsupported {} ({}); supported: {}", source, field, field,
                               text, supported));
}

constexpr std::array<std::pair<std::string_view, Activation>, 4> kActivations = {
    {{"gelu", Activation::kGelu},
     {"swiglu", Activation::kSwiglu},
     {"geglu", Activation::kGeglu},
     {"quick_geglu", Activation::kQuickGeglu}}};
constexpr std::array<std::pair<std::string_view, Norm>, 2> kNorms = {
    {{"layernorm", Norm::kLayerNorm}, {"rmsnorm", Norm::kRmsNorm}}};
constexpr std::array<std::pair<std::string_view, Positions>, 3> kPositions = {
    {{"learned", Positions::kLearned}, {"rope", Positions::kRope}, {"alibi", Positions::kAlibi}}};

int64_t int_or_zero(const nlohmann::json& json, const char* field, const std::string& source) {
  return json.contains(field) ? require_int(json, field, source) : int64_t{0};
}

bool bool_or_false(const nlohmann::json& json, const char* field, const std::string& source) {
  return json.contains(field) && require_bool(json, field, source);
}

// moe_layers (a model file's key, not a published run's): one 0/1 entry per layer.
void read_moe_layers(const nlohmann::json& json, const std::string& source,
                     TransformerConfig& model) {
  const auto it = json.find("moe_layers");
  if (it == json.end()) {
    return;
  }
  if (!it->is_array()) {
    const std::string text = it->dump();
    throw InputError(fmt::format("{}: moe_layers: expected a list of 0 and 1, one per layer ({})",
                                 source, text.size() > 60 ? text.substr(0, 57) + "..." : text));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    if (!entry.is_number_integer() || (entry != 0 && entry != 1)) {
      throw InputError(fmt::format("{}: moe_layers[{}]: must be 1 (MoE) or 0 (dense) ({})", source,
                                   i, entry.dump()));
    }
    model.moe_layers.push_back(entry.get<int>());
  }
}

// The optional MoE, MLA, qk_norm, parallel_residual and sliding_window fields: absent means a
// dense sequential block with full causal attention, so files written before the fields keep
// their meaning.
void read_moe_and_mla_fields(const nlohmann::json& json, const std::string& source,
                             TransformerConfig& model) {
  model.qk_norm = bool_or_false(json, "qk_norm", source);
  model.norm_unit_offset = bool_or_false(json, "norm_unit_offset", source);
  model.scale_embeddings = bool_or_false(json, "scale_embeddings", source);
  model.sandwich_norm = bool_or_false(json, "sandwich_norm", source);
  model.parallel_residual = bool_or_false(json, "parallel_residual", source);
  const auto number_or_zero = [&](const char* field) {
    return json.contains(field) ? require_number(json, field, source) : 0.0;
  };
  model.attn_logit_softcapping = number_or_zero("attn_logit_softcapping");
  model.final_logit_softcapping = number_or_zero("final_logit_softcapping");
  model.query_pre_attn_scalar = number_or_zero("query_pre_attn_scalar");
  model.rotary_percent =
      json.contains("rotary_percent") ? require_number(json, "rotary_percent", source) : 1.0;
  model.rope_theta =
      json.contains("rope_theta") ? require_number(json, "rope_theta", source) : kDefaultRopeTheta;
  model.rope_local_theta = number_or_zero("rope_local_theta");
  read_rope_scaling_fields(json, source, model);
  read_gated_unit_variant_fields(json, source, model);
  read_moe_fields(json, source, model);
  read_moe_layers(json, source, model);
  model.router_probs_on_input = bool_or_false(json, "router_probs_on_input", source);
  read_mla_fields(json, source, model);
  read_position_variant_fields(json, source, model);
}

// The window pattern as the file gives it, for error messages: N, or the list (shortened).
std::string window_pattern_text(const TransformerConfig& model) {
  if (model.window_attn_layers.empty()) {
    return std::to_string(model.window_attn_skip_freq);
  }
  const std::string text = nlohmann::json(model.window_attn_layers).dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

void check_window_skip_freq(int64_t n, const std::string& source) {
  if (n < 2) {
    throw InputError(fmt::format(
        "{}: window_attn_skip_freq: must be 2 or more, one full-attention layer every N ({})",
        source, n));
  }
}

// Megatron-Core's --window-attn-skip-freq (TransformerConfig.window_attn_skip_freq: an int or a
// list): an integer N >= 2, or one entry per layer, 1 (windowed) or 0 (full attention).
void read_window_pattern(const nlohmann::json& json, const std::string& source,
                         TransformerConfig& model) {
  const auto it = json.find("window_attn_skip_freq");
  if (it == json.end()) {
    return;
  }
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& entry = (*it)[i];
      if (!entry.is_number_integer() || (entry != 0 && entry != 1)) {
        throw InputError(fmt::format(
            "{}: window_attn_skip_freq[{}]: must be 1 (windowed) or 0 (full attention) ({})",
            source, i, entry.dump()));
      }
      model.window_attn_layers.push_back(entry.get<int>());
    }
    return;
  }
  if (!it->is_number()) {
    const std::string text = it->dump();
    throw InputError(fmt::format(
        "{}: window_attn_skip_freq: expected an integer N >= 2 or a list of 0 and 1, one per "
        "layer ({})",
        source, text.size() > 60 ? text.substr(0, 57) + "..." : text));
  }
  model.window_attn_skip_freq = require_int(json, "window_attn_skip_freq", source);
  check_window_skip_freq(model.window_attn_skip_freq, source);  // 0 would read as not given
}

TransformerConfig model_from_meshplan_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({})", source, json.dump()));
  }
  reject_unknown_fields(json, kModelFields, source);
  TransformerConfig model;
  model.name = require_string(json, "name", source);
  model.num_layers = require_int(json, "num_layers", source);
  model.hidden_size = require_int(json, "hidden_size", source);
  model.num_attention_heads = require_int(json, "num_attention_heads", source);
  model.num_kv_heads = require_int(json, "num_kv_heads", source);
  model.head_dim = read_head_dim(json, source, model.hidden_size, model.num_attention_heads);
  model.ffn_hidden_size = require_int(json, "ffn_hidden_size", source);
  model.vocab_size = require_int(json, "vocab_size", source);
  model.seq_length = require_int(json, "seq_length", source);
  model.max_position_embeddings =
      json.contains("max_position_embeddings") && !json["max_position_embeddings"].is_null()
          ? require_int(json, "max_position_embeddings", source)
          : model.seq_length;
  model.activation = parse_activation(json, source);
  model.norm = parse_norm(json, source);
  model.positions = parse_positions(json, source);
  model.tied_embeddings = require_bool(json, "tied_embeddings", source);
  model.qkv_bias = require_bool(json, "qkv_bias", source);
  model.attention_output_bias = require_bool(json, "attention_output_bias", source);
  model.mlp_bias = require_bool(json, "mlp_bias", source);
  // Optional so model and plan files written before the field keep their meaning: absent is
  // Megatron-Core's default hidden_dropout = attention_dropout = 0.1
  // (megatron/core/transformer/transformer_config.py, lines 188 and 191).
  model.dropout = json.contains("dropout") ? require_bool(json, "dropout", source) : true;
  read_moe_and_mla_fields(json, source, model);
  read_attention_variant_fields(json, source, model);
  model.mtp_num_layers = int_or_zero(json, "mtp_num_layers", source);  // absent: no MTP
  if (json.contains("source")) {
    require_string(json, "source", source);  // documentation only, but it must be a string
  }
  return model;
}

void require_zero(int64_t value, const char* field, const char* why, const std::string& source) {
  if (value != 0) {
    throw InputError(fmt::format("{}: {}: must be 0 {} ({})", source, field, why, value));
  }
}

// Group-limited routing: both 0 (no limit), or G groups of E / G experts, M of them per token,
// with at least one expert per chosen group (Megatron-Core group_limited_topk scores a group by
// its top-(k / M) experts: transformer_config.py asserts E % G == 0 and M <= G) and room for the
// k experts in the M groups.
void validate_routing_groups(const TransformerConfig& model, const std::string& source) {
  const int64_t groups = model.router_num_groups;
  const int64_t chosen = model.router_group_topk;
  if (groups == 0 && chosen == 0) {
    return;
  }
  if (groups < 1 || model.num_experts % groups != 0) {
    throw InputError(fmt::format(
        "{}: router_num_groups: must be a positive divisor of the routed expert count ({} of {})",
        source, groups, model.num_experts));
  }
  if (chosen < 1 || chosen > groups) {
    throw InputError(
        fmt::format("{}: router_group_topk: must be between 1 and the group count ({} of {})",
                    source, chosen, groups));
  }
  if (chosen > model.experts_per_token) {
    throw InputError(fmt::format(
        "{}: router_group_topk: must not exceed the experts per token, each chosen group being "
        "scored by its top k / M experts ({} of {})",
        source, chosen, model.experts_per_token));
  }
  if (model.experts_per_token > chosen * (model.num_experts / groups)) {
    throw InputError(
        fmt::format("{}: experts_per_token: more than the {} experts of the chosen groups ({})",
                    source, chosen * (model.num_experts / groups), model.experts_per_token));
  }
}

// MoE fields: all zero for a dense model; else k of E experts, a dense prefix shorter than the
// model and shared experts with a size.
// moe_layers (a list, one 0/1 entry per layer): its length, at least one MoE layer, and the
// dense layers given in it alone (first_dense_layers 0 beside it).
void validate_moe_layers(const TransformerConfig& model, const std::string& source) {
  const std::vector<int>& layers = model.moe_layers;
  if (layers.empty()) {
    return;
  }
  if (static_cast<int64_t>(layers.size()) != model.num_layers) {
    throw InputError(fmt::format("{}: moe_layers: expected one entry per layer, {} ({} entries)",
                                 source, model.num_layers, layers.size()));
  }
  if (std::any_of(layers.begin(), layers.end(),
                  [](int entry) { return entry != 0 && entry != 1; })) {
    throw InputError(fmt::format("{}: moe_layers: entries must be 1 (MoE) or 0 (dense)", source));
  }
  if (std::count(layers.begin(), layers.end(), 1) == 0) {
    throw InputError(
        fmt::format("{}: moe_layers: no MoE layer (a dense model has num_experts 0)", source));
  }
  if (model.first_dense_layers != 0) {
    throw InputError(fmt::format(
        "{}: first_dense_layers: with moe_layers the list gives the dense layers; 0 expected ({})",
        source, model.first_dense_layers));
  }
}

void validate_moe(const TransformerConfig& model, const std::string& source) {
  if (model.num_experts == 0) {
    const char* why = "when num_experts is 0 (a dense model)";
    require_zero(model.experts_per_token, "experts_per_token", why, source);
    require_zero(model.expert_ffn_hidden_size, "expert_ffn_hidden_size", why, source);
    require_zero(model.num_shared_experts, "num_shared_experts", why, source);
    require_zero(model.shared_expert_ffn_hidden_size, "shared_expert_ffn_hidden_size", why, source);
    require_zero(model.shared_expert_gate, "shared_expert_gate", why, source);
    require_zero(model.router_score_bias, "router_score_bias", why, source);
    require_zero(model.router_bias, "router_bias", why, source);
    require_zero(model.router_probs_on_input, "router_probs_on_input", why, source);
    require_zero(model.first_dense_layers, "first_dense_layers", why, source);
    if (!model.moe_layers.empty()) {
      throw InputError(fmt::format("{}: moe_layers: must be absent {} ({} entries)", source, why,
                                   model.moe_layers.size()));
    }
    require_zero(model.router_num_groups, "router_num_groups", why, source);
    require_zero(model.router_group_topk, "router_group_topk", why, source);
    return;
  }
  check_size(model.num_experts, kMaxExperts, "num_experts", source);
  if (model.experts_per_token < 1 || model.experts_per_token > model.num_experts) {
    throw InputError(fmt::format("{}: experts_per_token: must be in [1, num_experts] ({} of {})",
                                 source, model.experts_per_token, model.num_experts));
  }
  check_size(model.expert_ffn_hidden_size, kMaxFfnHidden, "expert_ffn_hidden_size", source);
  if (model.first_dense_layers < 0 || model.first_dense_layers >= model.num_layers) {
    throw InputError(fmt::format("{}: first_dense_layers: must be in [0, num_layers) ({} of {})",
                                 source, model.first_dense_layers, model.num_layers));
  }
  validate_moe_layers(model, source);
  if (model.router_probs_on_input && model.experts_per_token != 1) {
    throw InputError(fmt::format(
        "{}: router_probs_on_input: scaling the expert's input works with one expert per token "
        "(Megatron-Core moe_apply_probs_on_input needs top-1; experts_per_token {})",
        source, model.experts_per_token));
  }
  if (model.num_shared_experts < 0 || model.num_shared_experts > kMaxExperts) {
    throw InputError(fmt::format("{}: num_shared_experts: must be in [0, {}] ({})", source,
                                 kMaxExperts, model.num_shared_experts));
  }
  if (model.num_shared_experts == 0) {
    const char* why = "without shared experts";
    require_zero(model.shared_expert_ffn_hidden_size, "shared_expert_ffn_hidden_size", why, source);
    require_zero(model.shared_expert_gate, "shared_expert_gate", why, source);
  } else {
    check_size(model.shared_expert_ffn_hidden_size, kMaxFfnHidden, "shared_expert_ffn_hidden_size",
               source);
  }
  validate_routing_groups(model, source);
  const int64_t width = model.num_experts * model.expert_ffn_hidden_size +
                        model.num_shared_experts * model.shared_expert_ffn_hidden_size;
  if (width > kMaxFfnHidden) {
    throw InputError(fmt::format(
        "{}: expert_ffn_hidden_size: expert width E f_e + S f_s absurdly large, more than {} ({})",
        source, kMaxFfnHidden, width));
  }
}

// Multi-token prediction (DeepSeek-V3 report Sec. 2.2): 0 (none) to kMaxMtpLayers depths, with
// rotary or no positions: Megatron-LM arguments.py validate_args ("MTP validation", d98e8a64)
// asserts position_embedding_type rope or none; its RMSNorms (enorm, hnorm) are the model's norm.
void validate_mtp(const TransformerConfig& model, const std::string& source) {
  if (model.mtp_num_layers < 0 || model.mtp_num_layers > kMaxMtpLayers) {
    throw InputError(
        fmt::format("{}: mtp_num_layers: must be in [0, {}], 0 for no multi-token prediction ({})",
                    source, kMaxMtpLayers, model.mtp_num_layers));
  }
  if (model.has_mtp() && model.positions != Positions::kRope) {
    throw InputError(fmt::format(
        "{}: mtp_num_layers: multi-token prediction needs rotary positions (Megatron-LM "
        "arguments.py asserts position_embedding_type rope or none) ({} with positions {})",
        source, model.mtp_num_layers, to_string(model.positions)));
  }
}

// Partial rotary (rotary_percent): in (0, 1]; below 1 only for rotary positions and standard
// attention (MLA rotates its own qk_rope_head_dim channels), rotating an even number of channels
// (each rotated pair is a channel and the one half the rotated width further on).
void validate_rotary_percent(const TransformerConfig& model, const std::string& source) {
  if (!(model.rotary_percent > 0.0 && model.rotary_percent <= 1.0)) {
    throw InputError(
        fmt::format("{}: rotary_percent: must be in (0, 1], 1 to rotate every channel "
                    "of a head ({})",
                    source, model.rotary_percent));
  }
  if (!model.has_partial_rotary()) {
    return;
  }
  if (model.positions != Positions::kRope || model.is_mla()) {
    throw InputError(fmt::format(
        "{}: rotary_percent: partial rotary needs rotary positions and standard attention, not {} "
        "({})",
        source,
        model.is_mla() ? "MLA (kv_lora_rank)"
                       : fmt::format("positions {}", to_string(model.positions)),
        model.rotary_percent));
  }
  if (model.rotary_dim() < 2 || model.rotary_dim() % 2 != 0) {
    throw InputError(fmt::format(
        "{}: rotary_percent: rotates int(head_dim {} x {}) = {} channels, not an even number of 2 "
        "or more",
        source, model.head_dim, model.rotary_percent, model.rotary_dim()));
  }
}

// The rotary base (rope_theta): above 1 (a base of 1 or less gives no decaying frequencies) and at
// most kMaxRopeTheta; other than the default only with rotary positions, where it is used.
void validate_rope_theta(const TransformerConfig& model, const std::string& source) {
  if (!is_valid_rope_base(model.rope_theta)) {
    throw InputError(fmt::format("{}: rope_theta: must be in (1, {:g}], the rotary base ({})",
                                 source, kMaxRopeTheta, model.rope_theta));
  }
  if (model.rope_theta != kDefaultRopeTheta && model.positions != Positions::kRope) {
    throw InputError(
        fmt::format("{}: rope_theta: a rotary base needs rotary positions, not positions {} ({})",
                    source, to_string(model.positions), model.rope_theta));
  }
}

// The sliding layers' rotary base (rope_local_theta): 0 (none), or a base as rope_theta's, with
// rotary positions and a layer the window pattern marks sliding to rotate with it.
void validate_rope_local_theta(const TransformerConfig& model, const std::string& source) {
  if (model.rope_local_theta == 0.0) {
    return;
  }
  if (!is_valid_rope_base(model.rope_local_theta)) {
    throw InputError(fmt::format(
        "{}: rope_local_theta: must be 0 (none) or in (1, {:g}], the sliding layers' rotary base "
        "({})",
        source, kMaxRopeTheta, model.rope_local_theta));
  }
  if (model.positions != Positions::kRope) {
    throw InputError(fmt::format(
        "{}: rope_local_theta: a rotary base needs rotary positions, not positions {} ({})", source,
        to_string(model.positions), model.rope_local_theta));
  }
  if (!model.has_sliding_layer()) {
    throw InputError(fmt::format(
        "{}: rope_local_theta: the sliding layers' rotary base, but no layer is sliding "
        "(sliding_window {}) ({})",
        source, model.sliding_window, model.rope_local_theta));
  }
}

// The gated unit's offset and clamp (gpt-oss): a gated activation only; a finite offset, a clamp
// 0 (none) or positive and finite.
void validate_gated_unit_variants(const TransformerConfig& model, const std::string& source) {
  if (!std::isfinite(model.glu_linear_offset) ||
      std::abs(model.glu_linear_offset) > kMaxGluLinearOffset) {
    throw InputError(fmt::format("{}: glu_linear_offset: must be finite, within +-{:g} ({})",
                                 source, kMaxGluLinearOffset, model.glu_linear_offset));
  }
  check_positive_or_zero(model.activation_clamp_value, kMaxActivationClamp,
                         "activation_clamp_value", source);
  if (is_gated(model.activation)) {
    return;
  }
  for (const auto& [field, value] :
       {std::pair{"glu_linear_offset", model.glu_linear_offset},
        std::pair{"activation_clamp_value", model.activation_clamp_value}}) {
    if (value != 0.0) {
      throw InputError(
          fmt::format("{}: {}: needs a gated activation (swiglu, geglu, quick_geglu), "
                      "not {} ({})",
                      source, field, to_string(model.activation), value));
    }
  }
}

// MLA fields: all zero without a kv latent; with one, head_dim is the q/k head (nope + rope),
// every head is its own kv head and the projections carry no biases (DeepSeek-V3).
void validate_mla(const TransformerConfig& model, const std::string& source) {
  if (model.kv_lora_rank == 0) {
    const char* why = "without multi-head latent attention (kv_lora_rank 0)";
    require_zero(model.q_lora_rank, "q_lora_rank", why, source);
    require_zero(model.qk_nope_head_dim, "qk_nope_head_dim", why, source);
    require_zero(model.qk_rope_head_dim, "qk_rope_head_dim", why, source);
    require_zero(model.v_head_dim, "v_head_dim", why, source);
    return;
  }
  check_size(model.kv_lora_rank, kMaxHidden, "kv_lora_rank", source);
  if (model.q_lora_rank != 0) {
    check_size(model.q_lora_rank, kMaxHidden, "q_lora_rank", source);
  }
  check_size(model.qk_nope_head_dim, kMaxHeadDim, "qk_nope_head_dim", source);
  check_size(model.qk_rope_head_dim, kMaxHeadDim, "qk_rope_head_dim", source);
  check_size(model.v_head_dim, kMaxHeadDim, "v_head_dim", source);
  if (model.num_attention_heads * model.v_head_dim > kMaxAttentionWidth) {
    throw InputError(fmt::format(
        "{}: v_head_dim: num_attention_heads * v_head_dim absurdly large, more than {} ({} * {})",
        source, kMaxAttentionWidth, model.num_attention_heads, model.v_head_dim));
  }
  if (model.head_dim != model.qk_nope_head_dim + model.qk_rope_head_dim) {
    throw InputError(
        fmt::format("{}: head_dim: must be qk_nope_head_dim + qk_rope_head_dim with MLA ({} != {})",
                    source, model.head_dim, model.qk_nope_head_dim + model.qk_rope_head_dim));
  }
  if (model.num_kv_heads != model.num_attention_heads) {
    throw InputError(
        fmt::format("{}: num_kv_heads: must equal num_attention_heads with MLA ({} != {})", source,
                    model.num_kv_heads, model.num_attention_heads));
  }
  if (model.qkv_bias || model.attention_output_bias || model.qk_norm || model.attention_sinks) {
    throw InputError(fmt::format(
        "{}: kv_lora_rank: MLA with attention biases, qk_norm or attention_sinks is not "
        "modelled ({})",
        source, model.kv_lora_rank));
  }
}

}  // namespace

int64_t default_head_dim(int64_t hidden_size, int64_t num_attention_heads,
                         const std::string& source) {
  check_size(hidden_size, kMaxHidden, "hidden_size", source);
  check_size(num_attention_heads, kMaxHeads, "num_attention_heads", source);
  if (hidden_size % num_attention_heads != 0) {
    throw InputError(fmt::format(
        "{}: num_attention_heads: does not divide hidden_size and no head_dim is given ({} % {})",
        source, hidden_size, num_attention_heads));
  }
  return hidden_size / num_attention_heads;
}

int64_t read_head_dim(const nlohmann::json& json, const std::string& source, int64_t hidden_size,
                      int64_t num_attention_heads) {
  if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    return require_int(json, "head_dim", source);
  }
  return default_head_dim(hidden_size, num_attention_heads, source);
}

void read_moe_fields(const nlohmann::json& json, const std::string& source,
                     TransformerConfig& model) {
  model.num_experts = int_or_zero(json, "num_experts", source);
  model.experts_per_token = int_or_zero(json, "experts_per_token", source);
  model.expert_ffn_hidden_size = int_or_zero(json, "expert_ffn_hidden_size", source);
  model.num_shared_experts = int_or_zero(json, "num_shared_experts", source);
  model.shared_expert_ffn_hidden_size = int_or_zero(json, "shared_expert_ffn_hidden_size", source);
  model.shared_expert_gate = bool_or_false(json, "shared_expert_gate", source);
  model.router_score_bias = bool_or_false(json, "router_score_bias", source);
  model.router_bias = bool_or_false(json, "router_bias", source);
  model.first_dense_layers = int_or_zero(json, "first_dense_layers", source);
  model.router_num_groups = int_or_zero(json, "router_num_groups", source);
  model.router_group_topk = int_or_zero(json, "router_group_topk", source);
}

void read_mla_fields(const nlohmann::json& json, const std::string& source,
                     TransformerConfig& model) {
  model.q_lora_rank = int_or_zero(json, "q_lora_rank", source);
  model.kv_lora_rank = int_or_zero(json, "kv_lora_rank", source);
  model.qk_nope_head_dim = int_or_zero(json, "qk_nope_head_dim", source);
  model.qk_rope_head_dim = int_or_zero(json, "qk_rope_head_dim", source);
  model.v_head_dim = int_or_zero(json, "v_head_dim", source);
}

void read_stated_bias_fields(const nlohmann::json& json, const std::string& source,
                             TransformerConfig& model) {
  for (const auto& [field, value] :
       {std::pair{"qkv_bias", &model.qkv_bias},
        std::pair{"attention_output_bias", &model.attention_output_bias},
        std::pair{"mlp_bias", &model.mlp_bias}}) {
    if (json.contains(field)) {
      *value = require_bool(json, field, source);
    }
  }
}

void read_attention_variant_fields(const nlohmann::json& json, const std::string& source,
                                   TransformerConfig& model) {
  model.sliding_window = int_or_zero(json, "sliding_window", source);
  read_window_pattern(json, source, model);
  model.attention_sinks = bool_or_false(json, "attention_sinks", source);
}

void read_gated_unit_variant_fields(const nlohmann::json& json, const std::string& source,
                                    TransformerConfig& model) {
  const auto number_or_zero = [&](const char* field) {
    return json.contains(field) ? require_number(json, field, source) : 0.0;
  };
  model.glu_linear_offset = number_or_zero("glu_linear_offset");
  model.activation_clamp_value = number_or_zero("activation_clamp_value");
}

void normalize_moe_layers(TransformerConfig& model) {
  std::vector<int>& layers = model.moe_layers;
  if (layers.empty()) {
    return;
  }
  const auto first_moe = std::find(layers.begin(), layers.end(), 1);
  if (std::all_of(first_moe, layers.end(), [](int entry) { return entry == 1; })) {
    model.first_dense_layers = first_moe - layers.begin();
    layers.clear();
  }
}

// One form per meaning: a list that windows every layer is no list, one that windows none is
// full attention.
void normalize_window_pattern(TransformerConfig& model) {
  const std::vector<int>& layers = model.window_attn_layers;
  if (layers.empty()) {
    return;
  }
  if (std::all_of(layers.begin(), layers.end(), [](int entry) { return entry == 0; })) {
    model.sliding_window = 0;
    model.window_attn_layers.clear();
  } else if (std::all_of(layers.begin(), layers.end(), [](int entry) { return entry == 1; })) {
    model.window_attn_layers.clear();
  }
}

double TransformerConfig::attention_scale() const {
  // Gemma2Attention: self.scaling = config.query_pre_attn_scalar**-0.5 (transformers
  // modeling_gemma2.py); every other model 1 / sqrt(d) (Vaswani et al. 2017, eq. 1).
  const double scalar =
      query_pre_attn_scalar > 0.0 ? query_pre_attn_scalar : static_cast<double>(head_dim);
  // Multi-head latent attention under YaRN also scales its softmax by
  // yarn_mscale(factor, mscale_all_dim)^2 (Megatron-Core multi_latent_attention.py
  // softmax_scale = mscale * mscale / sqrt(q_head_dim); transformers DeepseekV3Attention).
  double mla_mscale = 1.0;
  if (is_mla() && rope_scaling.type == RopeScalingType::kYarn) {
    mla_mscale = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
  }
  return mla_mscale * mla_mscale / std::sqrt(scalar);
}

bool TransformerConfig::is_windowed() const {
  return sliding_window < seq_length && has_sliding_layer();
}

bool TransformerConfig::is_windowed_layer(int64_t layer) const {
  return sliding_window < seq_length && is_sliding_layer(layer);
}

bool TransformerConfig::has_sliding_layer() const {
  // Layer number 1 slides under any N >= 2 (1 % N != 0); a list needs a 1.
  return sliding_window > 0 && (window_attn_layers.empty() ||
                                std::find(window_attn_layers.begin(), window_attn_layers.end(),
                                          1) != window_attn_layers.end());
}

bool TransformerConfig::is_sliding_layer(int64_t layer) const {
  if (sliding_window <= 0) {
    return false;
  }
  // Megatron-Core is_layer_window_attention (transformer/utils.py, d98e8a64): layer_number is
  // 1-based, layer + 1 here.
  if (window_attn_skip_freq > 0) {
    return (layer + 1) % window_attn_skip_freq != 0;
  }
  if (!window_attn_layers.empty()) {
    return window_attn_layers.at(static_cast<size_t>(layer)) != 0;
  }
  return true;
}

std::string to_string(Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kSwiglu:
      return "swiglu";
    case Activation::kGeglu:
      return "geglu";
    case Activation::kQuickGeglu:
      return "quick_geglu";
  }
  return "unknown";
}

std::string to_string(Norm norm) {
  return norm == Norm::kLayerNorm ? "layernorm" : "rmsnorm";
}

std::string to_string(Positions positions) {
  switch (positions) {
    case Positions::kLearned:
      return "learned";
    case Positions::kRope:
      return "rope";
    case Positions::kAlibi:
      return "alibi";
  }
  return "unknown";
}

void validate_model(const TransformerConfig& model, const std::string& source) {
  require_name(model.name, "name", source);
  check_size(model.num_layers, kMaxLayers, "num_layers", source);
  check_size(model.hidden_size, kMaxHidden, "hidden_size", source);
  check_size(model.num_attention_heads, kMaxHeads, "num_attention_heads", source);
  check_size(model.num_kv_heads, kMaxHeads, "num_kv_heads", source);
  check_size(model.head_dim, kMaxHeadDim, "head_dim", source);
  check_size(model.ffn_hidden_size, kMaxFfnHidden, "ffn_hidden_size", source);
  check_size(model.vocab_size, kMaxVocab, "vocab_size", source);
  check_size(model.seq_length, kMaxSequence, "seq_length", source);
  check_size(model.max_position_embeddings, kMaxSequence, "max_position_embeddings", source);
  if (model.num_attention_heads * model.head_dim > kMaxAttentionWidth) {
    throw InputError(fmt::format(
        "{}: head_dim: num_attention_heads * head_dim absurdly large, more than {} ({} * {})",
        source, kMaxAttentionWidth, model.num_attention_heads, model.head_dim));
  }
  // Grouped-query attention (Ainslie et al. 2023): each kv head serves a / g query heads.
  if (model.num_attention_heads % model.num_kv_heads != 0) {
    throw InputError(fmt::format("{}: num_kv_heads: does not divide num_attention_heads ({} % {})",
                                 source, model.num_attention_heads, model.num_kv_heads));
  }
  validate_moe(model, source);
  validate_mla(model, source);
  validate_mtp(model, source);
  // GemmaRMSNorm's (1 + gain): meshplan's LayerNorm keeps its gain as it is.
  if (model.norm_unit_offset && model.norm != Norm::kRmsNorm) {
    throw InputError(
        fmt::format("{}: norm_unit_offset: the (1 + gain) scale is modelled for RMSNorm only ({})",
                    source, to_string(model.norm)));
  }
  // Gemma's post-attention and post-MLP norms sit on the branches of a sequential block.
  if (model.sandwich_norm && model.parallel_residual) {
    throw InputError(fmt::format(
        "{}: sandwich_norm: post-attention and post-MLP norms are modelled for a sequential "
        "block, not with parallel_residual (true)",
        source));
  }
  // Gemma 2's soft-caps and attention scale: 0 (none, head_dim) or a positive finite value.
  check_positive_or_zero(model.attn_logit_softcapping, kMaxSoftcap, "attn_logit_softcapping",
                         source);
  check_positive_or_zero(model.final_logit_softcapping, kMaxSoftcap, "final_logit_softcapping",
                         source);
  check_positive_or_zero(model.query_pre_attn_scalar, kMaxQueryPreAttnScalar,
                         "query_pre_attn_scalar", source);
  validate_rotary_percent(model, source);
  validate_rope_theta(model, source);
  validate_position_variants(model, source);
  validate_gated_unit_variants(model, source);
  // The parallel block is costed and executed for dense MLPs and standard attention only.
  if (model.parallel_residual && (model.is_moe() || model.is_mla())) {
    throw InputError(fmt::format(
        "{}: parallel_residual: parallel attention and MLP is modelled for dense layers with "
        "standard attention, not with {} (true)",
        source, model.is_moe() ? "experts (num_experts)" : "MLA (kv_lora_rank)"));
  }
  // Sliding-window attention: query i attends keys i - w < j <= i (transformers'
  // sliding_window_causal mask; Megatron-Core window_size (w - 1, 0)). 0 is full attention.
  if (model.sliding_window < 0 || model.sliding_window > kMaxSequence) {
    throw InputError(fmt::format(
        "{}: sliding_window: must be 0 (full attention) or a window in [1, {}] tokens ({})", source,
        kMaxSequence, model.sliding_window));
  }
  if (model.has_window_pattern()) {
    if (model.sliding_window == 0) {
      throw InputError(fmt::format(
          "{}: window_attn_skip_freq: chooses windowed layers, but sliding_window is 0 (full "
          "attention) ({})",
          source, window_pattern_text(model)));
    }
    if (model.window_attn_skip_freq != 0 && !model.window_attn_layers.empty()) {
      throw InputError(fmt::format("{}: window_attn_skip_freq: an integer or a list, not both ({})",
                                   source, model.window_attn_skip_freq));
    }
    if (model.window_attn_layers.empty()) {
      check_window_skip_freq(model.window_attn_skip_freq, source);
    } else if (static_cast<int64_t>(model.window_attn_layers.size()) != model.num_layers) {
      throw InputError(fmt::format(
          "{}: window_attn_skip_freq: expected one entry per layer, {} ({} entries: {})", source,
          model.num_layers, model.window_attn_layers.size(), window_pattern_text(model)));
    }
    for (size_t i = 0; i < model.window_attn_layers.size(); ++i) {
      if (model.window_attn_layers[i] != 0 && model.window_attn_layers[i] != 1) {
        throw InputError(fmt::format(
            "{}: window_attn_skip_freq[{}]: must be 1 (windowed) or 0 (full attention) ({})",
            source, i, model.window_attn_layers[i]));
      }
    }
  }
  validate_rope_local_theta(model, source);
  validate_rope_scaling(model, source);
  // A learned position table has one row per position: it cannot embed a longer sequence.
  if (model.positions == Positions::kLearned && model.seq_length > model.max_position_embeddings) {
    throw InputError(fmt::format(
        "{}: seq_length: longer than the learned position table, max_position_embeddings ({} > "
        "{})",
        source, model.seq_length, model.max_position_embeddings));
  }
}

TransformerConfig model_from_json(const nlohmann::json& json, const std::string& source) {
  reject_other_input_kind(json, InputKind::kModel, source);
  if (!is_hf_config(json)) {
    TransformerConfig model = model_from_meshplan_json(json, source);
    validate_model(model, source);
    normalize_window_pattern(model);
    normalize_moe_layers(model);
    normalize_no_rope_freq(model);
    if (model.rope_local_theta == model.rope_theta) {
      model.rope_local_theta = 0.0;  // one form per meaning: the sliding layers' base is the same
    }
    return model;
  }
  TransformerConfig model = model_from_hf_config(json, source);
  try {
    validate_model(model, source);
  } catch (const InputError& error) {
    // "<source>: <field>: ..." names meshplan's field; the user wrote the config's key.
    const std::string message = error.what();
    const std::string prefix = source + ": ";
    const size_t end = message.find(':', prefix.size());
    if (message.rfind(prefix, 0) != 0 || end == std::string::npos) {
      throw;
    }
    const std::string field = message.substr(prefix.size(), end - prefix.size());
    const std::string key = hf_config_key(json, field);
    if (key == field) {
      throw;
    }
    throw InputError(prefix + key + message.substr(end));
  }
  normalize_moe_layers(model);
  normalize_no_rope_freq(model);
  return model;
}

nlohmann::json model_to_json(const TransformerConfig& model) {
  nlohmann::json json{
      {"name", model.name},
      {"num_layers", model.num_layers},
      {"hidden_size", model.hidden_size},
      {"num_attention_heads", model.num_attention_heads},
      {"num_kv_heads", model.num_kv_heads},
      {"head_dim", model.head_dim},
      {"ffn_hidden_size", model.ffn_hidden_size},
      {"vocab_size", model.vocab_size},
      {"seq_length", model.seq_length},
      {"max_position_embeddings", model.max_position_embeddings},
      {"activation", to_string(model.activation)},
      {"norm", to_string(model.norm)},
      {"positions", to_string(model.positions)},
      {"tied_embeddings", model.tied_embeddings},
      {"qkv_bias", model.qkv_bias},
      {"attention_output_bias", model.attention_output_bias},
      {"mlp_bias", model.mlp_bias},
      {"dropout", model.dropout},
  };
  // Written only when set, so dense models' files are as before.
  if (model.qk_norm) {
    json["qk_norm"] = true;
  }
  if (model.norm_unit_offset) {
    json["norm_unit_offset"] = true;
  }
  if (model.scale_embeddings) {
    json["scale_embeddings"] = true;
  }
  if (model.sandwich_norm) {
    json["sandwich_norm"] = true;
  }
  if (model.parallel_residual) {
    json["parallel_residual"] = true;
  }
  if (model.attn_logit_softcapping != 0.0) {
    json["attn_logit_softcapping"] = model.attn_logit_softcapping;
  }
  if (model.final_logit_softcapping != 0.0) {
    json["final_logit_softcapping"] = model.final_logit_softcapping;
  }
  if (model.query_pre_attn_scalar != 0.0) {
    json["query_pre_attn_scalar"] = model.query_pre_attn_scalar;
  }
  if (model.has_partial_rotary()) {
    json["rotary_percent"] = model.rotary_percent;
  }
  if (model.rope_theta != kDefaultRopeTheta) {
    json["rope_theta"] = model.rope_theta;
  }
  if (model.rope_local_theta != 0.0) {
    json["rope_local_theta"] = model.rope_local_theta;
  }
  write_rope_scaling_fields(model, json);
  write_position_variant_fields(model, json);
  if (model.glu_linear_offset != 0.0) {
    json["glu_linear_offset"] = model.glu_linear_offset;
  }
  if (model.activation_clamp_value != 0.0) {
    json["activation_clamp_value"] = model.activation_clamp_value;
  }
  if (model.attention_sinks) {
    json["attention_sinks"] = true;
  }
  if (model.sliding_window != 0) {
    json["sliding_window"] = model.sliding_window;
  }
  if (model.window_attn_skip_freq != 0) {
    json["window_attn_skip_freq"] = model.window_attn_skip_freq;
  } else if (!model.window_attn_layers.empty()) {
    json["window_attn_skip_freq"] = model.window_attn_layers;
  }
  if (model.is_moe()) {
    json["num_experts"] = model.num_experts;
    json["experts_per_token"] = model.experts_per_token;
    json["expert_ffn_hidden_size"] = model.expert_ffn_hidden_size;
    json["num_shared_experts"] = model.num_shared_experts;
    json["shared_expert_ffn_hidden_size"] = model.shared_expert_ffn_hidden_size;
    json["shared_expert_gate"] = model.shared_expert_gate;
    json["router_score_bias"] = model.router_score_bias;
    if (model.router_bias) {
      json["router_bias"] = true;
    }
    json["first_dense_layers"] = model.first_dense_layers;
    if (!model.moe_layers.empty()) {
      json["moe_layers"] = model.moe_layers;
    }
    if (model.router_probs_on_input) {
      json["router_probs_on_input"] = true;
    }
    if (model.router_num_groups != 0 || model.router_group_topk != 0) {
      json["router_num_groups"] = model.router_num_groups;
      json["router_group_topk"] = model.router_group_topk;
    }
  }
  if (model.has_mtp()) {
    json["mtp_num_layers"] = model.mtp_num_layers;
  }
  if (model.is_mla()) {
    json["q_lora_rank"] = model.q_lora_rank;
    json["kv_lora_rank"] = model.kv_lora_rank;
    json["qk_nope_head_dim"] = model.qk_nope_head_dim;
    json["qk_rope_head_dim"] = model.qk_rope_head_dim;
    json["v_head_dim"] = model.v_head_dim;
  }
  return json;
}

TransformerConfig load_model(const std::string& name_or_path) {
  const ResolvedJson resolved =
      resolve_preset_or_file(name_or_path, "model", embedded_model_presets());
  return model_from_json(resolved.json, resolved.source);
}

std::vector<std::string> model_preset_names() {
  return preset_names(embedded_model_presets());
}

Activation parse_activation(const nlohmann::json& json, const std::string& source) {
  return parse_enum(json, "activation", source, kActivations);
}

Norm parse_norm(const nlohmann::json& json, const std::string& source) {
  return parse_enum(json, "norm", source, kNorms);
}

Positions parse_positions(const nlohmann::json& json, const std::string& source) {
  return parse_enum(json, "positions", source, kPositions);
}

}  // namespace meshplan::models
