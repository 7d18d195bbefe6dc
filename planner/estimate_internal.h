#pragma once
// Private: pieces of estimate_plan shared with the search and the collective inventory.

#include <cstdint>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Distance in global ranks between neighbours of a group under the layout's placement.
int64_t group_stride(const Layout& layout, CommGroup group);

/// Bytes of one stage-to-stage activation (or gradient) send: T h e, / t with sequence
/// parallelism.
int64_t pipeline_message_bytes(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout);

/// estimate_plan; the search skips the per-collective inventory (with_collectives = false).
PlanEstimate estimate_plan_internal(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool with_collectives);

/// Every collective each stage's ranks issue in one step (the list in cost_model.h).
std::vector<CollectiveTraffic> collective_inventory(const models::TransformerConfig& model,
                                                    const models::ClusterConfig& cluster,
                                                    const Layout& layout);

}  // namespace meshplan::planner
