#pragma once
// Private: memory functions of the cost model.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Activation bytes one layer stores for one micro-batch on one rank.
double activation_bytes_per_layer(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// Peak in-flight chunk-micro-batches of `stage`, counted from the schedule's op list.
int64_t peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                       int64_t stage);

MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, int64_t in_flight);

}  // namespace meshplan::planner
