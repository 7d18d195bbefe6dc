#pragma once
// Transformer and cluster descriptions: what meshplan plans for, and on what.
// Units: bytes, seconds, FLOPs (counts), FLOP/s, bytes/s. Sizes are element counts.

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshplan/errors.h"

namespace meshplan::models {

// The MLP's activation. kGelu: fc1 -> GELU -> fc2 (2 matrices). The gated ones (Shazeer 2020,
// "GLU Variants Improve Transformer", eq. 5-6) have three matrices, gate, up and down, and compute
// act(gate) * up: kSwiglu with SiLU (Llama), kGeglu with GELU, tanh form (Gemma's
// gelu_pytorch_tanh), kQuickGeglu with the sigmoid approximation of GELU, x sigmoid(1.702 x)
// (Hendrycks and Gimpel 2016, Sec. 2; gpt-oss: transformers GptOssExperts, alpha 1.702;
// Megatron-Core --quick-geglu).
enum class Activation { kGelu, kSwiglu, kGeglu, kQuickGeglu };
/// Whether the MLP is gated (3 matrices: gate, up, down): SwiGLU, GeGLU or quick GeGLU.
constexpr bool is_gated(Activation activation) {
  return activation == Activation::kSwiglu || activation == Activation::kGeglu ||
         activation == Activation::kQuickGeglu;
}
enum class Norm { kLayerNorm, kRmsNorm };
enum class Positions { kLearned, kRope, kAlibi };
/// The rotary base when none is given: RoFormer's 10000 (Su et al. 2021, Eq. 15), Megatron-LM's
/// --rotary-base default and transformers' LlamaConfig default.
inline constexpr double kDefaultRopeTheta = 10000.0;
/// The largest rotary base validate_model admits: 1e12, far above any published model's (Qwen2.5's
/// 1M-context models use 1e7).
inline constexpr double kMaxRopeTheta = 1e12;
/// Whether `base` is a rotary base meshplan takes: above 1 (a base of 1 or less gives no decaying
/// frequencies) and at most kMaxRopeTheta; false for NaN. rope_theta and rope_local_theta alike.
inline bool is_valid_rope_base(double base) {
  return base > 1.0 && base <= kMaxRopeTheta;
}

/// Rotary frequency scaling, how a model stretches its positions past the context it was
/// pre-trained on. kLinear: every inverse frequency divided by the factor (Chen et al. 2023,
/// "Extending Context Window of Large Language Models via Positional Interpolation", Eq. 4:
/// position m read as m / factor; Megatron-LM --rotary-seq-len-interpolation-factor, transformers
/// rope_type "linear"; Gemma 3 4B-27B, factor 8 on the global layers). kLlama3: Llama 3.1's
/// wavelength bands (Meta llama-models llama3 apply_scaling; transformers
/// _compute_llama3_parameters; Megatron-Core rotary_pos_embedding.py _apply_scaling): wavelengths
/// 2 pi / f shorter than original / high_freq_factor kept, longer than original / low_freq_factor
/// divided by the factor, and between them (1 - s) f / factor + s f with
/// s = (original / wavelength - low) / (high - low). kYarn: YaRN (Peng et al. 2023, "YaRN:
/// Efficient Context Window Extension of Large Language Models", Sec. 3.2 NTK-by-parts and 3.4;
/// transformers _compute_yarn_parameters, Megatron-Core yarn_rotary_pos_embedding.py): pair i
/// keeps its frequency below the correction range, is divided by the factor above it, and blends
/// linearly across it; the range runs from the pair that turns beta_fast times over the original
/// context to the one that turns beta_slow times, floored and ceiled when truncate. YaRN also
/// multiplies cos and sin by rope_attention_factor, and multi-head latent attention its softmax
/// scale by yarn_mscale(factor, mscale_all_dim) squared (attention_scale). None changes a
/// parameter, GEMM or stored tensor: no cost. The dynamic types (dynamic NTK, LongRoPE) are not
/// carried.
enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;  // transformers "factor", Megatron-LM --rope-scaling-factor
  // kLlama3 only; Llama 3.1's values (transformers configs and Megatron-Core's fixed defaults).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // kLlama3 and kYarn: transformers original_max_position_embeddings (the model format requires
  // it with yarn; Megatron-Core's YaRN default is 4096).
  int64_t original_max_positions = 8192;
  // kYarn only; the defaults are the paper's, transformers' and Megatron-Core's.
  double beta_fast = 32.0;      // rotations over the original context where the ramp starts
  double beta_slow = 1.0;       // ... and where it ends
  double mscale = 1.0;          // DeepSeek's mscale (0.1 mscale ln(factor) + 1)
  double mscale_all_dim = 0.0;  // DeepSeek's mscale_all_dim; 0 = none
  bool truncate = true;         // correction range floored and ceiled to whole pairs

