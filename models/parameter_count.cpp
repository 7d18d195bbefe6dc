// Exact parameter count of a dense decoder-only transformer, one term per weight tensor.
//
// Shape letters (models.h): l layers, h hidden, a attention heads, g kv heads, d head dim,
// f ffn hidden, V vocab, P learned position rows (max_position_embeddings).
//
// Per layer (Vaswani et al. 2017, Sec. 3.2-3.3; grouped-query attention per Ainslie et al. 2023,
// Sec. 2: K and V have g heads instead of a):
//   attention  Q: a d h   K: g d h   V: g d h   O: a d h   (+ (a + 2g) d if qkv_bias,
//                                                            + h if attention_output_bias)
//   MLP        gelu:   h f + f h          (+ f + h if mlp_bias)
//              swiglu: 3 h f (gate, up, down; Shazeer 2020, eq. 6)  (+ 2f + h if mlp_bias)
//   norms      2 per layer, each h (RMSNorm gain; Zhang & Sennrich 2019) or 2h (LayerNorm gain
//              and bias; Ba et al. 2016)
// Outside the layers: token embedding V h, learned position table P h, final norm, and an
// LM head V h (no bias) when it is not tied to the token embedding (Press & Wolf 2017).
// For GPT with biases, tied embeddings and P = s this is Narayanan et al. 2021 (SC21), Sec. 5.1:
// 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final LayerNorm's 2h that the formula omits.

#include "meshplan/models.h"

namespace meshplan::models {

ParameterCounts count_parameters(const TransformerConfig& model) {
  const int64_t h = model.hidden_size;
  const int64_t a = model.num_attention_heads;
  const int64_t g = model.num_kv_heads;
  const int64_t d = model.head_dim;
  const int64_t f = model.ffn_hidden_size;
  const int64_t V = model.vocab_size;
  const bool gelu = model.activation == Activation::kGelu;

  const int64_t norm = model.norm == Norm::kLayerNorm ? 2 * h : h;

  int64_t attention = a * d * h + 2 * g * d * h + a * d * h;  // Q, K and V, O
  if (model.qkv_bias) {
    attention += (a + 2 * g) * d;
  }
  if (model.attention_output_bias) {
    attention += h;
  }

  int64_t mlp = gelu ? 2 * h * f : 3 * h * f;
  if (model.mlp_bias) {
    mlp += gelu ? f + h : 2 * f + h;
  }

  ParameterCounts counts;
  counts.token_embedding = V * h;
  counts.position_embedding =
      model.positions == Positions::kLearned ? model.max_position_embeddings * h : 0;
  counts.per_layer = attention + mlp + 2 * norm;
  counts.final_norm = norm;
  counts.lm_head = model.tied_embeddings ? 0 : V * h;
  counts.total = counts.token_embedding + counts.position_embedding +
                 model.num_layers * counts.per_layer + counts.final_norm + counts.lm_head;
  return counts;
}

}  // namespace meshplan::models
