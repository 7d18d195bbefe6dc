// Hugging Face transformers config.json files mapped onto TransformerConfig. Field names and
// defaults follow the transformers configuration classes (LlamaConfig, MistralConfig,
// Qwen2Config, Phi3Config, GPT2Config, GPTNeoXConfig, MixtralConfig, Qwen2MoeConfig,
// Qwen3MoeConfig, DeepseekV3Config, GemmaConfig, Gemma2Config, Gemma3TextConfig, GptOssConfig)
// and the layer
// definitions in their modeling files.

#include "hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "hf_rotary.h"
#include "meshplan/json_io.h"

namespace meshplan::models {

namespace {

// A supported model class and the `model_type` of its configuration class (LlamaConfig "llama",
// ...). A config.json names both; one saved without `architectures` names only the model_type.
struct HfFamily {
  std::string_view architecture;
  std::string_view model_type;
};
constexpr std::array<HfFamily, 18> kFamilies = {{{"LlamaForCausalLM", "llama"},
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
                                                 {"GptOssForCausalLM", "gpt_oss"}}};

bool is_moe_family(std::string_view model_type) {
  return model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe" ||
         model_type == "deepseek_v3" || model_type == "glm4_moe" || model_type == "gpt_oss";
}

// Activation names of transformers' ACT2FN that meshplan's two MLPs compute. SwiGLU (Shazeer
// 2020) gates with SiLU, which ACT2FN also calls "swish". The GELU MLP is Hendrycks and Gimpel
// 2016's GELU, exact ("gelu") or its tanh approximation ("gelu_new", "gelu_pytorch_tanh",
// "gelu_fast"); the executor computes the tanh form. Anything else (relu, quick_gelu, a gated
// GELU in a Llama MLP) is another model and is rejected.
constexpr std::array<std::string_view, 2> kSiluActivations = {"silu", "swish"};
constexpr std::array<std::string_view, 4> kGeluActivations = {"gelu", "gelu_new",
                                                              "gelu_pytorch_tanh", "gelu_fast"};

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

// Throws InputError "<source>: <field>: unsupported activation (<name>); supported: ..." unless
// the config's activation (or the class default when absent) is one of `supported`.
template <size_t N>
void check_activation(const nlohmann::json& json, const char* field, std::string_view hf_default,
                      const std::array<std::string_view, N>& supported, const std::string& source) {
  reject_null(json, field, source);
  const std::string name =
      is_set(json, field) ? require_string(json, field, source) : std::string(hf_default);
  for (const std::string_view known : supported) {
    if (name == known) {
      return;
    }
  }
  throw InputError(fmt::format("{}: {}: unsupported activation ({}); supported: {}", source, field,
                               name, fmt::join(supported, ", ")));
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

void reject_moe_field(const std::string& field, const nlohmann::json& value,
                      const std::string& source) {
  throw InputError(fmt::format(
      "{}: {}: mixture-of-experts field in a dense architecture; MoE models load as "
      "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, "
      "Glm4MoeForCausalLM or GptOssForCausalLM ({})",
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

// GemmaConfig's default head_dim (transformers configuration_gemma.py), used when the key is
// absent: Gemma's heads are 256 wide whatever the hidden size (Gemma-7B: 16 x 256 = 4096 over
// h 3072).
constexpr int64_t kGemmaDefaultHeadDim = 256;

// Gemma (Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and Technology", Sec. 2;
// transformers models/gemma/modeling_gemma.py): Llama's layout (pre-RMSNorm, RoPE, gate_proj /
// up_proj / down_proj, q/k/v/o with bias = attention_bias) with a GELU gate (GeGLU, the tanh form
// gelu_pytorch_tanh), RMSNorm scaling by (1 + weight) (GemmaRMSNorm), the embeddings times
// sqrt(h) (GemmaModel.forward's normalizer) and a tied LM head (GemmaConfig tie_word_embeddings
// default true). The activation is hidden_activation when set, else hidden_act (the first
// published configs give hidden_act "gelu"; GemmaMLP has run it as the tanh approximation since
// transformers 4.39, the one the model was trained with).
void gemma(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  const char* activation_field = is_set(json, "hidden_activation") ? "hidden_activation"
                                 : json.contains("hidden_act")     ? "hidden_act"
                                                                   : "hidden_activation";
  check_activation(json, activation_field, "gelu_pytorch_tanh", kGeluActivations, source);
  model.activation = Activation::kGeglu;
  if (!json.contains("head_dim")) {
    model.head_dim = kGemmaDefaultHeadDim;
  }
  model.tied_embeddings = optional_bool(json, "tie_word_embeddings", true, source);
  model.qkv_bias = optional_bool(json, "attention_bias", false, source);
  model.attention_output_bias = model.qkv_bias;
  model.norm_unit_offset = true;
  model.scale_embeddings = true;
}

// Gemma2Config's and Gemma3TextConfig's defaults (transformers configuration_gemma2.py,
// configuration_gemma3.py): sliding_window 4096, query_pre_attn_scalar 256; Gemma 2 caps the
// attention scores at 50.0 and the final logits at 30.0 and alternates windowed and full layers,
// Gemma 3 caps nothing (None) and runs one full-attention layer every sliding_window_pattern = 6.
constexpr int64_t kGemmaDefaultSlidingWindow = 4096;
constexpr double kGemmaDefaultQueryPreAttnScalar = 256.0;
constexpr double kGemma2DefaultAttnSoftcap = 50.0;
constexpr double kGemma2DefaultFinalSoftcap = 30.0;
constexpr int64_t kGemma2Pattern = 2;
constexpr int64_t kGemma3DefaultPattern = 6;

// A soft-cap of a Gemma 2/3 config: absent, the config class's default; null, none (0);
// otherwise the number (validate_model refuses a negative or absurd one by name).
double read_softcap(const nlohmann::json& json, const char* field, double absent_default,
                    const std::string& source) {
  if (!json.contains(field)) {
    return absent_default;
  }
  return json[field].is_null() ? 0.0 : require_number(json, field, source);
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

// Gemma 2 and Gemma 3 text (transformers modeling_gemma2.py, modeling_gemma3.py): Gemma's layout
// (gemma() above) with four norms per layer (Gemma2DecoderLayer, Gemma3DecoderLayer: input,
// post-attention, pre- and post-feedforward), the attention scale 1 / sqrt(query_pre_attn_scalar)
// (Gemma2Attention.scaling; 0 in meshplan's field when it equals head_dim, the usual scale),
// attn_logit_softcapping on the scores and final_logit_softcapping on the logits
// (Gemma2ForCausalLM.forward, Gemma3ForCausalLM.forward), and a window on some layers: layer
// layer_idx is sliding when bool((layer_idx + 1) % N), N = 2 for Gemma 2 (Gemma2DecoderLayer
// is_sliding = not bool(layer_idx % 2), 0-based even layers) and sliding_window_pattern for
// Gemma 3, i.e. Megatron-Core's window_attn_skip_freq N with layer number n = layer_idx + 1; or
// the layer_types list when stated (transformers >= 4.53). rope_local_base_freq and
// rope_scaling change no cost.
void gemma_sandwich(const nlohmann::json& json, const std::string& source, int64_t pattern,
                    double attn_softcap_default, double final_softcap_default,
                    TransformerConfig& model) {
  gemma(json, source, model);
  model.sandwich_norm = true;
  model.attn_logit_softcapping =
      read_softcap(json, "attn_logit_softcapping", attn_softcap_default, source);
  model.final_logit_softcapping =
      read_softcap(json, "final_logit_softcapping", final_softcap_default, source);
  const double scalar = is_set(json, "query_pre_attn_scalar")
                            ? require_number(json, "query_pre_attn_scalar", source)
                            : kGemmaDefaultQueryPreAttnScalar;
  model.query_pre_attn_scalar = scalar == static_cast<double>(model.head_dim) ? 0.0 : scalar;
  model.sliding_window = optional_size(json, "sliding_window", kGemmaDefaultSlidingWindow, source);
  read_alternating_windows(json, pattern, source, model);
}

// Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size",
// Sec. 2 and Table 1; Gemma2ForCausalLM): no q/k norms, caps 50 and 30, alternating windows.
void gemma2(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  gemma_sandwich(json, source, kGemma2Pattern, kGemma2DefaultAttnSoftcap,
                 kGemma2DefaultFinalSoftcap, model);
}

// Gemma 3 text (Gemma Team 2025, "Gemma 3 Technical Report", Sec. 2; Gemma3ForCausalLM): RMSNorm
// q_norm and k_norm over head_dim (Gemma3Attention), no caps by default, five windowed layers of
// every sliding_window_pattern.
void gemma3_text(const nlohmann::json& json, const std::string& source, TransformerConfig& model) {
  const int64_t pattern =
      optional_size(json, "sliding_window_pattern", kGemma3DefaultPattern, source);
  gemma_sandwich(json, source, pattern, 0.0, 0.0, model);
  model.qk_norm = true;
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

}  // namespace

bool is_hf_config(const nlohmann::json& json) {
  return json.is_object() && (json.contains("architectures") || json.contains("model_type"));
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

std::string hf_config_key(const nlohmann::json& json, const std::string& field) {
  const std::string model_type(hf_family(json, "").model_type);
  // seq_length is the config's own key when it states one; else the length came from the
  // position count.
  const bool states_length = is_set(json, "seq_length");
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
                   {"ffn_hidden_size",
                    is_set(json, "ffn_config") ? "ffn_config.ffn_hidden_size" : "expansion_ratio"},
                   {"max_position_embeddings", "max_seq_len"}});
  }
  const bool local_experts = model_type == "mixtral" || model_type == "gpt_oss";
  const bool routed_experts = model_type == "deepseek_v3" || model_type == "glm4_moe";
  const std::string_view experts = local_experts    ? "num_local_experts"
                                   : routed_experts ? "n_routed_experts"
                                                    : "num_experts";
  const std::string rotary_key =
      rotary_percent_key(json, model_type == "gpt_neox" ? "rotary_pct" : "partial_rotary_factor");
  return lookup(
      {{"num_layers", "num_hidden_layers"},
       {"rotary_percent", rotary_key},
       {"num_kv_heads", "num_key_value_heads"},
       {"ffn_hidden_size", "intermediate_size"},
       {"num_experts", experts},
       {"experts_per_token", "num_experts_per_tok"},
       {"activation_clamp_value",
        model_type == "gpt_oss" ? "swiglu_limit" : "activation_clamp_value"},
       {"expert_ffn_hidden_size", local_experts ? "intermediate_size" : "moe_intermediate_size"},
       {"first_dense_layers", "first_k_dense_replace"},
       {"moe_layers", routed_experts ? "moe_layer_freq" : "decoder_sparse_step"},
       {"router_num_groups", "n_group"},
       {"router_group_topk", "topk_group"},
       {"mtp_num_layers", "num_nextn_predict_layers"},
       {"num_shared_experts", "n_shared_experts"},
       {"shared_expert_ffn_hidden_size",
        model_type == "qwen2_moe" ? "shared_expert_intermediate_size" : "moe_intermediate_size"}});
}

TransformerConfig model_from_hf_config(const nlohmann::json& json, const std::string& source) {
  const std::string_view model_type = hf_family(json, source).model_type;
  if (!is_moe_family(model_type)) {
    reject_mixture_of_experts(json, source);
  }
  TransformerConfig model;
  if (model_type == "gpt2") {
    check_activation(json, "activation_function", "gelu_new", kGeluActivations, source);
    model = gpt2(json, source);
  } else if (model_type == "gpt_neox") {
    check_activation(json, "hidden_act", "gelu", kGeluActivations, source);
    model = gpt_neox(json, source);
  } else if (model_type == "mpt") {
    model = mpt(json, source);  // MptMLP: GELU, no activation field
  } else if (model_type == "gemma") {
    model = llama_family(json, source);
    gemma(json, source, model);
  } else if (model_type == "gemma2") {
    model = llama_family(json, source);
    gemma2(json, source, model);
  } else if (model_type == "gemma3_text") {
    model = llama_family(json, source);
    gemma3_text(json, source, model);
  } else if (model_type == "gpt_oss") {
    model = llama_family(json, source);
    gpt_oss(json, source, model);
  } else {
    check_activation(json, "hidden_act", "silu", kSiluActivations, source);
    model = llama_family(json, source);
  }
  if (model_type == "llama") {
    // LlamaAttention: q, k, v and o_proj all use bias = attention_bias; LlamaMLP: mlp_bias.
    model.qkv_bias = optional_bool(json, "attention_bias", false, source);
    model.attention_output_bias = model.qkv_bias;
    model.mlp_bias = optional_bool(json, "mlp_bias", false, source);
  } else if (model_type == "qwen2") {
    // Qwen2Attention: q, k, v_proj with bias, o_proj without; Qwen2MLP without biases.
    model.qkv_bias = true;
  } else if (model_type == "qwen3") {
    // Qwen3Attention (transformers models/qwen3/modeling_qwen3.py): q, k, v and o_proj with
    // bias = attention_bias (default false), RMSNorm q_norm and k_norm over head_dim; Qwen3MLP
    // without biases.
    model.qkv_bias = optional_bool(json, "attention_bias", false, source);
    model.attention_output_bias = model.qkv_bias;
    model.qk_norm = true;
  } else if (model_type == "phi3") {
    // Phi3Attention: one fused qkv_proj and o_proj, Phi3MLP: one fused gate_up_proj and
    // down_proj, none with bias (transformers models/phi3/modeling_phi3.py): Llama's weights
    // concatenated, the same parameters and GEMM FLOPs. partial_rotary_factor (Phi3Config default
    // 1.0; Phi-4-mini 0.75) rotates part of each head. Phi3Config: resid_pdrop, embd_pdrop and
    // attention_dropout, each default 0.0.
    require_unmodelled(json, "attention_bias", false, "Phi-3 attention with biases is not modelled",
                       source);
    model.dropout = any_dropout(
        json, {{"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attention_dropout", 0.0}}, source);
    model.rotary_percent = read_rotary_percent(
        json, {.legacy_field = "partial_rotary_factor", .class_default = 1.0, .partial = true},
        "Phi3ForCausalLM", source);
  }  // Mistral: no biases anywhere (MistralAttention, MistralMLP).
  if (model_type == "mixtral") {
    mixtral(json, source, model);
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    // Qwen2MoeAttention: q, k, v_proj with bias; Qwen3MoeAttention: q, k, v, o_proj with bias =
    // attention_bias (default false) and RMSNorm q_norm, k_norm over head_dim.
    const bool qwen3 = model_type == "qwen3_moe";
    model.qkv_bias = qwen3 ? optional_bool(json, "attention_bias", false, source) : true;
    model.attention_output_bias = qwen3 && model.qkv_bias;
    model.qk_norm = qwen3;
    qwen_moe(json, model_type, source, model);
  } else if (model_type == "deepseek_v3") {
    deepseek_v3(json, source, model);
  } else if (model_type == "glm4_moe") {
    glm4_moe(json, source, model);
  }
  // Every other rotary family rotates whole heads; a partial factor stated for one is refused.
  const bool reads_partial_rotary =
      model_type == "phi3" || model_type == "glm4_moe" || model_type == "gpt_neox";
  if (model.positions == Positions::kRope && !reads_partial_rotary) {
    model.rotary_percent =
        read_rotary_percent(json, HfRotary{}, hf_family(json, source).architecture, source);
  }
  if (model_type != "mpt") {
    read_sliding_window(json, model_type, source, model);
  }
  // The classes that read layer_types check it also where no layer ends up windowed
  // (transformers' layer_type_validation in the config's __init__): a malformed list is refused
  // even when sliding_window is null or use_sliding_window false.
  const bool reads_layer_types = model_type == "qwen2" || model_type == "qwen3" ||
                                 model_type == "qwen2_moe" || model_type == "qwen3_moe" ||
                                 model_type == "gemma2" || model_type == "gemma3_text" ||
                                 model_type == "gpt_oss";
  if (reads_layer_types && is_set(json, "layer_types") && model.num_layers <= kMaxLayers) {
    read_layer_types(json, model.num_layers, source);
  }
  return model;
}

}  // namespace meshplan::models