  bool operator==(const RopeScaling&) const = default;
};
/// The type's name in the model format and in transformers' rope_type: "none" ("default" there),
/// "linear", "llama3", "yarn".
std::string to_string(RopeScalingType type);
/// YaRN's temperature, 0.1 m ln(factor) + 1, 1 at a factor of at most 1 (Peng et al. 2023, Sec.
/// 3.4, sqrt(1/t) at m = 1; DeepSeek-V2's yarn_get_mscale, Megatron-Core _yarn_get_mscale).
double yarn_mscale(double factor, double m);
/// The amplitude YaRN gives cos and sin: yarn_mscale(factor, mscale) / yarn_mscale(factor,
/// mscale_all_dim) (Megatron-Core _yarn_get_concentration_factor; transformers "attention_factor"
/// from the same two); 1 for every other type. Queries and keys each carry it, so the scores carry
/// its square.
double rope_attention_factor(const RopeScaling& scaling);
/// The largest scaling factor validate_model admits: a thousand times the context (Llama 3.2
/// uses 32, Llama 4 16).
inline constexpr double kMaxRopeScalingFactor = 1e3;

/// The inverse frequency channel pair `pair` of `rotated_channels` turns by, base^(-2 pair / R)
/// (Su et al. 2021, Eq. 15), scaled by `scaling` (RopeScalingType says how). The one formula the
/// CPU executor's rotation and the tests use.
double rope_inverse_frequency(double base, int64_t pair, int64_t rotated_channels,
                              const RopeScaling& scaling);

