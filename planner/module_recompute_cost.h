#pragma once
// Private: what Megatron-Core's --recompute-modules run again before a layer's backward, per
// layer and micro-batch on one rank (compute_cost.cpp adds it to the layer's backward).

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// One recomputed module's cost: its compute (GEMMs, element-wise passes, FP8 casts), its
/// tensor-parallel collectives, and its FLOPs (counted toward HFU).
struct ModuleRecompute {
  double compute_seconds = 0;
  double tp_seconds = 0;
  double flops = 0;
};

/// mla_up_proj: the q and kv up projections, Q, K and V written again, the latents' tp all-gathers
/// under sequence parallelism.
ModuleRecompute mla_up_projection_recompute(const models::TransformerConfig& model,
                                            const models::ClusterConfig& cluster,
                                            const Layout& layout, const PlanOptions& options);
/// mlp: a dense layer's norm and MLP forward again.
ModuleRecompute dense_mlp_recompute(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool moe_layer);
/// shared_experts: an MoE layer's shared experts' MLP again.
ModuleRecompute shared_experts_recompute(const models::TransformerConfig& model,
                                         const models::ClusterConfig& cluster, const Layout& layout,
                                         const PlanOptions& options, bool moe_layer);
/// moe: an MoE layer's whole block again (router, experts, permutations, etp collectives).
ModuleRecompute moe_block_recompute(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool moe_layer);

}  // namespace meshplan::planner
