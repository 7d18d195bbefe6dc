#pragma once
// Private: compute-time functions of the cost model.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Datasheet peak for the cluster's training precision, FLOP/s.
double peak_flops_per_second(const models::ClusterConfig& cluster);

/// Time of memory-bound passes moving `bytes` through HBM, at the cluster's hbm_efficiency of
/// its datasheet bandwidth.
double memory_seconds(const models::ClusterConfig& cluster, double bytes);

/// HBM bytes the recompute of Megatron-Core's --recompute-modules other than core_attn moves in
/// one layer's backward per micro-batch on one rank (0 unless recompute selective names them):
/// moe_act re-runs the routed experts' activation, layernorm each separate norm
/// (separate_norms_per_layer).
double selective_module_recompute_bytes(const models::TransformerConfig& model,
                                        const models::ClusterConfig& cluster, const Layout& layout,
                                        bool moe_layer);

/// Attention core (scores, softmax, attention-times-values) of one layer's forward for one
/// micro-batch on one rank: its rank_micro_batch_tokens queries against the whole sequence, or
/// on a `windowed_layer` (LayerKind::windowed) against the keys of its window.
double attention_forward_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, bool windowed_layer);

/// Tensor-parallel collectives of one dense block per micro-batch and direction: the
/// row-parallel outputs' reductions (all-reduce forward, or reduce-scatter under sequence
/// parallelism) and the column-parallel inputs' collectives (the input gradient's all-reduce
/// backward, or the forward all-gather and the gradient's reduce-scatter). A sequential block has
/// 2 and 2 (Shoeybi et al. 2019, Fig. 4); a parallel block (model.parallel_residual) sums its two
/// outputs before one reduction (EleutherAI/gpt-neox megatron/model/transformer.py,
/// ParallelTransformerLayer with gpt_j_residual: `parallel_output=True` for attention and MLP,
/// one `reduce_from_model_parallel_region`, or `reduce_scatter_to_sequence_parallel_region`
/// under sequence parallelism), while its two normed inputs keep their own: 1 and 2.
struct DenseTpCalls {
  int64_t output_reductions = 2;
  int64_t input_collectives = 2;
};
DenseTpCalls dense_tp_calls_per_layer(const models::TransformerConfig& model);

/// The attention core's backward time over its forward time (flash or unfused, options).
double attention_backward_to_forward(const PlanOptions& options);

/// Bytes per parameter on one rank (its tp/ep shard, before data-parallel sharding) that the
/// framework's gradient accumulation moves through HBM per micro-batch, averaged over the
/// step's micro-batches, beyond the weight-gradient GEMMs that produce the gradients: 0 where
/// the GEMM accumulates into the gradient buffer itself (megatron, meshplan), the in-place adds
/// and bucket copies of DeepSpeed and PyTorch otherwise. Charged with the weight gradients.
double gradient_accumulation_bytes_per_parameter(const models::ClusterConfig& cluster,
                                                 const Layout& layout, const PlanOptions& options);

/// Distributed saved activations (PlanOptions::distribute_saved_activations) per layer and
/// micro-batch on one rank, all on the compute stream; zero unless on under recompute full.
/// X = T h e, the layer input's bytes, t = tp:
/// - forward_seconds: after the checkpointed forward, the rank's 1/t of X copied out (Megatron-LM
///   tensor_parallel/utils.py split_tensor_into_1d_equal_chunks(new_buffer=True); DeepSpeed
///   checkpointing.py partition_activations, narrow(...).clone()): read X / t, write X / t;
/// - backward_seconds: DeepSpeed's gather_partitioned_activations fills a torch.zeros of X and
///   copies its part in (write X, read and write X / t); Megatron's gather_split_1d_tensor
///   gathers into torch.empty: nothing;
/// - gather_seconds: the all-gather of X over tp before the recompute, waited for (DeepSpeed
///   dist.all_gather, Megatron all_gather_into_tensor, both synchronous).
struct SavedInputSplit {
  double forward_seconds = 0;
  double backward_seconds = 0;
  double gather_seconds = 0;
};
SavedInputSplit saved_input_split(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// An MoE layer's token permutations, forward bytes read plus written per micro-batch on one
/// rank: the permute before the dispatch and the unpermute after the combine (2 x 2 T k h e /
/// sp) and, with more than one local expert, the alltoall dispatcher's sort by local expert and
/// its unsort over the copies gathered from the etp ranks (2 x 2 etp T k h e / sp); the flex
/// dispatcher has the first pair only (expand after its dispatch, fold before its combine).
double moe_permute_bytes(const models::TransformerConfig& model,
                         const models::ClusterConfig& cluster, const Layout& layout,
                         const PlanOptions& options);

/// One micro-batch through chunk `chunk` of pipeline stage `stage`.
ChunkCost chunk_cost(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage,
                     int64_t chunk);

/// Bytes one rank's memory-bound passes move, forward and backward.
struct PassBytes {
  double forward = 0;
  double backward = 0;
};

/// Bytes per token of one rank that torchtitan's eager (uncompiled) transformer block moves in
/// the element-wise kernels that differ from the fused count: rotary embedding (rope models),
/// SwiGLU (swiglu models) and the GQA key/value repeat (fewer kv heads than query heads); zero
/// for the others. Widths are the rank's: query a d / tp, key g d / tp, MLP f / tp.
PassBytes eager_elementwise_bytes_per_token(const models::TransformerConfig& model, int64_t tp,
                                            double element_bytes);

/// Bytes PyTorch FSDP's own memory passes move per FSDP unit (a transformer block) and
/// micro-batch under ZeRO-3, on the compute stream or on a side stream beside it, for
/// `unit_parameters` parameters on the rank before data-parallel sharding, held unsharded in
/// param_element_bytes (their gradients too), a reduce-scatter in reduce_element_bytes over
/// `shard_ranks` ranks. fsdp_version 2 (fully_shard): the all-gather copy-out forward and
/// backward, the reduce-scatter copy-in backward; 1 (FSDP1): the backward's concatenation of the
/// parameter views' gradients and the pre-divide of the unsharded gradient (when shard_ranks >
/// 1). `gathered_saving_bytes`: what the gathered unit holds less than param_element_bytes per
/// parameter (torchao's float8 all-gather, fsdp_float8_gather_saving_bytes), which FSDP2's
/// copy-out does not move.
PassBytes fsdp_unit_pass_bytes(int fsdp_version, double unit_parameters, double param_element_bytes,
                               double reduce_element_bytes, int64_t shard_ranks,
                               double gathered_saving_bytes = 0.0);

/// Bytes per hidden element that one of torchtitan's hand-written RMSNorms (model.norm_type
/// "rmsnorm", norm_kernel eager) moves run eager, forward and backward, for activations of
/// element_bytes; the fused kernel's are read-and-write, 2 element_bytes each way forward.
PassBytes eager_rmsnorm_bytes_per_element(double element_bytes);

/// Bytes of the input embedding's memory-bound passes for one micro-batch on one rank: the
/// lookup, position embedding, layout copies and dropout forward; their gradients, the dense
/// embedding-table gradient and (Megatron) its accumulation into main_grad backward.
PassBytes embedding_bytes(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options);

}  // namespace meshplan::planner