/// A dense decoder-only transformer. Shape letters used across meshplan:
/// l layers, h hidden, a attention heads, g kv heads, d head dim, f ffn hidden, V vocab, s
/// sequence.
struct TransformerConfig {
  std::string name;                     // preset name or config.json path
  int64_t num_layers = 0;               // l, e.g. 96 for GPT-3 175B
  int64_t hidden_size = 0;              // h, e.g. 12288
  int64_t num_attention_heads = 0;      // a, e.g. 96
  int64_t num_kv_heads = 0;             // g: a for MHA, 1 for MQA, 8 for Llama-3 70B
  int64_t head_dim = 0;                 // d: h / a unless the config gives head_dim
  int64_t ffn_hidden_size = 0;          // f: 4h for GPT, 11008 for Llama-2 7B
  int64_t vocab_size = 0;               // V: 50257 GPT-2, 32000 Llama-2, 128256 Llama-3
  int64_t seq_length = 0;               // s: training sequence length
  int64_t max_position_embeddings = 0;  // rows of the learned position table (learned only)
  Activation activation = Activation::kGelu;
  Norm norm = Norm::kLayerNorm;
  Positions positions = Positions::kLearned;
  bool tied_embeddings = true;         // output head shares the token embedding
  bool qkv_bias = false;               // bias on the Q, K, V projections (GPT-2, Qwen2)
  bool attention_output_bias = false;  // bias on the attention output projection
  bool mlp_bias = false;               // biases on the MLP projections
  // Trains with dropout (any of attention, hidden or embedding dropout > 0): its 1-byte masks
  // are stored for backward (Korthikanti et al. 2022, Sec. 4.1). False for Llama-style models.
  bool dropout = true;
  // w: sliding-window attention on every layer (Mistral-7B-v0.1 4096; Qwen2 with
  // use_sliding_window), 0 for full causal attention. Query i attends keys i - w < j <= i, at most
  // w keys itself included (transformers' sliding_window_causal mask; Megatron-Core
  // window_size = (w - 1, 0)). A window of seq_length or more is full causal attention.
  int64_t sliding_window = 0;
  // Which layers attend over that window; none of the two set: every layer. Megatron-Core's
  // --window-attn-skip-freq (transformer/utils.py is_layer_window_attention at d98e8a64, layer
  // number n = layer + 1): an integer N >= 2 windows layer number n unless n % N == 0, one
  // full-attention layer after N - 1 windowed ones (Gemma 2: 2, Gemma 3: 6); or a list of one
  // entry per layer, 1 windowed and 0 full, entry n - 1 for layer number n (Qwen2's
  // max_window_layers, mixed layer_types). A loaded list is neither all 1 (read as no list) nor
  // all 0 (read as full attention, sliding_window 0).
  int64_t window_attn_skip_freq = 0;    // N; 0: not given
  std::vector<int> window_attn_layers;  // the list form, num_layers entries; empty: not given
  bool qk_norm = false;  // per-head RMSNorm gains (d each) on queries and keys (Qwen3)
  // RMSNorm scales by (1 + gain), the gain initialised to 0 (Gemma: transformers GemmaRMSNorm
  // `output * (1.0 + self.weight.float())`; Megatron-Core layernorm_zero_centered_gamma,
  // --apply-layernorm-1p). The same h parameters per norm; only the parametrisation differs.
  bool norm_unit_offset = false;
  // Token embeddings multiplied by sqrt(h) before the first layer, the tied LM head reading the
  // unscaled table (Gemma: transformers GemmaModel.forward `hidden_states * normalizer`,
  // normalizer = hidden_size ** 0.5; Megatron-Bridge gemma/modules.py EmbeddingScalingMixin).
  bool scale_embeddings = false;
  // Four norms per layer instead of two (Gemma 2 and 3: transformers Gemma2DecoderLayer,
  // Gemma3DecoderLayer): input_layernorm before attention, post_attention_layernorm on the
  // attention output before its residual add, pre_feedforward_layernorm before the MLP,
  // post_feedforward_layernorm on the MLP output before its residual add.
  bool sandwich_norm = false;
  // Parallel attention and MLP (GPT-J; GPT-NeoX's gpt_j_residual, Hugging Face
  // GPTNeoXConfig.use_parallel_residual, default true; Chowdhery et al. 2022, PaLM, Sec. 2
  // "Parallel Layers"): out = x + attn(norm1(x)) + mlp(norm2(x)), two untied norms as in
  // GPT-NeoX-20B. The two row-parallel outputs are summed before one tp reduction
  // (EleutherAI/gpt-neox megatron/model/transformer.py ParallelTransformerLayer).
  bool parallel_residual = false;
  // Gemma 2's logit soft-capping (Gemma Team 2024, "Gemma 2", Sec. 2; transformers
  // modeling_gemma2.py): x -> c tanh(x / c), elementwise. 0: none.
  // Attention: on the scaled scores before the mask and softmax (Gemma2Attention,
  // softcap = config.attn_logit_softcapping), c = 50.0 for Gemma 2.
  double attn_logit_softcapping = 0.0;
  // Final: on the LM head's logits before the loss (Gemma2ForCausalLM.forward), c = 30.0.
  double final_logit_softcapping = 0.0;
  // The attention scale is 1 / sqrt(query_pre_attn_scalar) (Gemma2Attention.scaling); 0: the
  // usual 1 / sqrt(head_dim). gemma-2-9b 256 (= head_dim), gemma-2-27b 144 (head_dim 128).
  double query_pre_attn_scalar = 0.0;
  // The fraction of each head's channels rotary positions rotate (Megatron-LM --rotary-percent,
  // RotaryEmbedding over int(kv_channels x rotary_percent) channels; transformers
  // partial_rotary_factor, GPT-NeoX rotary_pct): 1 rotates all, 0.5 the first half (GLM-4.5), the
  // rest passes through. It changes no parameter, GEMM or stored tensor, so no cost.
  double rotary_percent = 1.0;
  // The base of the rotary frequencies, angle = position x base^(-2i/d) for channel pair i of d
  // rotated channels (Su et al. 2021, RoFormer, Eq. 15: theta_i = 10000^(-2(i-1)/d)): Megatron-LM
  // --rotary-base (default 10000), transformers rope_theta (Llama 3 and 4 500000, Mixtral, Qwen3
  // and GLM-4.5 1e6, gpt-oss 150000). Meaningful with rotary positions only. It changes no
  // cost; the executor rotates with it and the launch configs pass it on. With a second base for
  // the sliding layers (rope_local_theta), this is the base of the full-attention layers. Rope
  // scaling is rope_scaling below.
  double rope_theta = kDefaultRopeTheta;
  // The rotary base of the layers the window pattern marks sliding, 0 when they rotate with
  // rope_theta like the others: Gemma 3's local base (Gemma Team 2025, "Gemma 3 Technical
  // Report", Sec. 2.2: "we increase RoPE base frequency from 10k to 1M on global self-attention
  // layers, and keep the frequency of the local layers at 10k"; transformers Gemma3TextConfig
  // rope_local_base_freq, default 10000, Gemma3Attention rotating with rotary_emb_local where
  // layer_types says "sliding_attention"). A layer is sliding by the pattern whether or not the
  // window covers seq_length (is_sliding_layer). No cost either; a loaded value equal to
  // rope_theta reads as 0.
  double rope_local_theta = 0.0;
  // The rotary frequencies' scaling (RopeScaling), on every rotary layer that turns by rope_theta:
  // Gemma 3 scales its global layers only, the sliding ones keep rope_local_theta unscaled
  // (transformers Gemma3RotaryEmbedding: rotary_emb_local is built with rope_type "default").
  // Format fields rope_scaling ("none", "linear", "llama3"), rope_scaling_factor and, for llama3,
  // rope_scaling_low_freq_factor, rope_scaling_high_freq_factor and
  // rope_scaling_original_max_positions. No cost; the CPU executor rotates with it.
  RopeScaling rope_scaling;
  // Layers without rotary positions (NoPE), one entry per layer, 1 for a NoPE layer: Megatron-Core
  // --no-rope-freq as transformer_config.py stores it (an integer N given there becomes this list
  // with every N-th layer 1; a meshplan file may give either). Llama 4 makes every fourth layer
  // NoPE (transformers Llama4TextConfig no_rope_layers, whose entries mean the opposite: 1 =
  // rotary). Empty: rotary positions on every layer; a loaded list is never all 0 (read as
  // empty). Rotary positions have no parameter; the planner costs their elementwise pass on every
  // layer, over by that pass on the NoPE layers.
  std::vector<int> no_rope_freq;
  // Queries and keys scaled to unit root mean square per head, with no gain, on the layers with
  // rotary positions (Llama 4: transformers Llama4TextL2Norm, x rsqrt(mean(x^2) + eps), applied
  // when use_qk_norm and the layer uses rope; Megatron-Bridge's Llama4SelfAttention, Megatron-Core
  // L2Norm). No parameter; costed as qk_norm's elementwise pass and saved inputs.
  bool qk_l2_norm = false;
  // Chunked local attention on the layers with rotary positions (Llama 4: attention_chunk_size
  // 8192, transformers' chunked_attention layers; Megatron-Bridge llama4_utils.py chunkify):
  // a query attends the keys of its own chunk only. 0: none. Not costed: a sequence longer than
  // the chunk is refused, and at or below it the chunking changes nothing.
  int64_t attention_chunk_size = 0;
  // A gated MLP's variants (gpt-oss: transformers GptOssExperts; Megatron-Core
  // TransformerConfig.glu_linear_offset and activation_func_clamp_value): act(gate) * (up +
  // offset), gpt-oss 1.0, 0 the plain unit; and with a clamp c > 0 the gate clamped to <= c and
  // up to [-c, c] first, gpt-oss 7.0 (swiglu_limit), 0 none. Elementwise inside the activation:
  // neither changes a parameter, FLOP or stored byte meshplan counts.
  double glu_linear_offset = 0.0;
  double activation_clamp_value = 0.0;
  // A learned logit per attention head in the softmax's denominator, its value row zero
  // (gpt-oss: transformers GptOssAttention.sinks; Megatron-Core softmax_type "learnable",
  // DotProductAttention.softmax_offset; Xiao et al. 2024, "Efficient Streaming Language Models
  // with Attention Sinks"): a parameters per layer, split with the heads over tp.
  bool attention_sinks = false;

