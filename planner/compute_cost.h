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

/// Bytes one rank's memory-bound passes move, forward and backward.
struct PassBytes {
  double forward = 0;
  double backward = 0;
};

/// Bytes the loss moves per logit element of one rank (Megatron-Core's unfused
/// vocab_parallel_cross_entropy), for logits of logits_element_bytes (2 or 4).
PassBytes cross_entropy_bytes_per_logit(double logits_element_bytes);
/// The same for the loss as the plan runs it: eager as above, or compiled (options.compile,
/// torchtitan's --training.compile): the logits read once forward, read and their gradient
/// written once backward.
PassBytes loss_bytes_per_logit(double logits_element_bytes, const PlanOptions& options);

/// Bytes of the input embedding's memory-bound passes for one micro-batch on one rank: the
/// lookup, position embedding, layout copies and dropout forward; their gradients, the dense
/// embedding-table gradient and (Megatron) its accumulation into main_grad backward.
PassBytes embedding_bytes(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options);

/// Optimizer step (fused Adam, memory-bound) over `parameters_updated` parameters on one rank
/// whose gradients hold `grad_element_bytes` each (grad_reduce_element_bytes).
double optimizer_step_seconds(const models::ClusterConfig& cluster, int64_t parameters_updated,
                              int64_t grad_element_bytes);

}  // namespace meshplan::planner
