#pragma once
// Multi-head latent attention (DeepSeek-V2, Sec. 2.1; DeepSeek-V3, Sec. 2.1.1) on one rank, as
// Megatron-Core's MLASelfAttention (multi_latent_attention.py, get_query_key_value_tensors)
// computes it, from the attention block's normed input x to the heads' outputs before the
// output projection:
//   queries  c_q = W_DQ x, q = W_UQ RMSNorm(c_q)   (q = W_Q x when q_lora_rank = 0)
//   keys     [c_kv | k_rope] = W_DKV x, [k_nope | v] = W_UKV RMSNorm(c_kv)
//   per head q = [q_nope | RoPE(q_rope)], k = [k_nope | RoPE(k_rope)] (one k_rope per token,
//            shared by every head), causal softmax(q k^T / sqrt(DN + DR)) v.
// Tensor parallel as Megatron-Core: heads split over tp (W_UQ, W_UKV column-parallel), the down
// projections and latent norms whole on every rank (TELinear parallel_mode "duplicated"), run on
// the rank's own residual rows. With sequence parallelism the normed latents and k_rope are
// all-gathered along the sequence before the up projections (their backward reduce-scatters)
// and the duplicated weights' gradients are partial, all-reduced over tp with the other
// replicated ones (finalize_model_grads.py, param.sequence_parallel). Without it the latents'
// and k_rope's input gradients are all-reduced over tp: Megatron-Core all-reduces the latents'
// in its column-parallel up projections, and k_rope's as Megatron-LM pull request 6839 ("Fix
// MLA shared K rope grad for TP>1 and SP=False") adds, since each rank's heads give only part
// of it.
//
// The value heads are zero-padded to the query/key head size DN + DR (DV <= DN + DR), so the
// attention core is ops/attention.h's, or with cp > 1 context_parallel.h's ring, which sends the
// value heads unpadded as Transformer Engine does (Megatron-Core's THD path pads V the same way).
// The backward is split in B (input gradient, latent-norm gains) and W (the five projections'
// weight gradients); gradients add (+=).
//
// Shape letters: N = T B rows, N_local residual rows on this rank, C channels, NH heads on this
// rank, RQ, RKV, DN, DR, DV, QUP, KVUP, AO as in shard_dims.h; HQ = DN + DR.

#include "memory_tracker.h"
#include "parameters.h"
#include "tensor_parallel.h"

namespace meshplan::executor {

struct MlaActivations {
  Tensor q_c, q_rstd, q_cn;     // (N_local, RQ) before and after the norm, (N_local); RQ > 0
  Tensor kv_c, kv_rstd, kv_cn;  // (N_local, RKV), (N_local), (N_local, RKV)
  Tensor qkv;                   // (N, 3 NH HQ): [queries | keys | zero-padded values], rotated
  Tensor att;                   // (B, NH, T, T) probabilities; empty when recomputed
  Tensor k_rope;                // (N, DR) rotated rotary key, kept while qkv is dropped
  // Output gradients of the projections, kept by B for W.
  Tensor d_q;       // (N, QUP), before RoPE's rotation
  Tensor d_kv;      // (N, KVUP)
  Tensor d_q_c;     // (N_local, RQ)
  Tensor d_kv_c;    // (N_local, RKV)
  Tensor d_k_rope;  // (N_local, DR), before the rotation
};

/// att_out (N, AO); saves acts; x (N_local, C), the block's normed input. `save_probabilities`
/// false drops the probabilities (the backward recomputes them).
void mla_forward(float* att_out, MlaActivations* acts, const float* x, const LayerWeights& w,
                 bool save_probabilities, const RankContext& ctx);

/// Megatron-Core's --recompute-modules mla_up_proj (multi_latent_attention.py
/// qkv_up_checkpoint, d98e8a64): after the forward Q, K and V go; the normed latents stay, and
/// so does the rotary key, an input of the checkpointed function (gathered, here kept rotated).
void mla_drop_up_projections(MlaActivations* acts, const RankContext& ctx);
/// Before B: the up projections again (their sequence-parallel latent gathers included) and the
/// queries' rotation, rebuilding acts->qkv bit for bit. x (N_local, C) as in the forward.
void mla_recompute_up_projections(MlaActivations* acts, const float* x, const LayerWeights& w,
                                  const RankContext& ctx);

/// dx (N_local, C) +=; the latent norms' gains += into grads; keeps the projections' output
/// gradients for mla_backward_weight. d_att_out (N, AO).
void mla_backward_input(float* dx, LayerWeights& grads, MlaActivations* acts,
                        const float* d_att_out, const LayerWeights& w, const RankContext& ctx);

/// The five projections' weight gradients += from what B kept; x (N_local, C) as in the forward.
void mla_backward_weight(LayerWeights& grads, MlaActivations* acts, const float* x,
                         const RankContext& ctx);

}  // namespace meshplan::executor
