#pragma once
// Private: memory functions of the cost model.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Activation bytes one layer stores for one micro-batch on one rank.
double activation_bytes_per_layer(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// Peak in-flight micro-batches of one stage, counted from the schedule's op list: over all
/// chunks (in units of one chunk's activations), and of its first and last chunk alone (which
/// hold the embedding output and the LM-head inputs on the first and last stage).
struct InFlight {
  int64_t all_chunks = 0;
  int64_t first_chunk = 0;
  int64_t last_chunk = 0;
};
InFlight peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                        int64_t stage);

MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, const InFlight& in_flight);

}  // namespace meshplan::planner
