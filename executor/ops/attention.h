#pragma once
// Causal grouped-query self-attention core (Vaswani et al. 2017, eq. 1; GQA: Ainslie et al.
// 2023): per query head, P = softmax(causal(Q K^T / sqrt(HS))), out = P V, where query head h
// reads kv head h / (NH / KVH). The forward saves the probabilities P; selective recompute
// (Korthikanti et al. 2022, Sec. 5) drops them and calls attention_probs_forward again in the
// backward. The backward adds (+=) into dqkv.
//
// Sliding window W (0: none): query t attends keys t - W < j <= t, at most W keys itself
// included (transformers' sliding_window_causal mask; Megatron-Core window_size (W - 1, 0)).
// The backward needs no W: P is zero outside the window, and so is dS = P o (dP - rowsum).
//
// Scores (AttentionScores): S = scale Q K^T, scale 1 / sqrt(HS) unless given (Gemma 2's
// 1 / sqrt(query_pre_attn_scalar)); with a soft-cap c > 0 (Gemma 2's attn_logit_softcapping)
// S = c tanh(scale Q K^T / c) before the mask and softmax (transformers modeling_gemma2.py). The
// backward recomputes scale Q K^T for the cap's derivative 1 - tanh^2(x / c), as FlashAttention
// recomputes the scores, so the forward saves P only.
//
// Sinks (gpt-oss's attention_sinks; transformers eager_attention_forward with `sinks`,
// Megatron-Core softmax_type "learnable"): one learned logit z_h per query head joins each row's
// softmax denominator with no value row, p_j = exp(S_j - m) / (sum_k exp(S_k - m) + exp(z_h - m)),
// m the largest of the row's scores and z_h; it is neither scaled nor capped. The row's P then
// sums to 1 - p_sink, so the backward reads p_sink = 1 - sum_j p_j from the saved P: the scores'
// gradient keeps its form (the sink has no value, so its dP is 0) and
// d z_h = -sum over rows of p_sink sum_j p_j dP_j.
//
// Shape letters: T sequence positions, B sequences, NH query heads and KVH kv heads on this rank,
// HS head size. Rows are sequence-first (row t*B + b). A fused qkv row holds
// [NH query heads | KVH key heads | KVH value heads], each HS wide.

#include <type_traits>

namespace meshplan::executor {

/// How the raw scores Q K^T become the softmax's input: scale 0 means 1 / sqrt(HS); softcap 0
/// means no cap.
struct AttentionScores {
  double scale = 0.0;
  double softcap = 0.0;
};

/// att (B, NH, T, T) = causal softmax of the scaled scores (zero above the diagonal, and left of
/// the window W when 0 < W < T); qkv (T, B, (NH + 2 KVH) HS); sinks (NH) the heads' sink
/// logits, nullptr for none.
template <typename Real>
void attention_probs_forward(Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                             int W = 0, AttentionScores scores = {},
                             const std::type_identity_t<Real>* sinks = nullptr);
/// out (T, B, NH HS) = P V per head; saves att (B, NH, T, T); qkv and sinks as above.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                       int W = 0, AttentionScores scores = {},
                       const std::type_identity_t<Real>* sinks = nullptr);
/// dqkv (T, B, (NH + 2 KVH) HS) +=; scratch (T, T) is overwritten; dout (T, B, NH HS); att and
/// qkv as saved (or recomputed) by the forward; dsinks (NH) += the sinks' gradient when the
/// forward had sinks (nullptr: none).
template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* att,
                        const Real* qkv, int T, int B, int NH, int KVH, int HS,
                        AttentionScores scores = {}, std::type_identity_t<Real>* dsinks = nullptr);

/// Plain-loop references (llm.c's attention_forward / attention_backward, generalised to GQA).
void attention_forward_reference(float* out, float* att, const float* qkv, int T, int B, int NH,
                                 int KVH, int HS, int W = 0, AttentionScores scores = {},
                                 const float* sinks = nullptr);
void attention_backward_reference(float* dqkv, const float* dout, const float* att,
                                  const float* qkv, int T, int B, int NH, int KVH, int HS,
                                  AttentionScores scores = {}, float* dsinks = nullptr);

}  // namespace meshplan::executor
