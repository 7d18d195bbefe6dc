// Hugging Face configs of the Gemma family: Gemma, Gemma 2 and Gemma 3 text. Field names and
// defaults follow GemmaConfig, Gemma2Config and Gemma3TextConfig and their modeling files.

#include <fmt/format.h>

#include "hf_families.h"
#include "hf_fields.h"

namespace meshplan::models::hf {

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

}  // namespace meshplan::models::hf
