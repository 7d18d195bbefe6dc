#pragma once
// Private planner helpers shared by the cost model's files.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

struct LayerParameters {
  int64_t sharded = 0;     // split over tp ranks (count per rank)
  int64_t replicated = 0;  // identical on every tp rank (norms, row-parallel biases, router)
  int64_t expert = 0;      // routed experts on this rank: E / ep of them, etp-sharded
};
using StageParameters = LayerParameters;

int64_t norm_parameters(const models::TransformerConfig& model);
/// One layer's parameters on one rank: a dense layer, or an MoE layer (`moe_layer`) whose
/// routed experts are split over ep and each sharded over etp ranks (Layout::etp: 0 means tp).
LayerParameters layer_parameters(const models::TransformerConfig& model, int64_t tp,
                                 bool moe_layer = false, int64_t ep = 1, int64_t etp = 0);
StageParameters stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                 int64_t stage, const PlanOptions& options);
/// The embedding (and learned positions) on stage 0; nothing on the other stages.
StageParameters stage_embedding_parameters(const models::TransformerConfig& model,
                                           const Layout& layout, int64_t stage,
                                           const PlanOptions& options);
/// The part of stage_parameters outside the transformer layers: the embedding (and learned
/// positions) on stage 0, the final norm and the LM head on the last stage.
StageParameters stage_outside_layer_parameters(const models::TransformerConfig& model,
                                               const Layout& layout, int64_t stage,
                                               const PlanOptions& options);

/// The multi-token-prediction module's parameters on one rank of the last pipeline stage
/// (all D depths; 0 elsewhere or without MTP): per depth eh_proj (column-parallel 2h x h / tp),
/// enorm, hnorm and final_layernorm (replicated) and one layer of mtp_layer_kind
/// (layer_parameters), plus, when pp > 1 and the embedding is untied, the stage's copy of the
/// word embedding (padded V / tp x h) that the depths look up (Megatron-Core gpt_model.py builds
/// `embedding` where `pre_process or mtp_process`; a tied model has the copy already).
StageParameters mtp_stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options);

/// The shape letters of one micro-batch on one rank, as doubles for cost formulas:
/// t tp, T tokens (micro_batch * s / cp: rank_micro_batch_tokens), h, d, a, g, f, s, e element
/// bytes, sp the sequence split (t with sequence parallelism, else 1), fc1 the first MLP
/// projection's columns (f, 2f SwiGLU). For an MoE layer (`moe_layer`) f is the width a token
/// goes through, k f_e + S f_s.
struct Shape {
  double t, tokens, h, d, a, g, f, s, e, sp, fc1;
};
Shape shape_of(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
               const Layout& layout, bool moe_layer = false);

/// Forward matmul FLOPs of one layer of kind `kind` (an MoE or dense MLP, a windowed or full
/// attention core) for `tokens` tokens, whole (not divided by tp).
struct LayerFlops {
  double qkv = 0;        // 2 T h (a + 2g) d (MLA: 2 T per down/up projection weight)
  double attention = 0;  // scores and attention-times-values: 2 * 2 T s a d (x window share)
  double output = 0;     // 2 T a d h
  double mlp = 0;        // 2 T h f * (2 gelu | 3 swiglu); MoE: f = k f_e + S f_s
  double router = 0;     // MoE: 2 T h E
  double total() const { return qkv + attention + output + mlp + router; }
};
LayerFlops layer_forward_flops(const models::TransformerConfig& model, double tokens,
                               LayerKind kind);
/// The MLP width one token goes through: f (dense), k f_e + S f_s (MoE layer).
double active_ffn_width(const models::TransformerConfig& model, bool moe_layer);
/// Norms of a layer that are modules of their own under Megatron-Core's Transformer Engine
/// layer specs (gpt_layer_specs.py, d98e8a64), not fused into the next linear layer: an MoE
/// layer's pre-MLP norm (the router and the dispatcher read its output) and a latent-attention
/// layer's input norm (the q and kv down projections read it). Their outputs are what
/// --recompute-modules layernorm drops.
inline int64_t separate_norms_per_layer(const models::TransformerConfig& model, bool moe_layer) {
  return (moe_layer ? 1 : 0) + (model.is_mla() ? 1 : 0);
}
/// Per-token widths of what multi-head latent attention moves across the tp group at its input,
/// one call each (Megatron-Core multi_latent_attention.py get_query_key_value_tensors: the down
/// projections are replicated): the query latent (the hidden state when q_lora_rank is 0), the
/// kv latent and the rotary key shared by all heads.
struct MlaLatentWidths {
  int64_t query = 0, kv = 0, rope = 0;
};
MlaLatentWidths mla_latent_widths(const models::TransformerConfig& model);
/// LM head forward FLOPs: 2 T h V.
double lm_head_forward_flops(const models::TransformerConfig& model, double tokens);

/// The routed tokens one rank's experts take in one MoE layer's forward, in bytes: T k etp / sp
/// tokens of h elements, the output of the expert-tp all-gather when etp > 1 (Megatron-Core's
/// alltoall dispatcher gathers the dispatched tokens over the etp ranks and reduce-scatters
/// them before combine); T k h e at etp = tp with sequence parallelism.
int64_t moe_tp_gather_bytes(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout);
/// One collective of kind `kind` over the expert tensor-parallel group (etp consecutive ranks)
/// on moe_tp_gather_bytes; 0 when etp is 1.
double moe_expert_tp_seconds(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             CollectiveKind kind);
/// One MoE all-to-all (dispatch or combine) of one micro-batch on stage `stage`'s ep group.
double moe_all_to_all_seconds(const models::TransformerConfig& model,
                              const models::ClusterConfig& cluster, const Layout& layout,
                              int64_t stage);
/// The token-count all-gather of one MoE layer's forward on stage `stage`'s ep group
/// (moe_token_count_bytes): latency-bound, (ep - 1) ring steps of a few bytes.
double moe_token_count_seconds(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout,
                               int64_t stage);

/// Element sizes: weights/activations/communication, and gradients (ZeRO's K=12 accounting
/// keeps gradients in the compute precision).
int64_t element_bytes(const models::ClusterConfig& cluster);
/// Bytes per element of the tensor-parallel all-gathers of a dense (non-MLA) layer's linears
/// under sequence parallelism (forward inputs, backward output gradients and input re-gathers):
/// 1 where Transformer Engine gathers the FP8 copies (--precision fp8 under megatron), else
/// element_bytes.
int64_t tp_all_gather_element_bytes(const models::ClusterConfig& cluster,
                                    const PlanOptions& options);

}  // namespace meshplan::planner