  // Mixture-of-experts MLP (Shazeer et al. 2017; Fedus et al. 2022), dropless top-k routing as
  // Megatron-Core's default (--moe-expert-capacity-factor None) and the Hugging Face models.
  // num_experts = 0: every layer is dense. Layers [0, first_dense_layers) keep the dense MLP of
  // ffn_hidden_size; every later layer is an MoE layer (Megatron's --moe-layer-freq 1), unless
  // moe_layers gives the pattern.
  int64_t num_experts = 0;                    // E routed experts: 8 Mixtral, 256 DeepSeek-V3
  int64_t experts_per_token = 0;              // k (top-k): 2 Mixtral, 8 Qwen3-MoE, DeepSeek-V3
  int64_t expert_ffn_hidden_size = 0;         // f_e: 14336 Mixtral, 768 Qwen3-30B-A3B
  int64_t num_shared_experts = 0;             // always-active experts: 1 DeepSeek-V3, Qwen2-MoE
  int64_t shared_expert_ffn_hidden_size = 0;  // f_s per shared expert: 2048 DeepSeek-V3
  bool shared_expert_gate = false;            // Qwen2-MoE: sigmoid gate, an h -> 1 projection
  bool router_score_bias = false;             // DeepSeek-V3: E-entry e_score_correction_bias
  bool router_bias = false;                   // gpt-oss: the router Linear's trained E-entry bias
  // Llama 4's router (transformers Llama4TextMoe, Llama4Router): the sigmoid of the chosen
  // expert's logit scales the token before the expert instead of its output; Megatron-Core's
  // moe_router_score_function "sigmoid" with moe_apply_probs_on_input (top-1 only, experts.py).
  // The same GEMMs and elementwise passes as the softmax router: no cost.
  bool router_probs_on_input = false;
  int64_t first_dense_layers = 0;  // 3 DeepSeek-V3 (first_k_dense_replace), else 0
  // Which layers are MoE layers when it is not a dense prefix: one entry per layer, 1 MoE and 0
  // dense (Megatron-Core's --moe-layer-freq list, MoE every other layer in GShard, Switch and
  // Llama 4; Qwen2-MoE's decoder_sparse_step and mlp_only_layers). Empty: the prefix rule. A
  // loaded list is never a dense prefix followed by MoE layers (read as first_dense_layers).
  std::vector<int> moe_layers;
  // Group-limited routing (DeepSeek-V2 Sec. 2.1.3 device-limited, DeepSeek-V3 Sec. 2.1.2
  // node-limited; Megatron-Core --moe-router-num-groups / --moe-router-group-topk, moe_utils.py
  // group_limited_topk): the E experts form router_num_groups groups of consecutive experts, a
  // token picks router_group_topk of them by the sum of each group's top-(k / M) scores, then
  // its k experts inside those. 0 and 0: no limit. DeepSeek-V3: 8 and 4 (n_group, topk_group).
  int64_t router_num_groups = 0;
  int64_t router_group_topk = 0;

