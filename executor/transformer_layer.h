#pragma once
// One pre-norm transformer block on one rank, tensor-parallel as in Megatron-LM (Shoeybi et al.
// 2019, Sec. 3): column-parallel QKV and first MLP projection, row-parallel attention output and
// second MLP projection, with sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) when
// the plan asks for it:
//   x -> norm1 -> [AG] -> QKV -> RoPE -> causal attention -> proj -> [AR | RS] -> +x = r
//   r -> norm2 -> [AG] -> fc1 -> GELU | gated unit -> fc2 -> [AR | RS] -> +r = out
// with qk_norm a per-head RMSNorm of queries and keys between QKV and RoPE (ops/head_norm.h),
// and with sandwich_norm (Gemma 2/3) one more norm on each branch's reduced output before its
// residual add: proj -> [AR | RS] -> post_attn_norm -> +x, fc2 -> [AR | RS] -> post_mlp_norm -> +r;
// with attention_sinks each head's softmax takes its sink logit (ops/attention.h), the rank's
// heads' sinks held and their gradients whole on it (no tp reduction).
// or, in a mixture-of-experts block (tp 1), r -> norm2 -> moe_layer.h's MLP -> +r = out; in a
// parallel block (model.parallel_residual, GPT-NeoX's gpt_j_residual) both branches read x and
// share one reduction:
//   x -> norm1 -> [AG] -> QKV .. proj = p1;  x -> norm2 -> [AG] -> fc1 .. fc2 = p2
//   p1 + p2 -> [AR | RS] -> +x = out
// with
// multi-head latent attention, norm1 -> mla_attention.h's heads -> proj replaces QKV..proj.
// The backward is split as zero-bubble schedules need (Qi et al. 2023, Sec. 2): B computes the
// input gradient (and the cheap norm and row-parallel bias gradients from the local rows), W the
// four projections' weight gradients. Gradients add (+=) into their buffers.
//
// Shape letters: N = T B rows, N_local residual rows on this rank, C channels, NH, KVH, HS, QKV,
// F, FC1 as in shard_dims.h.

#include <cstdint>

#include "memory_tracker.h"
#include "mla_attention.h"
#include "moe_layer.h"
#include "parameters.h"
#include "tensor_parallel.h"

namespace meshplan::executor {

struct LayerActivations {
  Tensor ln1_out, ln1_mean, ln1_rstd;  // (N_local, C), (N_local), (N_local)
  Tensor qkv;                          // (N, QKV), after RoPE
  Tensor qk_raw, qk_rstd;              // qk_norm: (N, (NH + KVH) HS) heads before it, (N, NH + KVH)
  Tensor att;                          // (B, NH, T, T) probabilities; empty when recomputed
  Tensor att_out;                      // (N, NH HS)
  Tensor residual2;                    // (N_local, C)
  // sandwich_norm: the attention and MLP outputs (N_local, C) the post norms read, their stats.
  Tensor post_attn_in, post_attn_mean, post_attn_rstd;
  Tensor post_mlp_in, post_mlp_mean, post_mlp_rstd;
  Tensor ln2_out, ln2_mean, ln2_rstd;  // (N_local, C), (N_local), (N_local)
  Tensor fc1_out;                      // (N, FC1)
  Tensor act_out;                      // (N, F)
  MoeActivations moe;                  // an MoE block's MLP (moe_layer.h) instead of fc1/fc2
  MlaActivations mla;                  // latent attention (mla_attention.h) instead of qkv/att
  // Output gradients of the four projections, kept by B for W.
  Tensor d_qkv;   // (N, QKV), before RoPE
  Tensor d_proj;  // (N, C)
  Tensor d_fc1;   // (N, FC1)
  Tensor d_fc2;   // (N, C)
};

/// out (N_local, C); saves acts; inp (N_local, C). `save_probabilities` false drops the
/// attention probabilities (selective recompute, or the flash-attention memory plan).
void layer_forward(float* out, LayerActivations* acts, const float* inp, const LayerWeights& w,
                   bool save_probabilities, const RankContext& ctx);

/// Megatron-Core's --recompute-modules beyond the attention core (planner::RecomputeModule
/// flags in `modules`; transformer_layer.py, multi_latent_attention.py, experts.py at
/// d98e8a64), after the layer's forward: drops what they rebuild before B.
///   mlp (dense layers): the pre-MLP norm's output and statistics, fc1's output and the
///     activation (the checkpointed MLP keeps its input, residual2);
///   layernorm: the output and statistics of each norm that is a module of its own, an MoE
///     layer's pre-MLP norm and a latent-attention layer's input norm (TE fuses the others
///     into the following linear layer; planner::separate_norms_per_layer);
///   moe_act: the routed experts' activation output (the second expert GEMM's input);
///   mla_up_proj: Q, K and V (mla_drop_up_projections);
///   shared_experts: an MoE layer's shared experts' fc1 output and activation;
///   moe: all an MoE layer's MoE block keeps (its input, the pre-MLP norm's output, stays).
/// The attention core (core_attn) is layer_forward's `save_probabilities`.
void drop_module_activations(LayerActivations* acts, const LayerWeights& w, uint32_t modules,
                             const RankContext& ctx);

/// Before B: rebuilds what drop_module_activations dropped, from the layer input `inp` and what
/// stayed, running their forward again with its tensor-parallel collectives (the recomputed MLP
/// reduces its output again, as the checkpointed module does, and discards it).
void recompute_module_activations(LayerActivations* acts, const float* inp, const LayerWeights& w,
                                  uint32_t modules, const RankContext& ctx);

/// dinp (N_local, C) +=; norm and row-parallel bias gradients += into `grads`; keeps the
/// projections' output gradients in acts for layer_backward_weight. dout (N_local, C).
void layer_backward_input(float* dinp, LayerWeights& grads, LayerActivations* acts,
                          const float* dout, const float* inp, const LayerWeights& w,
                          const RankContext& ctx);

/// grads' projection weights (and column-parallel biases) += from what B kept; frees acts.
void layer_backward_weight(LayerWeights& grads, LayerActivations* acts, const RankContext& ctx);

}  // namespace meshplan::executor
