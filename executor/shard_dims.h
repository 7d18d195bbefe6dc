#pragma once
// The sizes one rank works with: the plan's model shape after tensor-parallel sharding, in llm.c's
// shape letters. Sizes are computed here and nowhere else in the executor.

#include <string>
#include <vector>

#include "meshplan/plan_file.h"

namespace meshplan::executor {

struct ShardDims {
  int T = 0;            // sequence positions on this rank: s / cp, e.g. 32 (tiny, cp 1)
  int S = 0;            // sequence length s over all cp ranks
  int B = 0;            // sequences per micro-batch
  int C = 0;            // hidden size h, e.g. 64
  int NH = 0;           // query heads on this rank: a / tp
  int KVH = 0;          // kv heads on this rank: g / tp
  int HS = 0;           // head dim d
  int QKV = 0;          // fused QKV columns on this rank: (NH + 2 KVH) HS
  int F = 0;            // ffn channels on this rank: f / tp
  int FC1 = 0;          // first MLP projection columns on this rank: F (gelu), 2F (swiglu)
  int V = 0;            // vocabulary rows on this rank: padded V / tp (padded_vocab_size)
  int vocab_start = 0;  // first token of this rank's vocabulary shard
  int E = 0;            // routed experts of an MoE layer (0: dense model), e.g. 4 (tiny-moe)
  int E_local = 0;      // experts on this ep rank: E / ep
  int expert0 = 0;      // first expert of this ep rank: ep_rank E_local (Megatron's order)
  int K = 0;            // experts per token (top-k)
  int FE = 0;           // expert ffn channels f_e (experts are not tp-sharded here)
  int FC1E = 0;         // first expert projection columns: FE (gelu), 2 FE (swiglu)
  int FS = 0;           // shared experts' ffn channels, all of them as one MLP: S f_s (0: none)
  int FC1S = 0;         // their first projection columns: FS (gelu), 2 FS (swiglu)
  // Loss weight of one micro-batch's load-balancing loss: moe_aux_loss_coeff micro_batch /
  // global_batch (Megatron scales it by 1 / m per micro-batch and averages over dp), 0: off.
  double aux_loss_weight = 0;
  int N = 0;        // rows of a full micro-batch, T B (sequence-first: row t B + b)
  int N_local = 0;  // rows of the residual stream here: N / tp with sequence parallel, else N
  int T_local = 0;  // positions of the residual stream here: T / tp or T
  int t0 = 0;       // first position of this rank's residual rows
  int tp = 1;
  int tp_rank = 0;
  int cp = 1;
  int cp_rank = 0;
  int ep = 1;
  int ep_rank = 0;
  std::vector<int> positions;  // [T] position in the sequence of each local one (cp_positions)
  bool sequence_parallel = false;
  // Multi-head latent attention (mla_attention.h; 0 without it, where HS = DN + DR).
  int AO = 0;    // attention output columns on this rank: NH HS, NH DV with MLA
  int RQ = 0;    // q_lora_rank, e.g. 32 (tiny-mla); 0: queries are not compressed
  int RKV = 0;   // kv_lora_rank, e.g. 16
  int DN = 0;    // qk_nope_head_dim, e.g. 16
  int DR = 0;    // qk_rope_head_dim, e.g. 8: one rotary key per token, shared by all heads
  int DV = 0;    // v_head_dim, e.g. 16
  int QUP = 0;   // query up-projection columns on this rank: NH (DN + DR)
  int KVUP = 0;  // key/value up-projection columns on this rank: NH (DN + DV)
  models::TransformerConfig model;
};

/// The attention window W the ops apply (ops/attention.h) in a layer that is `windowed_layer`
/// (LayerWeights::windowed, TransformerConfig::is_windowed_layer): the model's sliding_window,
/// shorter than the sequence there; 0 (full causal attention) in any other layer.
inline int window_tokens(const ShardDims& d, bool windowed_layer) {
  return windowed_layer ? static_cast<int>(d.model.sliding_window) : 0;
}

ShardDims make_shard_dims(const planner::Plan& plan, int tp_rank, int cp_rank = 0, int ep_rank = 0);

/// The S / cp sequence positions cp rank `cp_rank` holds, in order: chunks cp_rank and
/// 2 cp - 1 - cp_rank of 2 cp equal chunks (Megatron-Core get_batch_on_this_cp_rank, causal
/// load balancing); 0..S-1 for cp = 1.
std::vector<int> cp_positions(int S, int cp, int cp_rank);

/// Everything the CPU executor cannot run, as InputError naming the plan file and field:
/// a precision other than fp32, alibi positions, the mixture-of-experts parts it does not build
/// (tp > 1 or ZeRO > 0 with experts, a shared-expert gate, a router score bias), multi-head
/// latent attention without rope, with an odd rotary head dim or with value heads wider than
/// query heads, attention soft-caps, scales or sinks with MLA or context parallelism, context
/// parallelism without rope, ZeRO 3 with interleaved chunks (vpp > 1), tensor-parallel
/// communication overlap, odd head dims with RoPE, sequences longer than the position table,
/// sizes past the kernels' int range, and any layout check_layout rejects.
/// Throws InputError "<source>: model.mtp_num_layers: ..." for a plan with multi-token
/// prediction, which no meshplan executor builds (execute calls it before any other check).
void validate_mtp_for_executor(const planner::Plan& plan, const std::string& source);
void validate_plan_for_executor(const planner::Plan& plan, const std::string& source);

}  // namespace meshplan::executor