  // Multi-head latent attention (DeepSeek-V2, Sec. 2.1; DeepSeek-V3): kv_lora_rank > 0 turns
  // it on, and then head_dim = qk_nope_head_dim + qk_rope_head_dim and num_kv_heads = a.
  int64_t q_lora_rank = 0;       // d_c' 1536 (V3); 0: queries are not compressed
  int64_t kv_lora_rank = 0;      // d_c 512 (V3)
  int64_t qk_nope_head_dim = 0;  // d_h 128 (V3)
  int64_t qk_rope_head_dim = 0;  // d_h^R 64 (V3), shared by all heads for keys
  int64_t v_head_dim = 0;        // 128 (V3)

  // D: multi-token-prediction depths (DeepSeek-V3 report, Sec. 2.2; Megatron-Core
  // --mtp-num-layers, transformer/multi_token_prediction.py MultiTokenPredictionLayer), 0: none.
  // Each depth k holds two RMSNorms (enorm, hnorm), a projection eh_proj of 2h -> h, one
  // transformer layer of the decoder's last layer's kind and a final norm; it shares the token
  // embedding and the output head with the main model. DeepSeek-V3: 1 (num_nextn_predict_layers).
  int64_t mtp_num_layers = 0;

  bool is_moe() const { return num_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  /// Whether layer `layer` (0-based) has the MoE MLP.
  bool is_moe_layer(int64_t layer) const {
    if (!is_moe()) {
      return false;
    }
    return moe_layers.empty() ? layer >= first_dense_layers
                              : moe_layers.at(static_cast<size_t>(layer)) != 0;
  }
  int64_t num_moe_layers() const {
    if (!is_moe()) {
      return 0;
    }
    return moe_layers.empty() ? num_layers - first_dense_layers
                              : std::count(moe_layers.begin(), moe_layers.end(), 1);
  }
  bool has_mtp() const { return mtp_num_layers > 0; }
  bool has_routing_groups() const { return router_num_groups > 1; }
  /// The decoder layer whose kind each MTP depth's transformer layer takes: the last one
  /// (Megatron-Core gpt_layer_specs.py get_gpt_mtp_block_spec takes the decoder block spec's
  /// last layer; training.py num_floating_point_operations `last_layer_is_moe`).
  int64_t mtp_template_layer() const { return num_layers - 1; }
  /// Whether each MTP depth's transformer layer has the MoE MLP (mtp_template_layer's kind).
  bool mtp_layer_is_moe() const { return is_moe_layer(mtp_template_layer()); }
  /// Whether some layer attends over a window shorter than the sequence, so some keys are
  /// masked out beyond the causal mask; false for full causal attention (sliding_window 0 or
  /// >= seq_length, or a pattern that windows no layer).
  bool is_windowed() const;
  /// Whether layer `layer` (0-based, global) attends over the window: is_windowed() and the
  /// pattern (window_attn_skip_freq or window_attn_layers; neither: every layer) selects it.
  bool is_windowed_layer(int64_t layer) const;
  /// Whether the window pattern marks layer `layer` sliding (Hugging Face layer_types
  /// "sliding_attention"): as is_windowed_layer, but also where sliding_window >= seq_length
  /// makes its window full causal attention.
  bool is_sliding_layer(int64_t layer) const;
  /// Whether the window pattern marks any layer sliding (is_sliding_layer of some layer).
  bool has_sliding_layer() const;
  /// The rotary base of layer `layer`: rope_local_theta on a sliding layer when set, else
  /// rope_theta.
  double layer_rope_theta(int64_t layer) const {
    return rope_local_theta > 0.0 && is_sliding_layer(layer) ? rope_local_theta : rope_theta;
  }
  /// The frequency scaling of layer `layer`: none on a sliding layer that turns by
  /// rope_local_theta, else rope_scaling.
  RopeScaling layer_rope_scaling(int64_t layer) const {
    return rope_local_theta > 0.0 && is_sliding_layer(layer) ? RopeScaling{} : rope_scaling;
  }
  /// Whether the rotary frequencies are scaled (rope_scaling's type is not kNone).
  bool has_rope_scaling() const { return rope_scaling.type != RopeScalingType::kNone; }
  /// The attention scores' scale: 1 / sqrt(query_pre_attn_scalar), or 1 / sqrt(head_dim) when
  /// it is 0; times yarn_mscale(factor, mscale_all_dim)^2 for multi-head latent attention under
  /// YaRN.
  double attention_scale() const;
  /// Whether the scale is not 1 / sqrt(head_dim) (query_pre_attn_scalar set to another value).
  bool has_attention_scale_override() const {
    return query_pre_attn_scalar > 0.0 && query_pre_attn_scalar != static_cast<double>(head_dim);
  }
  /// Channels of each query/key head that rotary positions rotate: int(head_dim x rotary_percent).
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * rotary_percent);
  }
  /// Whether rotary positions rotate only part of each head (rotary_percent < 1).
  bool has_partial_rotary() const { return rotary_percent < 1.0; }
  /// Whether layer `layer` (0-based, global) applies rotary positions: rope positions and not a
  /// NoPE layer of no_rope_freq.
  bool is_rotary_layer(int64_t layer) const {
    return positions == Positions::kRope &&
           (no_rope_freq.empty() || no_rope_freq.at(static_cast<size_t>(layer)) == 0);
  }
  /// Whether queries and keys pass through a per-head norm (qk_norm's RMSNorm with gains, or
  /// qk_l2_norm's without): the elementwise pass and its saved inputs.
  bool has_qk_normalization() const { return qk_norm || qk_l2_norm; }
  /// Whether either of Gemma 2's logit soft-caps is set.
  bool has_logit_softcapping() const {
    return attn_logit_softcapping > 0.0 || final_logit_softcapping > 0.0;
  }
  /// Whether a pattern is given (window_attn_skip_freq or window_attn_layers).
  bool has_window_pattern() const {
    return window_attn_skip_freq != 0 || !window_attn_layers.empty();
  }

  bool operator==(const TransformerConfig&) const = default;
};

