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
// Shape letters: T sequence positions, B sequences, NH query heads and KVH kv heads on this rank,
// HS head size. Rows are sequence-first (row t*B + b). A fused qkv row holds
// [NH query heads | KVH key heads | KVH value heads], each HS wide.

namespace meshplan::executor {

/// How the raw scores Q K^T become the softmax's input: scale 0 means 1 / sqrt(HS); softcap 0
/// means no cap.
struct AttentionScores {
  double scale = 0.0;
  double softcap = 0.0;
};

/// att (B, NH, T, T) = causal softmax of the scaled scores (zero above the diagonal, and left of
/// the window W when 0 < W < T); qkv (T, B, (NH + 2 KVH) HS).
template <typename Real>
void attention_probs_forward(Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                             int W = 0, AttentionScores scores = {});
/// out (T, B, NH HS) = P V per head; saves att (B, NH, T, T); qkv as above.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                       int W = 0, AttentionScores scores = {});
/// dqkv (T, B, (NH + 2 KVH) HS) +=; scratch (T, T) is overwritten; dout (T, B, NH HS); att and
/// qkv as saved (or recomputed) by the forward.
template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* att,
                        const Real* qkv, int T, int B, int NH, int KVH, int HS,
                        AttentionScores scores = {});

/// Plain-loop references (llm.c's attention_forward / attention_backward, generalised to GQA).
void attention_forward_reference(float* out, float* att, const float* qkv, int T, int B, int NH,
                                 int KVH, int HS, int W = 0, AttentionScores scores = {});
void attention_backward_reference(float* dqkv, const float* dout, const float* att,
                                  const float* qkv, int T, int B, int NH, int KVH, int HS,
                                  AttentionScores scores = {});

}  // namespace meshplan::executor
