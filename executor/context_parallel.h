#pragma once
// Context parallelism (Megatron-Core --context-parallel-size with Transformer Engine's p2p ring,
// AttnFuncWithCPAndKVP2P): each cp rank holds two of the 2 cp chunks of every sequence
// (cp_positions) and passes K/V around the cp ring, the backward K/V again and the accumulated
// dK/dV after them: per layer cp - 1 K/V sends forward, cp - 1 K/V and cp - 1 dK/dV sends
// backward, each one rank's K/V chunk, as planner::cp_attention_comm lists them (multi-head
// latent attention's value heads without their padding, v_head_dim wide). The CPU
// reference keeps every received chunk and computes exact attention over the gathered K/V.

#include "tensor_parallel.h"

namespace meshplan::executor {

/// out (T, B, NH HS) and att (B, NH, T, S) as cp_attention_forward, for this rank's qkv (T, B,
/// QKV) after RoPE; the K/V of the other cp ranks arrive over the ring (cp - 1 sends).
void ring_attention_forward(const RankContext& ctx, float* out, float* att, const float* qkv);

/// dqkv (T, B, QKV) += the gradients of this rank's Q, K and V: K/V around the ring again (cp - 1
/// sends), then every rank's dK/dV contributions reduced onto their owner (cp - 1 sends).
/// `att` (B, NH, T, S) as saved, or null to recompute it from the gathered K/V.
void ring_attention_backward(const RankContext& ctx, float* dqkv, const float* dout,
                             const float* att, const float* qkv);

}  // namespace meshplan::executor