/// The most layers validate_model admits: twice the deepest published transformer (DeepNet,
/// Wang et al. 2022: 1,000 layers); model_config.cpp says why the bound is this tight.
inline constexpr int64_t kMaxLayers = 2'048;
/// The longest sequence, window or chunk validate_model admits, in tokens.
inline constexpr int64_t kMaxSequence = 100'000'000;
/// The most multi-token-prediction depths validate_model admits (mtp_num_layers): DeepSeek-V3
/// trains 1 (report Sec. 2.2, "we set D to 1"); 8 future tokens per position is far beyond any
/// published run.
inline constexpr int64_t kMaxMtpLayers = 8;

/// Parameters of one transformer block by part, before any sharding.
struct LayerParameterCounts {
  int64_t attention = 0;       // projections, their biases, q/k norms, MLA's latent norms
  int64_t norms = 0;           // the block's two norms (four with sandwich_norm)
  int64_t mlp = 0;             // dense MLP (0 in an MoE layer)
  int64_t router = 0;          // E h (+ E score bias)
  int64_t routed_experts = 0;  // E experts (0 in a dense layer)
  int64_t shared_experts = 0;  // shared experts and their gate
  int64_t total() const {
    return attention + norms + mlp + router + routed_experts + shared_experts;
  }
  /// What one token uses: routed experts counted k of E.
  int64_t active(const TransformerConfig& model) const;
};
LayerParameterCounts count_layer_parameters(const TransformerConfig& model, bool moe_layer);
/// Parameters of one MLP of hidden size `ffn` (one expert): 2 h f (GELU) or 3 h f (SwiGLU),
/// plus biases when mlp_bias.
int64_t mlp_parameter_count(const TransformerConfig& model, int64_t ffn);

/// Exact parameter counts of a TransformerConfig, by place.
struct ParameterCounts {
  int64_t token_embedding = 0;     // V h
  int64_t position_embedding = 0;  // max_position_embeddings h for learned positions, else 0
  int64_t per_layer = 0;           // one dense transformer block, norms and biases included
  int64_t moe_layer = 0;           // one MoE block (0 for a dense model)
  int64_t final_norm = 0;          // h (RMSNorm) or 2h (LayerNorm)
  int64_t lm_head = 0;             // V h when untied, else 0
  // The multi-token-prediction module, all D depths: per depth enorm, hnorm, eh_proj 2 h h, one
  // transformer layer of the decoder's last layer's kind and a final norm. The embedding and the
  // output head are shared with the main model (Megatron-Core), not counted again.
  int64_t mtp = 0;
  int64_t mtp_per_depth_without_layer = 0;  // 3 norms + eh_proj of one depth
  int64_t total = 0;
  int64_t active = 0;  // used per token: routed experts counted k of E (= total when dense)
};

/// Exact count, biases and norms included (matches a checkpoint's config.json count).
ParameterCounts count_parameters(const TransformerConfig& model);

/// Throws InputError naming the first bad field (zero, negative, absurd, inconsistent).
void validate_model(const TransformerConfig& model, const std::string& source);

/// What the model cannot train at its seq_length though its fields are consistent: chunked
/// attention (attention_chunk_size) is not costed, so a sequence longer than the chunk is
/// refused. load_training_model and a plan file's reader call it at the length planned.
void validate_training_length(const TransformerConfig& model, const std::string& source);

