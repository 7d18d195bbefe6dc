#pragma once
// Private: compute-time functions of the cost model.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Datasheet peak for the cluster's training precision, FLOP/s.
double peak_flops_per_second(const models::ClusterConfig& cluster);

/// Attention core (scores, softmax, attention-times-values) of one layer's forward for one
/// micro-batch on one rank: its rank_micro_batch_tokens queries against the whole sequence.
double attention_forward_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options);

/// The attention core's backward time over its forward time (flash or unfused, options).
double attention_backward_to_forward(const PlanOptions& options);

/// One micro-batch through chunk `chunk` of pipeline stage `stage`.
ChunkCost chunk_cost(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage,
                     int64_t chunk);

/// Optimizer step (fused Adam, memory-bound) over `parameters_updated` parameters on one rank
/// whose gradients hold `grad_element_bytes` each (grad_reduce_element_bytes).
double optimizer_step_seconds(const models::ClusterConfig& cluster, int64_t parameters_updated,
                              int64_t grad_element_bytes);

}  // namespace meshplan::planner
