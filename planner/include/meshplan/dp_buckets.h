#pragma once
// The data-parallel collectives of one pipeline stage, bucket by bucket: the one place that
// decides which ZeRO stage reduces and gathers what, when, in how many calls of how many bytes.
// The planner's estimate, its collective inventory and the simulator all read this list.
// Units: bytes, seconds.

#include <cstdint>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/layout.h"

namespace meshplan::planner {

/// `num_calls` consecutive collective calls, each on one bucket of `bytes`, of a stage's
/// data-parallel group (run-length: a 175B stage has thousands of equal DDP buckets).
struct DpBucket {
  int64_t bytes = 0;  // nccl-tests "size" of each call (see CollectiveTraffic::message_bytes)
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CommGroup group = CommGroup::kDp;
  double seconds = 0;  // one call alone: the slowest of the stage's dp groups
  int64_t num_calls = 1;
  // Per-module calls (DeepSpeed ZeRO-3): consecutive runs with the same layer_run >= 0 are the
  // modules of one run of `layers` equal layers, issued layer by layer, each run's calls spread
  // evenly over those layers (calls_in_order). -1: the run's calls follow one another.
  int64_t layer_run = -1;
  int64_t layers = 0;
  // Hybrid sharding (hybrid_sharded; FSDP2 _fsdp_collectives.py foreach_reduce): each gradient
  // call reduce-scatters over the shard group (kDpShard), then all-reduces its shard,
  // replicate_bytes, over the replicas (kDpReplicate) on the all-reduce stream after it;
  // `seconds` includes replicate_seconds, the reduce path of one call.
  int64_t replicate_bytes = 0;
  double replicate_seconds = 0;
};

/// A list's calls one at a time (num_calls 1), in the order they are issued: run after run,
/// except that the runs of one layer_run interleave: in layer k of its L, each of them makes
/// floor((k + 1) n / L) - floor(k n / L) of its n calls, in list order. For DeepSpeed's
/// forward gathers (n = L) that is module 0, 1, ..., then the next layer's; the totals are the
/// runs'. What the replay gathers, a call per bucket, in (simulator/plan_input.cpp).
std::vector<DpBucket> calls_in_order(const std::vector<DpBucket>& runs);

/// A stage's data-parallel calls, by when they run, over the dp x cp gradient group
/// (grad_group_size; "dp" below means that group, and under hybrid sharding the ZeRO-3 calls
/// are over its shard group, zero_shard_group_size). Empty lists when dp * cp = 1.
struct DpBuckets {
  // Once per step, as the last backward fills them: ZeRO-0 all-reduce of the unpadded
  // gradients (PyTorch DDP, Li et al. 2020, Sec. 3.2.3), ZeRO-1 reduce-scatter of the
  // dp-padded ones (Rajbhandari et al. 2020, Sec. 5.1).
  std::vector<DpBucket> step_grad;
  // Once per step after the optimizer: ZeRO-1/2 all-gather of the updated parameters, in the
  // buckets their gradients were reduce-scattered in (ZeRO-2: the chunk list, vpp times).
  std::vector<DpBucket> step_param;
  // After each backward op of a chunk (every micro-batch), 1/vpp of the stage: ZeRO-2
  // reduce-scatter in bucket_bytes buckets (ibid. Sec. 5.2, DeepSpeed's reduce_bucket_size),
  // ZeRO-3 in one bucket per layer, an even split of the chunk's dp blocks over its layers
  // (ibid. Sec. 7.2.2; PyTorch FSDP wraps each transformer block as one unit and, gradient
  // accumulation left at its default, reduce-scatters every micro-batch's backward:
  // docs.pytorch.org/docs/stable/notes/fsdp.html, pytorch/pytorch#126166).
  std::vector<DpBucket> chunk_grad;
  // Before each forward op of a chunk (and, as chunk_param_backward, before each backward op
  // except under DeepSpeed): ZeRO-3 all-gather, one per layer (FSDP: "layer 0 all-gather ->
  // layer 0 forward compute -> layer 1 all-gather", and again before the backward; FSDP notes,
  // ibid.); under DeepSpeed one per module that holds a partitioned parameter
  // (deepspeed_gathered_module_elements), and its ZeRO-3 gradients in reduce_bucket_size
  // buckets.
  std::vector<DpBucket> chunk_param;
  // Before each backward op of a chunk (its recompute included): chunk_param again; empty under
  // torchtitan's pipelining (zero3_gathers_once_per_step: kept gathered from the forward); under
  // DeepSpeed, whose coordinator keeps some modules gathered from their forward (reuse
  // within stage3_max_reuse_distance) and gathers others twice under full recompute (the
  // recomputed forward, then the backward): each module's calls as deepspeed_zero3_trace counts
  // them (backward_module_gathers), in the forward's module sizes.
  std::vector<DpBucket> chunk_param_backward;
  // PyTorch FSDP (framework fsdp, ZeRO 3): the parameters outside the transformer layers
  // (stage_outside_layer_parameters: embedding, final norm, LM head; 1/vpp of them per chunk
  // op) are the root module's own unit, not spread over the layers' units. The root is
  // gathered before the chunk's forward and, not resharded after it, not again for the
  // backward (FSDP1 _runtime_utils.py _post_forward_reshard: the root's parameters are kept
  // "with the intention that they are immediately used for backward computation"; FSDP2
  // _fsdp_state.py _lazy_init: the root's post_forward_mesh_info = None); its gradient is
  // reduce-scattered after the whole backward, once the embedding's gradient is ready (the
  // root's post-backward). chunk_root_param: at most one all-gather per chunk forward op;
  // chunk_root_grad: at most one reduce-scatter per gradient op, after chunk_grad.
  std::vector<DpBucket> chunk_root_param;
  std::vector<DpBucket> chunk_root_grad;
};

/// ZeRO shards evenly over dp: ceil(n / dp) * dp elements (DDP's all-reduce is not padded).
int64_t zero_padded_count(int64_t count, int64_t dp);

/// Elements of a stage's flat gradient buffer holding `count` parameters, the buffer every
/// data-parallel call of dp_buckets covers: `count` unless ZeRO shards it
/// (zero_shards_optimizer); ZeRO 1 pads to whole blocks of dp elements, one element per rank
/// (zero_padded_count); ZeRO 2-3, which reduce per model chunk, to whole blocks in each of the
/// vpp equal chunk shares, a multiple of dp * vpp.
int64_t dp_buffer_count(const Layout& layout, int64_t count);

/// Bytes of a full bucket: `bucket_bytes` rounded down to whole elements, under ZeRO to whole
/// blocks of dp elements so each bucket reduce-scatters in dp equal parts, and at least one.
/// (Megatron-LM pads each bucket's end up to a multiple of dp instead,
/// param_and_grad_buffer.py `_pad_end_of_bucket_if_needed`; rounding down keeps the buffer
/// padded once.)
int64_t dp_full_bucket_bytes(const Layout& layout, int64_t element_bytes, int64_t bucket_bytes);

/// Whether a ZeRO 1-2 stage's gradient buckets are all-reduced over dp rather than reduced at a
/// reduce-scatter's bytes: DeepSpeed's (framework deepspeed, zero 1 or 2) unless
/// options.deepspeed_grad_all_reduce is off (see it in cost_model.h for the versions). Each rank
/// keeps its own partition's slice of the all-reduced bucket (stage_1_and_2.py
/// allreduce_and_copy_with_multiple_ranks), so what is kept, and the memory, is unchanged.
bool zero_grad_all_reduce(const Layout& layout, const PlanOptions& options);

/// Whether a ZeRO 1-2 stage's all-gather of the updated parameters overlaps the next step's
/// forwards (options.overlap_param_gather; Megatron-Core's --overlap-param-gather, the
/// executor's). Never under DeepSpeed: ZeRO 1-2 gather inside the optimizer step
/// (stage_1_and_2.py step: all_gather_dp_groups between the optimizer's timers, 38327e07), so
/// the option there speaks only of ZeRO-3's prefetch, which the ZeRO-3 cost already assumes.
bool parameter_gather_overlapped(const Layout& layout, const PlanOptions& options);

/// The ZeRO stages whose gradient reduce options.deepspeed_grad_all_reduce describes: 1 and 2
/// (ZeRO 0 all-reduces whatever it says, ZeRO 3 reduce-scatters per layer).
inline bool grad_all_reduce_option_applies(int64_t zero) {
  return zero == 1 || zero == 2;
}

/// The gradient reduce dtype a framework uses when none is given, under 16-bit training:
/// - megatron, zero 0-1: fp32. Megatron-LM's arguments.py sets accumulate_allreduce_grads_in_fp32
///   under --bf16 unless --grad-reduce-in-bf16 (d98e8a64 lines 1204-1217), and Megatron-Core's
///   main_grad buffer and its reduce-scatter/all-reduce take grad_dtype = fp32 when
///   grad_reduce_in_fp32 (core/distributed/param_and_grad_buffer.py line 924). NeMo's
///   mcore_distributed_optim too: grad_reduce_in_fp32 = optim.grad_sync_dtype, default "fp32"
///   (megatron_gpt_model.py setup_mcore_distributed_parallel). Megatron-LM 2021 under --fp16
///   reduced in fp16 (megatron/model/distributed.py _get_buffer_type, 48a5e0da): give bf16.
/// - megatron, zero 2-3 (Megatron-FSDP): bf16, main grads dtype "auto" (arguments.py 3691).
/// - deepspeed: bf16, communication_data_type = the bf16 model dtype (engine.py lines
///   1405-1416, v0.19.5).
/// - fsdp: fp32, torchtitan's mixed_precision_reduce "float32" (ZeRO-3) and DDP's fp32
///   gradients of fp32 parameters under autocast (ZeRO-0).
/// - meshplan: the cluster's precision (its executor reduces what it trains in).
GradReduceDtype default_grad_reduce_dtype(Framework framework, const Layout& layout);

/// Bytes per gradient element the data-parallel gradient collectives move and the gradient
/// buffer they reduce holds: 4 in fp32 training, else 4 or the cluster's 2 by
/// options.grad_reduce_dtype, or by default_grad_reduce_dtype when it is unset.
int64_t grad_reduce_element_bytes(const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// Megatron-Core's default DDP bucket, in parameters: max(kMegatronMinBucketParameters,
/// kMegatronBucketParametersPerRank x dp x cp) (Megatron-LM training.py resolve_ddp_bucket_size,
/// d98e8a64; DistributedDataParallelConfig.bucket_size docstring).
inline constexpr int64_t kMegatronMinBucketParameters = 40'000'000;
inline constexpr int64_t kMegatronBucketParametersPerRank = 1'000'000;

/// DeepSpeed's gradient buckets, in elements, at every ZeRO stage: reduce_bucket_size 5e8
/// (deepspeed/runtime/zero/config.py) for ZeRO 1-3 and the engine's all-reduce buffer
/// MEMORY_OPT_ALLREDUCE_SIZE = 500000000 (deepspeed/runtime/engine.py allreduce_gradients) at
/// ZeRO 0.
inline constexpr int64_t kDeepSpeedBucketElements = 500'000'000;

/// DeepSpeed ZeRO-3 keeps a parameter of at most this many elements gathered on every rank
/// (stage3_param_persistence_threshold 1e5, deepspeed/runtime/zero/config.py;
/// parameter_offload.py mark_persistent_parameters): norms, biases, small routers.
inline constexpr int64_t kDeepSpeedPersistenceThreshold = 100'000;

/// The data-parallel bucket cap in gradient bytes: options.bucket_bytes when given, else the
/// framework's default: megatron max(40,000,000, 1,000,000 x dp x cp) parameters of
/// grad_reduce_element_bytes each; deepspeed kDeepSpeedBucketElements of them; fsdp and
/// meshplan kDefaultBucketBytes (25 MiB).
int64_t dp_bucket_bytes(const models::ClusterConfig& cluster, const Layout& layout,
                        const PlanOptions& options);

/// Why dp_bucket_bytes changes none of the layout's data-parallel calls (dp_buckets), "" where
/// it changes some: no gradient reduce at dp x cp = 1; under megatron, ZeRO 0/1 only with
/// overlap_grad_reduce (pipeline rank 0's first chunk) and ZeRO 2-3 never (one bucket per
/// layer); ZeRO 3 only under deepspeed (reduce_bucket_size), FSDP and the executor reducing
/// layer by layer. A bucket size given where this is not "" would be ignored: callers refuse it
/// with these words.
std::string dp_bucket_size_inert_reason(const Layout& layout, const PlanOptions& options);

/// Per-rank elements of each module of one transformer layer that DeepSpeed ZeRO-3 all-gathers
/// with its own call, in forward order: the modules holding a parameter of more than
/// kDeepSpeedPersistenceThreshold elements. Megatron-DeepSpeed's GPT layer: query_key_value,
/// dense, dense_h_to_4h (SwiGLU's two halves fused), dense_4h_to_h; Megatron-Core's MLA
/// projections; in an MoE layer the router and each shared expert's two linears (the routed
/// experts reduce over the expert data-parallel group, expert_dp_buckets). A model whose
/// separate q, k, v or gate/up projections are modules of their own (Hugging Face Llama) makes
/// more calls than this. Never empty: a layer whose modules are all persistent counts as one.
std::vector<int64_t> deepspeed_gathered_module_elements(const models::TransformerConfig& model,
                                                        int64_t tp, bool moe_layer);

/// DeepSpeed ZeRO-3's prefetch and release limits, in elements, at their defaults
/// (deepspeed/runtime/zero/config.py): stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters
/// 1e9 (a cap on prefetching only), stage3_max_reuse_distance 1e9 (a parameter used again within
/// that many elements of the module trace is not released).
inline constexpr int64_t kDeepSpeedPrefetchBucketElements = 50'000'000;
inline constexpr int64_t kDeepSpeedMaxLiveParameters = 1'000'000'000;
inline constexpr int64_t kDeepSpeedMaxReuseDistance = 1'000'000'000;

/// What DeepSpeed ZeRO-3 gathers on one rank over one micro-batch's forward and backward.
struct DeepSpeedZero3Trace {
  int64_t peak_gathered_elements = 0;      // the most elements gathered at once
  int64_t largest_gradient_elements = 0;   // the largest module's unsharded gradient
  int64_t forward_gathered_elements = 0;   // all-gathered for the forward, prefetch included
  int64_t backward_gathered_elements = 0;  // for the recompute and backward
  // For each place i in a layer's deepspeed_gathered_module_elements list: how many of the
  // stage's layers gather module i again for the recompute and backward (0 to 2 per layer;
  // trailing places that are never gathered again may be missing).
  std::vector<int64_t> backward_module_gathers;
};

/// Replays DeepSpeed's partitioned_param_coordinator.py (fetch_sub_module, release_sub_module,
/// __params_to_release; v0.16.5, 38327e07) over the module trace of stage `stage`: the embedding
/// (and learned positions), each layer's deepspeed_gathered_module_elements, the LM head (the
/// embedding's weight when tied), then the backward in reverse, each layer's forward again
/// first under full recompute. Each module's parameters are gathered as it starts, the next
/// ones prefetched up to kDeepSpeedPrefetchBucketElements (capped at
/// kDeepSpeedMaxLiveParameters less those gathered), and released after it unless used again
/// within kDeepSpeedMaxReuseDistance trace elements or already passed by a prefetch. So a model
/// whose rank holds under 1e9 elements stays gathered from its forward to its backward, and a
/// large one keeps its last layers and LM head over the turn. Persistent parameters
/// (kDeepSpeedPersistenceThreshold) are not in the trace.
DeepSpeedZero3Trace deepspeed_zero3_trace(const models::TransformerConfig& model,
                                          const Layout& layout, int64_t stage,
                                          const PlanOptions& options);

/// A run of `count` equal sizes.
struct SizeRun {
  int64_t bytes = 0;
  int64_t count = 0;
  int64_t layer_run = -1;  // as DpBucket's
  int64_t layers = 0;
  bool operator==(const SizeRun&) const = default;
};

/// Consecutive buckets of at most `bucket_bytes` covering `total_bytes`, the last one holding
/// the remainder, as DDP fills them: {bucket, total / bucket} then {total % bucket, 1}; empty
/// runs left out. Precondition: bucket_bytes > 0.
std::vector<SizeRun> bucket_sizes(int64_t total_bytes, int64_t bucket_bytes);

/// `total_bytes` in `num_parts` near-equal parts: {ceil, total % parts} then {floor, the rest};
/// parts of 0 bytes are left out. Precondition: num_parts > 0.
std::vector<SizeRun> even_split(int64_t total_bytes, int64_t num_parts);

/// Every data-parallel call of pipeline stage `stage` in one step (see DpBuckets), costed by
/// collective_seconds over the nodes the stage's dp groups touch. The calls of the list(s) a
/// ZeRO stage reduces gradients with (ZeRO 0-1 step_grad, ZeRO 2-3 chunk_grad once per chunk
/// share) cut the dp_buffer_count buffer into consecutive buckets, in order, exactly. Buckets
/// hold at most dp_bucket_bytes, which must be positive. Under megatron, ZeRO 0/1 follow
/// Megatron-Core's policy: one bucket per model chunk, except stage 0's first chunk with
/// overlap_grad_reduce, cut into full buckets; the chunks in the order their gradients are ready
/// (chunk 0, whose backward ends last, last).
DpBuckets dp_buckets(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage);

/// Whether ZeRO-3 keeps a chunk's parameters gathered and its gradients unsharded across the
/// step's micro-batches: torchtitan under torch.distributed.pipelining (framework fsdp, pp > 1).
/// torchtitan does not reshard after forward when pp is enabled ("to avoid per-microbatch
/// all-gathers", parallelize_llama.py apply_fsdp at 9dec370, distributed/fsdp.py since), and
/// pipelining's stage.py backward_maybe_with_nosync runs every backward with
/// set_reshard_after_backward(False) and set_requires_gradient_sync(False), then, after a
/// chunk's last backward, post_backward on every unit (the reduce-scatters) and, in current
/// PyTorch, the root's _root_post_backward_final_callback, which waits for them. So DpBuckets'
/// chunk lists run once per chunk a step: chunk_param and chunk_root_param before the chunk's first
/// forward, chunk_grad and chunk_root_grad after its last backward, chunk_param_backward never
/// (left empty).
bool zero3_gathers_once_per_step(const Layout& layout, const PlanOptions& options);

/// Whether each ZeRO-3 backward op gathers its first unit beside no compute, as a forward does:
/// Megatron-FSDP (framework megatron, zero 3) with pp > 1. It releases every unit's parameters
/// after the unit's forward (megatron_fsdp.py _post_forward -> release_module_parameters, not
/// lazily outside activation recompute, d98e8a64) and prefetches only within one root, and each
/// model chunk is its own root (training.py wrap_model_chunks_with_ddp), so a chunk's backward,
/// which under a pipeline schedule runs ops after its forward, all-gathers its first unit in
/// its pre-backward hook (_pre_backward_param_unshard) with nothing of its own to run beside it.
/// Without pp the forward is followed by its own backward, whose output layer runs beside that
/// gather; torchtitan keeps its last block gathered (reshard_after_forward false for it) and
/// DeepSpeed keeps parameters reused within stage3_max_reuse_distance.
bool zero3_backward_gathers_start_a_pass(const Layout& layout, const PlanOptions& options);

/// How often a step each of DpBuckets' chunk lists runs on a stage: once per chunk op (m x vpp),
/// or once per chunk (vpp) where zero3_gathers_once_per_step.
int64_t chunk_list_rounds(const Layout& layout, const PlanOptions& options);

/// A stage's expert-parameter calls over the expert data-parallel group
/// (expert_data_parallel: tp * cp * dp / (etp * ep) ranks, etp * ep apart), once per step as the
/// last backward ends: ZeRO 0 all-reduces the expert gradients, ZeRO 1-2 reduce-scatter them and
/// all-gather the parameters after the optimizer, each in one call of the stage's expert
/// parameters (gradients in grad_reduce_element_bytes, parameters in the cluster's precision;
/// Megatron-Core keeps the experts in a gradient buffer of their own over that group). Group
/// kExpertDp; empty lists when the stage holds no expert or expert_data_parallel(layout) is 1. The
/// estimate, its inventory and the simulator read this one list.
DpBuckets expert_dp_buckets(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, int64_t stage);

/// The gradient-reduction buckets of a stage's dp_buckets in buffer order, covering its
/// dp_buffer_count elements exactly: step_grad under ZeRO 0-1, chunk_grad then chunk_root_grad
/// once for each of the vpp chunk shares under ZeRO 2-3 (ZeRO 1-2 all-gather the parameters in
/// the same buckets).
std::vector<SizeRun> gradient_buckets_in_order(const DpBuckets& buckets, const Layout& layout);

/// Sum of seconds * num_calls.
double total_seconds(const std::vector<DpBucket>& buckets);
/// Sum of bytes * num_calls.
int64_t total_bytes(const std::vector<DpBucket>& buckets);
/// Number of calls: sum of num_calls.
int64_t total_calls(const std::vector<DpBucket>& buckets);

}  // namespace meshplan::planner
