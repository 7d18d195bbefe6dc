#pragma once
// Per-head RMSNorm of queries and keys (qk_norm): Qwen3's and Gemma 3's q_norm and k_norm
// (transformers Qwen3Attention, Gemma3Attention: an RMSNorm over the last dim, head_dim, after
// q_proj / k_proj and before the rotary embedding; Megatron-Core's q_layernorm and k_layernorm,
// TENorm of hidden size kv_channels, SelfAttention.get_query_key_value_tensors at d98e8a64). One
// gain of HS is shared by every query head, another by every key head. It works in place on the
// query and key columns of a fused QKV row ([NH query heads | KVH key heads | KVH value heads],
// each HS wide); the value heads are left as they are. The forward saves the pre-norm query and
// key heads and each head's rstd; the backward adds (+=) into the gains' gradients.
//
// Shape letters: N rows (T*B tokens), NH query and KVH key heads on this rank, HS head size,
// QKV the fused row's width.

namespace meshplan::executor {

/// qkv (N, QKV): the first (NH + KVH) HS columns of each row normalised in place, query heads by
/// q_gain (HS), key heads by k_gain (HS). Saves raw (N, (NH + KVH) HS), the heads before the
/// norm, and rstd (N, NH + KVH).
void head_norm_forward(float* qkv, float* raw, float* rstd, const float* q_gain,
                       const float* k_gain, int N, int NH, int KVH, int HS, int QKV);

/// d_qkv (N, QKV): on entry the gradient of the normalised query and key columns, on return the
/// gradient of the heads before the norm (value columns untouched); dq_gain, dk_gain (HS) +=.
/// raw, rstd as the forward saved them; q_gain, k_gain (HS).
void head_norm_backward(float* d_qkv, float* dq_gain, float* dk_gain, const float* raw,
                        const float* rstd, const float* q_gain, const float* k_gain, int N, int NH,
                        int KVH, int HS, int QKV);

}  // namespace meshplan::executor
