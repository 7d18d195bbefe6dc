#pragma once
// Private: HBM bytes of the training loss (planner/loss_cost.cpp).

#include "compute_cost.h"

namespace meshplan::planner {

/// Bytes the loss moves per logit element of one rank (Megatron-Core's
/// vocab_parallel_cross_entropy, or the `fusion` kernels), for logits of logits_element_bytes
/// (2 or 4).
PassBytes cross_entropy_bytes_per_logit(double logits_element_bytes, CrossEntropyFusion fusion);
/// The same for the loss as the plan runs it: the above with options.cross_entropy_loss_fusion,
/// or compiled (options.compile, torchtitan's --training.compile): the logits read once forward,
/// read and their gradient written once backward.
PassBytes loss_bytes_per_logit(double logits_element_bytes, const PlanOptions& options);
/// Bytes one logit soft-cap x -> c tanh(x / c) (Gemma 2's attention scores and final logits)
/// moves per element of `element_bytes`: one fused pass when `fused` (torch.compile), else
/// transformers' three eager ops.
PassBytes softcap_bytes_per_element(double element_bytes, bool fused);

}  // namespace meshplan::planner
