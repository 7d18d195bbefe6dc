#pragma once
// Private: memory functions of the cost model.

#include <cstdint>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Bytes one layer keeps for one micro-batch between its B and W under a split schedule: the
/// inputs and output gradients of its four linear layers.
double weight_gradient_bytes_per_layer(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout);

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
  // Split (zero-bubble) schedules: the (held, waiting-for-W) micro-batch counts over the op
  // list, Pareto-maximal points only. Held ones keep all activations; waiting ones keep the
  // linear layers' inputs and output gradients until their W (Qi et al. 2023, Sec. 2, M_W).
  // Other schedules: {(all_chunks, 0)}.
  std::vector<std::pair<int64_t, int64_t>> held_and_waiting;
};
InFlight peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                        int64_t stage);

MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, const InFlight& in_flight);

}  // namespace meshplan::planner
