#pragma once
// Private: pieces of estimate_plan shared with the search and the collective inventory.

#include <cstdint>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Distance in global ranks between neighbours of a group under the layout's placement.
int64_t group_stride(const Layout& layout, CommGroup group);

/// First global rank of the group of `group` that pipeline stage `stage` and tensor-parallel
/// rank `tp_rank` belong to (for kPp: the sender of the stage -> stage + 1 transfer; for
/// kEmbedding: the first stage's rank).
int64_t group_first_rank(const Layout& layout, CommGroup group, int64_t stage, int64_t tp_rank);

/// Time of one collective of `group` issued by stage `stage`: the slowest over the stage's
/// groups (tp ranks 0 and tp - 1 bound how groups straddle node boundaries).
double stage_collective_seconds(const models::ClusterConfig& cluster, const Layout& layout,
                                CollectiveKind kind, CommGroup group, int64_t stage,
                                int64_t message_bytes);

/// Bytes of one stage-to-stage activation (`gradient` false) or gradient send: T h e, / t with
/// sequence parallelism or with scatter/gather in effect for that direction (whose receiver
/// then all-gathers T h e).
int64_t pipeline_message_bytes(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout,
                               const PlanOptions& options, bool gradient = false);

/// estimate_plan; the search skips the per-collective inventory (with_collectives = false).
PlanEstimate estimate_plan_internal(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool with_collectives);

/// Whether the layer runs torchtitan's op-level selective recompute (`selective-op`, --framework
/// fsdp): every second mm of a block re-run (compute_cost.cpp, op_sac_recompute).
bool op_level_selective_recompute(const Layout& layout, const PlanOptions& options);

/// Whether full recompute stops before the MLP's last GEMM and its tp reduce-scatter (torch
/// non-reentrant checkpoint's early stop under --framework fsdp, no dropout;
/// compute_cost.cpp checkpoint_early_stop_skip).
bool checkpoint_early_stop_skips_mlp_output(const models::TransformerConfig& model,
                                            const Layout& layout, const PlanOptions& options);

/// Every collective each stage's ranks issue in one step (the list in cost_model.h).
std::vector<CollectiveTraffic> collective_inventory(const models::TransformerConfig& model,
                                                    const models::ClusterConfig& cluster,
                                                    const Layout& layout,
                                                    const PlanOptions& options);

}  // namespace meshplan::planner
