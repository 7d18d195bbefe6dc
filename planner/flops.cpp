// FLOP counts of the transformer's matrix multiplications.

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

double active_ffn_width(const models::TransformerConfig& model, bool moe_layer) {
  if (!moe_layer) {
    return static_cast<double>(model.ffn_hidden_size);
  }
  return static_cast<double>(model.experts_per_token * model.expert_ffn_hidden_size +
                             model.num_shared_experts * model.shared_expert_ffn_hidden_size);
}

double attention_key_pairs(int64_t seq_tokens, int64_t window_tokens) {
  // Query i (0-based) attends keys max(0, i - w + 1) .. i (transformers' sliding_window_causal
  // mask; Megatron-Core window_size (w - 1, 0), get_sliding_window_causal_mask): i + 1 keys for
  // i < w, then w each.
  const double s = static_cast<double>(seq_tokens);
  if (window_tokens <= 0 || window_tokens >= seq_tokens) {
    return s * (s + 1.0) / 2.0;
  }
  const double w = static_cast<double>(window_tokens);
  return w * (w + 1.0) / 2.0 + (s - w) * w;
}

double attention_window_fraction(const models::TransformerConfig& model) {
  return attention_key_pairs(model.seq_length, model.sliding_window) /
         attention_key_pairs(model.seq_length, 0);
}

LayerFlops layer_forward_flops(const models::TransformerConfig& model, double tokens,
                               LayerKind kind) {
  const bool moe_layer = kind.moe;
  // A (m x k) by (k x n) product costs 2 m n k FLOPs (Narayanan et al. 2021, Sec. 5.1).
  const double h = static_cast<double>(model.hidden_size);
  const double d = static_cast<double>(model.head_dim);
  const double a = static_cast<double>(model.num_attention_heads);
  const double g = static_cast<double>(model.num_kv_heads);
  const double s = static_cast<double>(model.seq_length);
  // A windowed layer computes the scores of attention_key_pairs, not of the causal triangle:
  // the full-square count below times that share (1 on a full-attention layer). Megatron-LM's
  // own num_floating_point_operations (training.py, d98e8a64) ignores --window-size and
  // --window-attn-skip-freq; meshplan counts the work a windowed kernel does.
  const double window_share = kind.windowed ? attention_window_fraction(model) : 1.0;
  const double mlp_matrices = models::is_gated(model.activation) ? 3.0 : 2.0;
  LayerFlops flops;
  if (model.is_mla()) {
    // MLA (DeepSeek-V2, Sec. 2.1): every projection weight is used once per token, 2 T per
    // weight; scores over d_qk = d_nope + d_rope, values of d_v; output a d_v -> h.
    const double v = static_cast<double>(model.v_head_dim);
    const double out = a * v * h;
    const auto counts = models::count_layer_parameters(model, false);
    const double latent_norms = static_cast<double>(model.q_lora_rank + model.kv_lora_rank);
    flops.qkv = 2.0 * tokens * (static_cast<double>(counts.attention) - latent_norms - out);
    flops.attention = 2.0 * tokens * s * a * (d + v) * window_share;
    flops.output = 2.0 * tokens * out;
  } else {
    flops.qkv = 2.0 * tokens * h * (a + 2.0 * g) * d;
    // Q K^T and softmax(.) V over the full s x s square, as Megatron-LM counts them.
    flops.attention = 2.0 * 2.0 * tokens * s * a * d * window_share;
    flops.output = 2.0 * tokens * a * d * h;
  }
  // MoE: each token runs k routed experts of f_e and the shared ones (Fedus et al. 2022,
  // Sec. 2.1), after the router's T x h x E GEMM.
  flops.mlp = 2.0 * tokens * h * active_ffn_width(model, moe_layer) * mlp_matrices;
  if (moe_layer) {
    flops.router = 2.0 * tokens * h * static_cast<double>(model.num_experts);
  }
  return flops;
}

double lm_head_forward_flops(const models::TransformerConfig& model, double tokens) {
  return 2.0 * tokens * static_cast<double>(model.hidden_size) *
         static_cast<double>(model.vocab_size);
}

double mtp_extra_forward_flops(const models::TransformerConfig& model, double tokens) {
  // Megatron-LM training.py num_floating_point_operations (d98e8a64, lines 1286-1303): per MTP
  // depth "MTP eh norm + final nrom" 3h and "MTH eh proj" 2 h h per token and FMA, and the
  // logits "(mtp_num_layers + 1)" times.
  const double h = static_cast<double>(model.hidden_size);
  const double depths = static_cast<double>(model.mtp_num_layers);
  return depths * (2.0 * tokens * (3.0 * h + 2.0 * h * h) + lm_head_forward_flops(model, tokens));
}

