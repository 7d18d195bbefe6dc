#pragma once
// Private: HBM bytes and time of one optimizer step (planner/optimizer_cost.cpp).

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// HBM bytes of one optimizer step: per parameter the rank updates, and per parameter of its
/// (unsharded) gradient buffer.
struct OptimizerBytes {
  double per_updated_parameter = 0;
  double per_grad_buffer_parameter = 0;
};

/// HBM bytes per parameter of one Adam(W) update of fp32 weights and moments from gradients of
/// grad_element_bytes, as `impl` runs it (weight_decay: an unfused AdamW's decay pass).
double adam_bytes_per_parameter(OptimizerImpl impl, double grad_element_bytes, bool weight_decay);

/// Which passes a framework runs around the Adam update each step.
enum class OptimizerPasses {
  kAdamOnly,  // the update alone (DeepSpeed: its passes are not sourced here)
  kMegatron,  // Megatron-Core's DDP and mixed-precision optimizer, zero <= 1
  kFsdp,      // PyTorch FSDP: gradient clipping over fp32 sharded gradients
};

/// Bytes of one optimizer step: `impl`'s Adam over gradients of grad_element_bytes with weights
/// of element_bytes, plus the framework's passes: kMegatron its grad-buffer zeroing, its
/// scaling of the buffer before the data-parallel collectives when they average over
/// averaging_ranks > 1 ranks, grad copy, grad-norm and main-to-model weight copy; kFsdp the
/// clipping's norm and scale.
OptimizerBytes optimizer_step_bytes(int64_t grad_element_bytes, int64_t element_bytes,
                                    OptimizerPasses passes,
                                    OptimizerImpl impl = OptimizerImpl::kFused,
                                    bool weight_decay = true, int64_t averaging_ranks = 1);

/// Optimizer step (memory-bound) over `parameters_updated` parameters on one rank whose
/// gradients hold `grad_element_bytes` each (grad_reduce_element_bytes) and whose gradient
/// buffer holds `grad_buffer_parameters`, averaged over averaging_ranks (dp x cp) ranks
/// (optimizer_step_bytes).
double optimizer_step_seconds(const models::ClusterConfig& cluster, int64_t parameters_updated,
                              int64_t grad_element_bytes, int64_t grad_buffer_parameters,
                              OptimizerPasses passes, const PlanOptions& options,
                              int64_t averaging_ranks);

}  // namespace meshplan::planner