/// A preset name (`gpt3-175b`, `llama3-8b`, `tiny`, ...), a meshplan model JSON file, or a
/// Hugging Face config.json (detected by its `architectures` or `model_type` field). Throws
/// InputError.
TransformerConfig load_model(const std::string& name_or_path);

/// Training length used for a Hugging Face config that states none (no "seq_length"): its
/// max_position_embeddings is the longest context the positions support (131,072 for Qwen2-7B),
/// not what it was pretrained at. 4,096 is Llama 2's pretraining context (Touvron et al. 2023,
/// Table 1) and Qwen2's before its long-context stage (Yang et al. 2024, Sec. 3.2).
inline constexpr int64_t kHfDefaultSeqLength = 4096;

/// The model to train: load_model(name_or_path) at `seq_len` when given (validated again with
/// source "--seq-len"); else, for a Hugging Face config without
/// "seq_length", at min(max_position_embeddings, kHfDefaultSeqLength), with `*note` set to one
/// line saying so and why (left empty otherwise). Throws InputError as load_model and
/// validate_model do.
TransformerConfig load_training_model(const std::string& name_or_path,
                                      const std::optional<int64_t>& seq_len, std::string* note);
TransformerConfig model_from_json(const nlohmann::json& json, const std::string& source);
/// The model format's "activation", "norm" and "positions" fields of `json`; InputError
/// "<source>: <field>: unsupported <field> (<text>); supported: ..." otherwise.
Activation parse_activation(const nlohmann::json& json, const std::string& source);
Norm parse_norm(const nlohmann::json& json, const std::string& source);
Positions parse_positions(const nlohmann::json& json, const std::string& source);
/// The model format's optional mixture-of-experts keys (TransformerConfig's MoE fields), which
/// read_moe_fields reads; a published run's `model` takes them too (runs-file version 9).
inline constexpr std::array<std::string_view, 11> kMoeModelFields = {
    "num_experts",
    "experts_per_token",
    "expert_ffn_hidden_size",
    "num_shared_experts",
    "shared_expert_ffn_hidden_size",
    "shared_expert_gate",
    "router_score_bias",
    "router_bias",
    "first_dense_layers",
    "router_num_groups",
    "router_group_topk"};