double model_flops_per_step(const models::TransformerConfig& model, int64_t global_batch) {
  // Model FLOPs as Megatron-LM counts them (shared/validation/README.md): forward plus a
  // backward of twice the forward, no recompute. For ffn = 4h and a = g this is
  // 72 B s l h^2 (1 + s/(6h)) + 6 B s h V (Narayanan et al. 2021, eq. 3 without recompute).
  // MoE models count active parameters: k routed experts per token (and the router). Each
  // layer counts its own attention share: windowed layers (is_windowed_layer) their window's.
  const double tokens = static_cast<double>(global_batch) * static_cast<double>(model.seq_length);
  const LayerRange all_layers{0, model.num_layers};
  double forward = lm_head_forward_flops(model, tokens);
  for (const LayerKind kind : kLayerKinds) {
    const int64_t count = all_layers.num_of_kind(model, kind);
    if (count > 0) {
      forward += layer_forward_flops(model, tokens, kind).total() * static_cast<double>(count);
    }
  }
  if (model.has_mtp()) {
    // Megatron-LM training.py num_floating_point_operations (d98e8a64, lines 1042-1046): the
    // MTP depths count as more layers of the last layer's kind (`last_layer_is_moe`), plus
    // their projections, norms and logits (mtp_extra_forward_flops).
    forward += layer_forward_flops(model, tokens, mtp_layer_kind(model)).total() *
                   static_cast<double>(model.mtp_num_layers) +
               mtp_extra_forward_flops(model, tokens);
  }
  return 3.0 * forward;
}

int64_t rank_micro_batch_tokens(const models::TransformerConfig& model, const Layout& layout) {
  return layout.micro_batch * model.seq_length / layout.cp;
}

MlaLatentWidths mla_latent_widths(const models::TransformerConfig& model) {
  return {model.q_lora_rank > 0 ? model.q_lora_rank : model.hidden_size, model.kv_lora_rank,
          model.qk_rope_head_dim};
}

Shape shape_of(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
               const Layout& layout, bool moe_layer) {
  Shape x;
  x.t = static_cast<double>(layout.tp);
  x.tokens = static_cast<double>(rank_micro_batch_tokens(model, layout));
  x.h = static_cast<double>(model.hidden_size);
  x.d = static_cast<double>(model.head_dim);
  x.a = static_cast<double>(model.num_attention_heads);
  x.g = static_cast<double>(model.num_kv_heads);
  x.f = active_ffn_width(model, moe_layer);
  x.s = static_cast<double>(model.seq_length);
  x.e = static_cast<double>(element_bytes(cluster));
  x.sp = layout.sequence_parallel ? x.t : 1.0;
  x.fc1 = models::is_gated(model.activation) ? 2.0 * x.f : x.f;
  return x;
}

int64_t element_bytes(const models::ClusterConfig& cluster) {
  return models::compute_element_bytes(cluster.precision);
}

int64_t tp_all_gather_element_bytes(const models::ClusterConfig& cluster,
                                    const PlanOptions& options) {
  // Transformer Engine casts before it gathers: a LayerNormLinear's norm writes FP8 and the
  // column-parallel gather moves those bytes (TE v1.8 = 3ec998e9 module/layernorm_linear.py
  // _LayerNormLinear forward, ln_out uint8 into gather_along_first_dim; the backward re-gathers the
  // saved FP8 ln_out), a Linear's input is cast_to_fp8 before its gather (module/linear.py _Linear
  // forward), and a row-parallel linear's output gradient is cast and then gathered in FP8
  // (module/base.py grad_output_preprocess, "FP8 case with gather"; FP8 wgrad, Megatron-Core's
  // and NeMo's fp8_wgrad default). TE 2.x keeps it (v2.8 = 40c69e75 distributed.py
  // gather_along_first_dim with a quantizer: _all_gather_fp8 for delayed and current scaling). The
  // reduce-scatters carry the GEMMs' 16-bit outputs. torchao's tensor parallel styles do the same
  // under --framework fsdp (torchao eab345c float8_tensor_parallel.py, the styles torchtitan
  // 9dec370 parallelize_llama.py apply_tp uses with float8): PrepareFloat8ModuleInput and
  // Float8ColwiseParallel cast the sequence-sharded input (hp_tensor_to_float8_dynamic) before
  // redistributing it, and Float8RowwiseParallel's NoopFwToFloat8BwDynamic, after the output's
  // reduce-scatter, casts the output gradient before the backward's all-gather.
  if (options.gemm_precision == GemmPrecision::kFp8 &&
      (options.framework == Framework::kMegatron || options.framework == Framework::kFsdp)) {
    return 1;
  }
  return element_bytes(cluster);
}

}  // namespace meshplan::planner
