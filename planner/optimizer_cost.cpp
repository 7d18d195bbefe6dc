// HBM bytes and time of one optimizer step: Adam(W) as each implementation runs it, plus the
// passes each framework makes around it (gradient copies, norm, clipping, weight copy-back).

#include "optimizer_cost.h"

#include "compute_cost.h"
#include "model_shape.h"

namespace meshplan::planner {

double adam_bytes_per_parameter(OptimizerImpl impl, double grad_element_bytes, bool weight_decay) {
  const double g = grad_element_bytes;
  if (impl == OptimizerImpl::kFused) {
    // One kernel (Apex apex/optimizers/fused_adam.py and Transformer Engine's FusedAdam,
    // multi_tensor_adam over the lists [g, p, m, v]; torch's _fused_adamw_ the same): reads the
    // gradient g and reads and writes the fp32 weights p, m and v, decay included: G + 24
    // (Kingma & Ba 2015, Alg. 1; Loshchilov & Hutter 2019, Alg. 2 for the decay).
    return g + 24.0;
  }
  // Unfused, one kernel per op over fp32 p, m, v (4 bytes) and the gradient (G):
  // torch.optim.AdamW's _multi_tensor_adamw (torch/optim/adamw.py, torch 2.1-2.5; its
  // _single_tensor_adamw runs the same ops tensor by tensor): _foreach_mul_(params, 1 - lr wd)
  // (read 4, write 4; only with weight decay), _foreach_lerp_(m, g) (read 4 + G, write 4),
  // _foreach_mul_(v, beta2) (8), _foreach_addcmul_(v, g, g) (read 4 + G, write 4: the one
  // gradient read serves both arguments), then without capturable the denominator
  // _foreach_sqrt(v) (read 4, write 4 into a new list), _foreach_div_ (8), _foreach_add_(eps)
  // (8) and _foreach_addcdiv_(p, m, denom) (read 12, write 4): 64 + 2 G, + 8 with decay.
  double bytes = 64.0 + 2.0 * g + (weight_decay ? 8.0 : 0.0);
  if (impl == OptimizerImpl::kComposer) {
    // Composer's DecoupledAdamW.adamw (composer/optim/decoupled_weight_decay.py at v0.16.4):
    // exp_avg.mul_(beta1).add_(grad, ...) is two passes where torch's lerp_ is one (+8), the
    // rest as above (param.mul_ only when weight_decay != 0).
    bytes += 8.0;
  }
  return bytes;
}

OptimizerBytes optimizer_step_bytes(int64_t grad_element_bytes, int64_t element_bytes,
                                    OptimizerPasses passes, OptimizerImpl impl, bool weight_decay,
                                    int64_t averaging_ranks) {
  const double g = static_cast<double>(grad_element_bytes);
  const bool mixed = element_bytes < 4;
  const double weights_written = mixed ? static_cast<double>(element_bytes) : 0.0;
  if (passes == OptimizerPasses::kFsdp) {
    // PyTorch FSDP steps on fp32 sharded gradients whatever the reduce dtype: FSDP1 casts the
    // reduce-scatter output to the parameter dtype (torch/distributed/fsdp/_runtime_utils.py
    // _cast_grad_to_param_dtype), FSDP2 too (_fsdp_collectives.py foreach_reduce,
    // _to_dtype_if_needed(reduce_output, orig_dtype)). Clipping before the step: torchtitan's
    // torch.nn.utils.clip_grad_norm_(..., foreach=True) (train.py at 1ea476e9f line 297) and
    // FSDP1's FullyShardedDataParallel.clip_grad_norm_ (Composer's gradient_clipping) read every
    // gradient for the norm, then multiply all of them by the clamped coefficient,
    // unconditionally (read 4, write 4): 12. The step writes no 16-bit copy: FSDP casts the
    // fp32 shard in each all-gather's copy-in.
    return {12.0 + adam_bytes_per_parameter(impl, 4.0, weight_decay), 0.0};
  }
  if (passes == OptimizerPasses::kAdamOnly) {
    return {adam_bytes_per_parameter(impl, g, weight_decay) + weights_written, 0.0};
  }
  // Megatron-LM at 358e5f07: training.py line 1251 zero_grad_buffer() before every step, i.e.
  // param_and_grad_buffer.py line 898 grad_data.zero_() over the rank's whole buffer (write G).
  // Mixed precision (optimizer.py prepare_grads / step_with_ready_grads, distrib_optimizer.py
  // lines 2398 and 2454): the shard's main grad is shard_model_grad.float() (read G, write 4;
  // an fp32 buffer is aliased), Adam reads that fp32 grad, and the updated fp32 main params are
  // copied into the model params (read 4, write e). Clipping (--clip-grad, default 1.0):
  // clip_grads.py get_grad_norm_fp32's multi_tensor_l2norm reads the fp32 grads (4); the scale
  // pass runs only when the norm exceeds the threshold and is not counted. In fp32 training
  // (FP32Optimizer) the grads and weights are the buffers themselves: norm + Adam only.
  // Averaging over dp x cp > 1 ranks: before each bucket's collective Megatron-Core scales the
  // bucket in place on the compute stream, `bucket.grad_data *= bucket.gradient_scaling_factor`
  // (core/distributed/param_and_grad_buffer.py start_grad_sync; the factor is 1 / (dp x cp)
  // unless --ddp-average-in-collective, default False, for the expert buckets too:
  // distributed_data_parallel.py expert_gradient_scaling_factor), and Megatron-LM 2021 divided its
  // buffer before the all-reduce (megatron/model/distributed.py allreduce_gradients, `buffer_.data
  // /= data_parallel_world_size`): read G, write G over the whole buffer.
  const double grad_copy = mixed && grad_element_bytes < 4 ? g + 4.0 : 0.0;
  const double adam_grad = mixed ? 4.0 : g;
  const double main_to_model = mixed ? 4.0 + weights_written : 0.0;
  const double grad_scale = averaging_ranks > 1 ? 2.0 * g : 0.0;
  return {grad_copy + 4.0 + adam_bytes_per_parameter(impl, adam_grad, weight_decay) + main_to_model,
          g + grad_scale};
}

double optimizer_step_seconds(const models::ClusterConfig& cluster, int64_t parameters_updated,
                              int64_t grad_element_bytes, int64_t grad_buffer_parameters,
                              OptimizerPasses passes, const PlanOptions& options,
                              int64_t averaging_ranks) {
  const OptimizerBytes bytes =
      optimizer_step_bytes(grad_element_bytes, element_bytes(cluster), passes,
                           options.optimizer_impl, options.weight_decay, averaging_ranks);
  return memory_seconds(
      cluster, bytes.per_updated_parameter * static_cast<double>(parameters_updated) +
                   bytes.per_grad_buffer_parameter * static_cast<double>(grad_buffer_parameters));
}

}  // namespace meshplan::planner