/// The model format's optional multi-head latent attention keys, which read_mla_fields reads.
inline constexpr std::array<std::string_view, 5> kMlaModelFields = {
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"};
/// The model format's `head_dim` of `json`: the key when given and not null, else hidden_size /
/// num_attention_heads (InputError "<source>: num_attention_heads: does not divide hidden_size
/// and no head_dim is given" when it does not divide).
int64_t read_head_dim(const nlohmann::json& json, const std::string& source, int64_t hidden_size,
                      int64_t num_attention_heads);
/// Sets `model`'s MoE fields from the kMoeModelFields keys of `json`, each absent = 0 or false (a
/// dense model), as a model file reads them; a wrong type is an InputError naming the key.
/// validate_model checks the values.
void read_moe_fields(const nlohmann::json& json, const std::string& source,
                     TransformerConfig& model);
/// Sets `model`'s MLA fields from the kMlaModelFields keys of `json`, each absent = 0 (standard
/// attention), as read_moe_fields does.
void read_mla_fields(const nlohmann::json& json, const std::string& source,
                     TransformerConfig& model);
/// The model format's per-projection bias keys: a model file requires them; a published run's
/// `model` may state them (runs-file version 10), read_stated_bias_fields reading them.
inline constexpr std::array<std::string_view, 3> kBiasModelFields = {
    "qkv_bias", "attention_output_bias", "mlp_bias"};
/// Sets the kBiasModelFields `json` states (a bool each, else an InputError naming the key),
/// leaving the ones it does not state as they are.
void read_stated_bias_fields(const nlohmann::json& json, const std::string& source,
                             TransformerConfig& model);
/// The model format's optional attention and gated-unit variant keys (gpt-oss: sliding windows on
/// alternate layers, learned sinks, GLU offset and clamp), which read_attention_variant_fields and
/// read_gated_unit_variant_fields read; a published run's `model` takes them too (runs-file
/// version 10).
inline constexpr std::array<std::string_view, 5> kVariantModelFields = {
    "sliding_window", "window_attn_skip_freq", "attention_sinks", "glu_linear_offset",
    "activation_clamp_value"};
/// Sets `model`'s sliding_window (absent = 0, full attention), window_attn_skip_freq (an integer
/// N >= 2 or a 0/1 list per layer; absent = every layer windowed when sliding_window is set) and
/// attention_sinks (absent = false), as a model file reads them.
void read_attention_variant_fields(const nlohmann::json& json, const std::string& source,
                                   TransformerConfig& model);
/// Sets `model`'s glu_linear_offset and activation_clamp_value (each absent = 0: none), as a
/// model file reads them. validate_model checks the values.
void read_gated_unit_variant_fields(const nlohmann::json& json, const std::string& source,
                                    TransformerConfig& model);
/// A validated model's MoE layer pattern in its one form: a moe_layers list that is a dense
/// prefix followed by MoE layers becomes first_dense_layers (model_from_json does this after
/// validate_model; the Hugging Face loaders build lists).
void normalize_moe_layers(TransformerConfig& model);
/// A validated model's window pattern in its one form: a list that windows every layer becomes
/// no list, one that windows none full attention (model_from_json does this after validate_model).
void normalize_window_pattern(TransformerConfig& model);
nlohmann::json model_to_json(const TransformerConfig& model);
std::vector<std::string> model_preset_names();

std::string to_string(Activation activation);
std::string to_string(Norm norm);
std::string to_string(Positions positions);

/// Numeric precision of training. bf16 mixed precision keeps fp32 master weights and Adam
/// moments (Micikevicius et al. 2018); fp32 keeps everything in fp32 (the CPU executor).
enum class Precision { kBf16Mixed, kFp32 };
std::string to_string(Precision precision);
/// Bytes of one element of weights, activations and communicated tensors: 2 (bf16) or 4 (fp32).
int64_t compute_element_bytes(Precision precision);

/// One accelerator's datasheet figures.
struct GpuSpec {
  std::string name;                       // "A100-SXM4-80GB"
  double peak_bf16_flops_per_second = 0;  // dense tensor-core peak, e.g. 312e12 (A100)
  double peak_fp32_flops_per_second = 0;  // dense fp32 peak (non tensor core), e.g. 19.5e12
  double peak_fp8_flops_per_second = 0;   // dense FP8 tensor-core peak; 0: no FP8 (A100)
  int64_t hbm_bytes = 0;                  // e.g. 80e9
  double hbm_bytes_per_second = 0;        // e.g. 2.039e12

  bool operator==(const GpuSpec&) const = default;
};

/// Achieved-over-peak parameters of the compute model, one set per GPU type (never per run).
/// The planner's cost model documents how each is used (planner/compute_cost.cpp).
struct ComputeEfficiency {
  double gemm_peak_efficiency = 0;      // large GEMM throughput / datasheet peak
  double gemm_half_efficiency_dim = 0;  // x_half in e_max / (1 + x_half (1/k + w (1/m + 1/n)))
  double attention_efficiency = 0;      // fused (flash) attention throughput / peak
  double hbm_efficiency = 0;            // achieved / datasheet HBM bandwidth, memory-bound ops
  double collective_efficiency = 0;     // achieved NCCL bus bandwidth / link line rate
  double fp8_gemm_peak_efficiency = 0;  // large FP8 GEMM throughput / FP8 peak; 0: no FP8

  bool operator==(const ComputeEfficiency&) const = default;
};

/// A homogeneous GPU cluster.
struct ClusterConfig {
  std::string name;  // "dgx-a100-80gb"
  GpuSpec gpu;
  int64_t gpus_per_node = 0;                       // 8 on a DGX
  double intra_node_bytes_per_second = 0;          // per GPU, one direction (NVLink)
  double intra_node_latency_seconds = 0;           // per hop
  double inter_node_bytes_per_second_per_gpu = 0;  // NIC line rate per GPU, one direction
  double inter_node_latency_seconds = 0;
  int64_t reserved_bytes_per_gpu = 0;  // fixed: CUDA context, NCCL buffers
  // USD; none where the cluster has no list price (an in-house system, this host's cores): sweep
  // then reports no cost unless --price gives one.
  std::optional<double> price_per_gpu_hour;
  Precision precision = Precision::kBf16Mixed;  // what training runs in on this cluster
  ComputeEfficiency efficiency;
  std::string source;  // datasheets the numbers come from

  bool operator==(const ClusterConfig&) const = default;
};

/// Whether the cluster's devices are CPU cores (local-cpu and the profiles calibrate derives from
/// it): only meshplan's own CPU executor runs such a cluster.
bool is_cpu_cluster(const ClusterConfig& cluster);

/// A preset name (`dgx-a100-80gb`, `dgx-h100`, `dgx-h200`, `local-cpu`) or a cluster JSON file.
ClusterConfig load_cluster(const std::string& name_or_path);
ClusterConfig cluster_from_json(const nlohmann::json& json, const std::string& source);
nlohmann::json cluster_to_json(const ClusterConfig& cluster);
std::vector<std::string> cluster_preset_names();
void validate_cluster(const ClusterConfig& cluster, const std::string& source);
/// A price per GPU-hour a cluster file or `sweep --price` may state: finite, 0 to 1e6 USD (a
/// GPU-hour above a million USD is a typo).
bool price_in_range(double usd_per_gpu_hour);

}  // namespace meshplan::models
