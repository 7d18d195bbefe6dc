// Exact parameter count of a decoder-only transformer, dense or mixture-of-experts, one term per
// weight tensor.
//
// Shape letters (models.h): l layers, h hidden, a attention heads, g kv heads, d head dim,
// f ffn hidden, V vocab, P learned position rows (max_position_embeddings); MoE: E experts,
// k experts per token, f_e expert ffn, S shared experts of f_s; MLA: r_q q_lora_rank,
// r_kv kv_lora_rank, d_n qk_nope_head_dim, d_r qk_rope_head_dim, d_v v_head_dim.
//
// Per layer (Vaswani et al. 2017, Sec. 3.2-3.3; grouped-query attention per Ainslie et al. 2023,
// Sec. 2: K and V have g heads instead of a):
//   attention  Q: a d h   K: g d h   V: g d h   O: a d h   (+ (a + 2g) d if qkv_bias,
//                                                            + h if attention_output_bias)
//              + 2d with qk_norm (Qwen3Attention's q_norm and k_norm over head_dim)
//              + a with attention_sinks (gpt-oss: GptOssAttention.sinks, one logit per head)
//   MLA        (DeepSeek-V2 Sec. 2.1, transformers' DeepseekV3Attention):
//              q_a_proj h r_q, q_a_layernorm r_q, q_b_proj r_q a (d_n + d_r)   (r_q > 0)
//              or q_proj h a (d_n + d_r)                                          (r_q = 0)
//              kv_a_proj_with_mqa h (r_kv + d_r), kv_a_layernorm r_kv,
//              kv_b_proj r_kv a (d_n + d_v), o_proj a d_v h
//   MLP        gelu:   h f + f h          (+ f + h if mlp_bias)
//              swiglu, geglu: 3 h f (gate, up, down; Shazeer 2020, eq. 5-6)  (+ 2f + h if
//              mlp_bias)
//   MoE MLP    router E h (+ E with DeepSeek-V3's e_score_correction_bias, + E with gpt-oss's
//              router bias, GptOssTopKRouter.bias), E experts of f_e (their biases with
//              mlp_bias: GptOssExperts' gate_up_proj_bias 2 f_e, down_proj_bias h),
//              S shared experts of f_s (+ h for Qwen2-MoE's shared_expert_gate)
//              (transformers' MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, DeepseekV3MoE)
//   norms      2 per layer (4 with sandwich_norm: Gemma 2/3's post-attention and post-MLP
//              norms), each h (RMSNorm gain; Zhang & Sennrich 2019) or 2h (LayerNorm gain
//              and bias; Ba et al. 2016)
// Multi-token prediction (DeepSeek-V3 report Sec. 2.2; Megatron-Core multi_token_prediction.py
// MultiTokenPredictionLayer), per depth: enorm and hnorm, eh_proj 2 h x h (no bias), one
// transformer layer of the decoder's last layer's kind, final_layernorm; the embedding and output
// head are shared (Megatron-Core passes the main model's embedding and output_layer in).
// Outside the layers: token embedding V h, learned position table P h, final norm, and an
// LM head V h (no bias) when it is not tied to the token embedding (Press & Wolf 2017).
// For GPT with biases, tied embeddings and P = s this is Narayanan et al. 2021 (SC21), Sec. 5.1:
// 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final LayerNorm's 2h that the formula omits.

#include "meshplan/models.h"

