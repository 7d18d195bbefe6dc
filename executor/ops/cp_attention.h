#pragma once
// Causal grouped-query attention of this rank's queries against the whole sequence's keys and
// values, for context parallelism: the rank holds T of the S positions (two chunks, so its
// rows are not contiguous in the sequence) and has gathered every position's K and V. Same math
// as attention.h (Vaswani et al. 2017, eq. 1), with the causal mask taken from the positions:
// query at position p sees keys at positions <= p. The backward adds (+=) into dqkv and dkv.
//
// Shape letters: T positions on this rank, S the sequence, B sequences, NH query heads and KVH
// kv heads on this rank, HS head size. Rows are sequence-first (row t*B + b). A fused qkv row
// holds [NH query heads | KVH key heads | KVH value heads]; a kv row [KVH key | KVH value].

namespace meshplan::executor {

/// out (T, B, NH HS) = P V per head; saves att (B, NH, T, S), zero where masked; qkv (T, B,
/// (NH + 2 KVH) HS) (its query heads are read); kv (S, B, 2 KVH HS) in sequence order;
/// positions (T) the sequence position of each local row; `scale` multiplies Q K^T
/// (TransformerConfig::attention_scale: 1 / sqrt(HS), or MLA's under YaRN).
void cp_attention_forward(float* out, float* att, const float* qkv, const float* kv,
                          const int* positions, int T, int S, int B, int NH, int KVH, int HS,
                          float scale);
/// dqkv (T, B, (NH + 2 KVH) HS) += its query-head gradients; dkv (S, B, 2 KVH HS) += the key
/// and value gradients of every position; dout (T, B, NH HS); att, qkv, kv as in the forward.
void cp_attention_backward(float* dqkv, float* dkv, const float* dout, const float* att,
                           const float* qkv, const float* kv, const int* positions, int T, int S,
                           int B, int NH, int KVH, int HS, float scale);

}  // namespace meshplan::executor