namespace meshplan::models {

namespace {

int64_t norm_count(const TransformerConfig& model) {
  return model.norm == Norm::kLayerNorm ? 2 * model.hidden_size : model.hidden_size;
}

int64_t mla_attention_count(const TransformerConfig& model) {
  const int64_t h = model.hidden_size;
  const int64_t a = model.num_attention_heads;
  const int64_t qk_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
  const int64_t q = model.q_lora_rank > 0 ? h * model.q_lora_rank + model.q_lora_rank +
                                                model.q_lora_rank * a * qk_head
                                          : h * a * qk_head;
  const int64_t kv = h * (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank +
                     model.kv_lora_rank * a * (model.qk_nope_head_dim + model.v_head_dim);
  return q + kv + a * model.v_head_dim * h;
}

int64_t attention_count(const TransformerConfig& model) {
  if (model.is_mla()) {
    return mla_attention_count(model);  // no sinks: validate_mla refuses them
  }
  const int64_t sinks = model.attention_sinks ? model.num_attention_heads : 0;
  const int64_t h = model.hidden_size;
  const int64_t a = model.num_attention_heads;
  const int64_t g = model.num_kv_heads;
  const int64_t d = model.head_dim;
  int64_t attention = a * d * h + 2 * g * d * h + a * d * h;  // Q, K and V, O
  if (model.qkv_bias) {
    attention += (a + 2 * g) * d;
  }
  if (model.attention_output_bias) {
    attention += h;
  }
  if (model.qk_norm) {
    attention += 2 * d;
  }
  return attention + sinks;
}

}  // namespace

int64_t mlp_parameter_count(const TransformerConfig& model, int64_t ffn) {
  const int64_t h = model.hidden_size;
  const bool gelu = !is_gated(model.activation);
  int64_t mlp = gelu ? 2 * h * ffn : 3 * h * ffn;
  if (model.mlp_bias) {
    mlp += gelu ? ffn + h : 2 * ffn + h;
  }
  return mlp;
}

int64_t LayerParameterCounts::active(const TransformerConfig& model) const {
  if (routed_experts == 0) {
    return total();
  }
  const int64_t one_expert = routed_experts / model.num_experts;
  return total() - routed_experts + model.experts_per_token * one_expert;
}

LayerParameterCounts count_layer_parameters(const TransformerConfig& model, bool moe_layer) {
  LayerParameterCounts p;
  p.attention = attention_count(model);
  p.norms = (model.sandwich_norm ? 4 : 2) * norm_count(model);
  if (!moe_layer) {
    p.mlp = mlp_parameter_count(model, model.ffn_hidden_size);
    return p;
  }
  const int64_t h = model.hidden_size;
  p.router = model.num_experts * h + (model.router_score_bias ? model.num_experts : 0) +
             (model.router_bias ? model.num_experts : 0);
  p.routed_experts = model.num_experts * mlp_parameter_count(model, model.expert_ffn_hidden_size);
  p.shared_experts =
      model.num_shared_experts * mlp_parameter_count(model, model.shared_expert_ffn_hidden_size) +
      (model.shared_expert_gate ? h : 0);
  return p;
}

ParameterCounts count_parameters(const TransformerConfig& model) {
  const int64_t h = model.hidden_size;
  const int64_t V = model.vocab_size;
  const LayerParameterCounts dense = count_layer_parameters(model, false);
  const LayerParameterCounts moe = count_layer_parameters(model, true);
  const int64_t num_moe = model.num_moe_layers();
  const int64_t num_dense = model.num_layers - num_moe;

  ParameterCounts counts;
  counts.token_embedding = V * h;
  counts.position_embedding =
      model.positions == Positions::kLearned ? model.max_position_embeddings * h : 0;
  counts.per_layer = dense.total();
  counts.moe_layer = num_moe > 0 ? moe.total() : 0;
  counts.final_norm = norm_count(model);
  counts.lm_head = model.tied_embeddings ? 0 : V * h;
  const LayerParameterCounts mtp_layer = model.mtp_layer_is_moe() ? moe : dense;
  counts.mtp_per_depth_without_layer = 3 * norm_count(model) + 2 * h * h;
  counts.mtp = model.mtp_num_layers * (counts.mtp_per_depth_without_layer + mtp_layer.total());
  const int64_t mtp_active =
      model.mtp_num_layers * (counts.mtp_per_depth_without_layer + mtp_layer.active(model));
  const int64_t outside =
      counts.token_embedding + counts.position_embedding + counts.final_norm + counts.lm_head;
  counts.total = outside + num_dense * counts.per_layer + num_moe * counts.moe_layer + counts.mtp;
  counts.active = outside + num_dense * counts.per_layer +
                  (num_moe > 0 ? num_moe * moe.active(model) : 0) + mtp_active;
  return counts;
}

}  // namespace meshplan::models
