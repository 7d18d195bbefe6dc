#pragma once
// The analytical cost model: memory, compute and communication of one training step of one
// layout. Every formula lives here (planner/*.cpp); the simulator and executor call these
// functions and never restate them. Units: bytes, seconds, FLOPs.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/schedule.h"
#include "meshplan/units.h"

namespace meshplan::planner {

/// PyTorch DDP's default gradient bucket: bucket_cap_mb = 25, which DDP multiplies by 2^20
/// (Li et al. 2020, Sec. 3.2.3). The planner, the simulator and the executor all use it.
inline constexpr int64_t kDefaultBucketBytes = 25 * kBytesPerMiB;

/// The software that runs the plan. It limits the layouts the search may pick (check_framework)
/// and sets the memory accounting (planner/memory.cpp); README "Frameworks" lists each rule with
/// its version and source. kMeshplan is this project's executor.
enum class Framework { kMegatron, kDeepSpeed, kFsdp, kMeshplan };

/// How context-parallel attention moves the sequence (Megatron-Core TransformerConfig
/// cp_comm_type, d98e8a64): kP2p passes K/V chunks around a ring of the cp ranks, overlapped
/// with attention compute (Transformer Engine's AttnFuncWithCPAndKVP2P, after Liu et al. 2023
/// "Ring Attention"); kA2a scatters heads and gathers the sequence with all-to-alls before and
/// after attention (DeepSpeed-Ulysses, Jacobs et al. 2023).
enum class CpComm { kP2p, kA2a };
std::string to_string(CpComm comm);
/// "p2p", "a2a"; throws InputError naming `field` otherwise.
CpComm parse_cp_comm(const std::string& text, const std::string& field);

/// The loss's fused kernels. Megatron-Core's loss fusion (--cross-entropy-loss-fusion,
/// --cross-entropy-fusion-impl; model_parallel_config.py at 358e5f07): kOff the eager
/// vocab_parallel_cross_entropy, kNative megatron/core/fusions/fused_cross_entropy.py, kTe
/// Transformer Engine's Triton parallel_cross_entropy. Under fsdp, kXentropy is FlashAttention's
/// flash_attn.losses.cross_entropy.CrossEntropyLoss on the apex xentropy kernel, llm-foundry's
/// default loss (`loss_fn: fused_crossentropy`) (loss_cost.cpp cross_entropy_bytes_per_logit,
/// memory.cpp loss_bytes_per_token_vocab).
enum class CrossEntropyFusion { kOff, kNative, kTe, kXentropy };
std::string to_string(CrossEntropyFusion fusion);
/// "off", "native", "te", "xentropy"; throws InputError naming `field` otherwise.
CrossEntropyFusion parse_cross_entropy_fusion(const std::string& text, const std::string& field);
/// The RMSNorm kernel torchtitan runs (its model.norm_type): kFused one kernel each way
/// ("fused_rmsnorm", norms.py FusedRMSNorm, costed as the shared fused count), kEager the
/// hand-written norms.py RMSNorm ("rmsnorm"), one ATen kernel per op (compute_cost.cpp
/// eager_rmsnorm_bytes_per_element). Only framework fsdp without compile, rmsnorm models
/// (check_norm_kernel_options, check_norm_kernel_model).
enum class NormKernel { kFused, kEager };
std::string to_string(NormKernel kernel);
/// "fused", "eager"; throws InputError naming `field` otherwise.
NormKernel parse_norm_kernel(const std::string& text, const std::string& field);
/// The Adam(W) implementation that steps the optimizer (`plan --optimizer-impl`), costed by the
/// HBM passes it makes (optimizer_cost.cpp adam_bytes_per_parameter): kFused one kernel (Apex's,
/// Transformer Engine's and DeepSpeed's FusedAdam, torch.optim.AdamW(fused=True)); kForeach and
/// kForLoop torch.optim.AdamW's horizontally fused and per-tensor paths (the same passes);
/// kComposer Composer's DecoupledAdamW (llm-foundry). Anything but kFused only under framework
/// fsdp (check_optimizer_impl_options).
enum class OptimizerImpl { kFused, kForeach, kForLoop, kComposer };
std::string to_string(OptimizerImpl impl);
/// "fused", "foreach", "for-loop", "composer"; throws InputError naming `field` otherwise.
OptimizerImpl parse_optimizer_impl(const std::string& text, const std::string& field);
std::string to_string(Framework framework);
/// "megatron", "deepspeed", "fsdp", "meshplan"; throws InputError naming `field` otherwise.
Framework parse_framework(const std::string& text, const std::string& field);
/// Whether every backward op ends by waiting for its sharded gradients' reduce-scatters
/// (ZeRO 2 and 3, every micro-batch), so the next op never runs beside them. Megatron-FSDP
/// (its root post-backward's grad_reduce_pipeline.reset(), megatron_fsdp.py d98e8a64 lines
/// 879-901, one root per model chunk), DeepSpeed (independent_gradient_partition_epilogue
/// synchronizes after every backward, stage_1_and_2.py and stage3.py, v0.16.5) and PyTorch FSDP
/// (_root_post_backward_final_callback) do; meshplan's executor does not (gradient_sync.cpp
/// waits for a bucket's round only when it starts the next).
bool backward_waits_for_reduce_scatter(Framework framework);

/// What the transformer layers' linear GEMMs run in (`plan --precision`). kFp8 is Transformer
/// Engine's delayed-scaling FP8 (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"):
/// the QKV, attention-output and MLP GEMMs at the GPU's FP8 peak; attention, the LM head,
/// weights' master copies, activations and all communication stay in the cluster's precision.
enum class GemmPrecision { kBf16, kFp8 };
std::string to_string(GemmPrecision precision);
/// "bf16", "fp8"; throws InputError naming `field` otherwise.
GemmPrecision parse_gemm_precision(const std::string& text, const std::string& field);

/// Megatron-Core's MoE token dispatcher (--moe-token-dispatcher-type, `plan --moe-dispatcher`):
/// kAllToAll its MoEAlltoAllTokenDispatcher (NCCL all-to-all of every routed copy, moe_cost.cpp
/// moe_all_to_all_bytes); kFlex its MoEFlexTokenDispatcher over DeepEP's normal (training)
/// kernels, which send a token once per destination node over RDMA and forward it over NVLink
/// to each destination GPU there (moe_cost.cpp moe_flex_traffic; docs/research/
/// flex-dispatcher.md). Only framework megatron, MoE models, ep > 1, etp 1
/// (check_moe_dispatcher_options, check_moe_dispatcher).
enum class MoeDispatcher { kAllToAll, kFlex };
/// Transformer Engine's FP8 scaling under --precision fp8 (Megatron-LM --fp8-recipe, Megatron
/// Core 0.12 on; default delayed): kDelayed scales each tensor by an amax history, the cast fused
/// with the amax and the norm writing FP8 itself; kTensorwise ("current scaling", Megatron-Bridge's
/// fp8_cs) scales by the tensor's own amax, one more read pass per cast and the norm output cast
/// apart (fp8_cast_cost.cpp). Only framework megatron (check_fp8_recipe_options).
enum class Fp8Recipe { kDelayed, kTensorwise };
std::string to_string(Fp8Recipe recipe);
/// "delayed", "tensorwise"; throws InputError naming `field` otherwise.
Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& field);
std::string to_string(MoeDispatcher dispatcher);
/// "alltoall", "flex"; throws InputError naming `field` otherwise.
MoeDispatcher parse_moe_dispatcher(const std::string& text, const std::string& field);

/// The dtype the data-parallel gradient collectives move and the gradient buffer they reduce
/// holds (`plan --grad-reduce-dtype`). kBf16 is the cluster's 16-bit type, fp16 runs included.
/// Unset, each framework's default applies (default_grad_reduce_dtype).
enum class GradReduceDtype { kFp32, kBf16 };
std::string to_string(GradReduceDtype dtype);
/// "fp32", "bf16"; throws InputError naming `field` otherwise.
GradReduceDtype parse_grad_reduce_dtype(const std::string& text, const std::string& field);

/// Knobs of the training run that are not part of the layout.
struct PlanOptions {
  Framework framework = Framework::kMegatron;
  bool flash_attention = true;  // fused attention: no s^2 score tensors stored or moved
  // The fused kernel's generation (only read with flash_attention): 2, FlashAttention-2 and
  // its successors (cuDNN, FA3), the rate the cluster's attention_efficiency is measured at; 1,
  // FlashAttention-1 or its Triton port (llm-foundry v0.3.0 attn_impl: triton), at half that
  // rate (compute_cost.cpp attention_forward_seconds).
  int flash_attention_version = 2;
  // Which PyTorch FSDP the fsdp framework runs (only read under framework fsdp): 2, FSDP2's
  // fully_shard (torchtitan); 1, FSDP1's FullyShardedDataParallel with use_orig_params
  // (llm-foundry through Composer). They move different bytes per unit beside the compute
  // (compute_cost.cpp fsdp_unit_pass_bytes).
  int fsdp_version = 2;
  // Under framework fsdp, whether the final norm and the LM head are in the root module's FSDP
  // unit with the embedding (dp_buckets chunk_root_param, both exposed every micro-batch) or in
  // a unit of their own, overlapped like a block's. Unset: in the root under fsdp_version 1
  // (Composer wraps only the blocks, then the model) and not under 2 (torchtitan since
  // 83e694105, 2025-07-28, parallelize.py: fully_shard on tok_embeddings, each block,
  // [norm, output], then the model; before it, the blocks and then the model).
  std::optional<bool> fsdp_head_in_root;
  // Data-parallel gradient reduction overlaps with the backward of the last micro-batch
  // (Megatron-LM --overlap-grad-reduce, PyTorch DDP buckets). Off: it runs after the backward.
  bool overlap_grad_reduce = true;
  // Tensor-parallel communication overlaps with GEMMs (Megatron-Core --tp-comm-overlap).
  bool overlap_tp_comm = false;
  // ZeRO-1/2 parameter all-gather overlaps with the next step's forward (Megatron-LM
  // --overlap-param-gather). Off: it runs after the optimizer step.
  bool overlap_param_gather = true;
  // Megatron-LM's scatter/gather of pipeline sends without sequence parallelism (Narayanan et
  // al. 2021, Sec. 4.1; its --no-scatter-gather-tensors-in-pipeline turns it off): each tp rank
  // sends 1/t of the activation and the receiver all-gathers it over NVLink.
  bool scatter_gather_pipeline = false;
  // With scatter_gather_pipeline, whether the gradient sends are split too (Megatron-LM
  // _communicate splits both directions; DeepSpeed since #1407, e2fdd254, 2021-09-29:
  // is_grad_partitioned = is_model_parallel). false: the DeeperSpeed eb7f5cff GPT-NeoX-20B
  // trained with (runtime/pipe/engine.py line 122, is_grad_partitioned = False) sends each
  // gradient whole and the receiver gathers nothing. Only framework deepspeed
  // (check_pipeline_grad_scatter_gather_options).
  bool pipeline_grad_scatter_gather = true;
  // DeepSpeed ZeRO 1-2 (framework deepspeed): whether the gradient buckets are all-reduced over
  // dp, each rank keeping its own partition's slice, rather than reduced at the reduce-scatter's
  // bandwidth. On: DeepSpeed's defaults since v0.12.4 (#4695, 2afa1c7f:
  // use_multi_rank_bucket_allreduce true, average_tensor -> allreduce_and_scatter ->
  // dist.all_reduce per reduce_bucket_size bucket; deepspeed/runtime/zero/stage_1_and_2.py), and
  // ZeRO-1 from v0.4.4 (#1246) to v0.12.x, where the engine forces contiguous_gradients off at
  // stage 1 and reduce_ipg_grads takes buffered_reduce_fallback -> allreduce_and_copy ->
  // dist.all_reduce (v0.6.1 engine.py lines 1305-1308, stage_1_and_2.py line 1351). Off: one
  // dist.reduce per rank's slice (ZeRO-2 before v0.12.4, or use_multi_rank_bucket_allreduce
  // false) or DeeperSpeed's legacy ZeRO-1 (zero/stage1.py reduce_scatter_gradients), moving a
  // reduce-scatter's bytes. Only framework deepspeed (check_deepspeed_grad_all_reduce_options).
  bool deepspeed_grad_all_reduce = true;
  // Data-parallel gradients and ZeRO-1/2 parameters move in buckets of at most this many bytes
  // of gradient, each a collective paying its latency. nullopt: the framework's default for the
  // layout (dp_bucket_bytes: Megatron-Core's max(40M, 1M x dp x cp) parameters, else 25 MiB);
  // a plan file stores the value used.
  std::optional<int64_t> bucket_bytes;
  // Vocabulary padding divisor d: the embedding and LM head are built with
  // ceil(V / (d tp)) d tp rows (Megatron-LM --make-vocab-size-divisible-by, default 128,
  // build_tokenizer.py vocab_size_with_padding; NeMo's get_vocab_size alike). nullopt: the
  // framework's default (vocab_size_divisible_by); a plan file stores the value used.
  std::optional<int64_t> make_vocab_size_divisible_by;
  // Tensor-parallel groups may span nodes (normally rejected: tp belongs on NVLink).
  bool allow_tp_across_nodes = false;
  // Mixture-of-experts load imbalance: the busiest rank's routed-expert work over the balanced
  // share (tokens x k / ep). 1.0 assumes perfect balance (dropless routing with a well-trained
  // balancing loss); it multiplies the routed experts' GEMM time (the all-to-all stays at the
  // balanced volume). Not a measured figure: an explicit what-if.
  double moe_load_imbalance = 1.0;
  // Coefficient of the router's auxiliary load-balancing loss (Megatron-LM --moe-aux-loss-coeff,
  // default 0: off; Mixtral's Hugging Face config router_aux_loss_coef 0.02). Above 0, each MoE
  // layer's router all-reduces its token counts over the tp x cp ranks that share a sequence
  // (Megatron-Core router.py _apply_aux_loss) before the loss.
  double moe_aux_loss_coeff = 0.0;
  // The MoE token dispatcher (MoeDispatcher; only read for MoE layers at ep > 1).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // Context-parallel attention communication (only read when the layout's cp > 1).
  CpComm cp_comm = CpComm::kP2p;
  GemmPrecision gemm_precision = GemmPrecision::kBf16;  // --precision
  // Megatron-LM --fp8-param-gather (with --precision fp8 and the distributed optimizer, ZeRO-1):
  // the linear layers' model weights are Transformer Engine Float8Tensors (fp8_model_init), 1
  // byte each, and the distributed optimizer all-gathers them in fp8; norms, biases, embedding
  // and LM head stay in the cluster's precision (planner/memory.cpp fp8_param_gather_saving_bytes).
  bool fp8_param_gather = false;
  // Transformer Engine's FP8 scaling recipe (Fp8Recipe; only read with precision fp8).
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  // Megatron-Core --cross-entropy-loss-fusion [--cross-entropy-fusion-impl te]: the loss in
  // fused kernels instead of eager passes (cross_entropy_bytes_per_logit). Off: Megatron-LM's
  // own default (model_parallel_config.py); Megatron-Bridge's GPTModelProvider turns it on and
  // its Llama-3 recipes pick te. Only framework megatron (check_precision).
  CrossEntropyFusion cross_entropy_loss_fusion = CrossEntropyFusion::kOff;
  // Megatron-Core --overlap-p2p-communication (ModelParallelConfig.overlap_p2p_comm): the
  // interleaved schedule's steady-state pipeline sends and receives are posted as separate
  // isend/irecv and waited for only when the next chunk needs them, so they overlap with the
  // other half of the 1F1B pair (planner/estimate.cpp exposed_transfer_seconds). Megatron-LM
  // turns it on by default since 4eeff55d (2023-10-12, --no-overlap-p2p-communication) and off
  // for non-interleaved schedules (training/arguments.py validate_args); the 2021-22 Megatron-LM
  // had none. Only framework megatron (check_overlap_p2p_options). Off here: library callers and
  // plan files without the key cost every send exposed; `plan --framework megatron` sets it on.
  bool overlap_p2p_comm = false;
  // Megatron-Core --overlap-moe-expert-parallel-comm (TransformerConfig
  // .overlap_moe_expert_parallel_comm, "combined 1F1B"): each steady-state forward runs merged
  // with the previous micro-batch's backward, layer by layer, each one's dispatch and combine
  // all-to-alls on a communication stream beside the other's attention and expert compute
  // (pipeline_parallel/combined_1f1b.py, models/common/model_chunk_schedule_plan.py
  // TransformerLayerSchedulePlan.run, NVIDIA/Megatron-LM d98e8a64; ep_overlap_pair_seconds,
  // docs/research/ep-a2a-overlap.md). Costed at pp 1 and interleaved pp > 1; MoE models at
  // ep > 1, framework megatron, no full recompute and no moe recompute module
  // (check_moe_a2a_overlap). Off: every all-to-all exposed.
  bool overlap_moe_expert_parallel_comm = false;
  // Megatron-Core --delay-wgrad-compute (TransformerConfig.delay_wgrad_compute; requires
  // overlap_moe_expert_parallel_comm, transformer_config.py d98e8a64 line 3074): the layer's
  // weight-gradient GEMMs run after the node's input gradient, on the computation stream but
  // outside the micro-batch's event chain (models/common/utils.py backward_dw), so the next
  // all-to-all of the same backward no longer waits for them (ep_overlap_layers_seconds).
  bool delay_wgrad_compute = false;
  // Gradient reduce dtype; nullopt: the framework's default for the layout
  // (default_grad_reduce_dtype, e.g. fp32 under Megatron's --bf16 DDP/distributed optimizer).
  std::optional<GradReduceDtype> grad_reduce_dtype;
  // torch.compile as torchtitan applies it with --training.compile since bbb1b616e (2025-04-02,
  // components/loss.py build_cross_entropy_loss): each TransformerBlock (apply_compile, since
  // 9954e19c) and the cross-entropy loss. torchtitan 9dec370 .. d1f62be7 compiled the blocks only
  // (its train.py kept the loss eager, citing CUDA errors; so did 3faaa1a0d, before 9dec370):
  // compile_loss below says which. Time: compiled blocks keep the fused
  // element-wise count, eager ones torchtitan's eager kernels (compute_cost.cpp
  // eager_elementwise_bytes_per_token); the loss, loss_bytes_per_logit. Memory: the loss only
  // (memory.cpp loss_bytes_per_token_vocab; blocks as eager). Only framework fsdp
  // (check_compile_options).
  bool compile = false;
  // With compile, whether the loss is compiled too (torchtitan bbb1b616e on, Compile.components
  // "loss") or stays eager while the blocks are compiled (torchtitan 9dec370 .. d1f62be7, and
  // components ["model"]): `plan --compile blocks`, plan file "compile_loss": false. Read through
  // loss_compiled().
  bool compile_loss = true;
  // torchtitan's RMSNorm kernel (model.norm_type): fused (default) or the hand-written eager
  // norm of the 70B and 405B train_configs (NormKernel).
  NormKernel norm_kernel = NormKernel::kFused;
  // The optimizer's implementation (OptimizerImpl) and whether it decays weights: an unfused
  // AdamW spends one more pass on the decay (param.mul_), a fused one does it in its kernel.
  // weight_decay false is only read by the unfused implementations.
  OptimizerImpl optimizer_impl = OptimizerImpl::kFused;
  bool weight_decay = true;
  // Megatron-LM --distribute-saved-activations (tensor_parallel/random.py CheckpointFunction:
  // split_tensor_into_1d_equal_chunks after the checkpointed forward, gather_split_1d_tensor
  // before the recompute) and DeepSpeed's activation_checkpointing.partition_activations
  // (runtime/activation_checkpointing/checkpointing.py partition_activations,
  // gather_partitioned_activations): under full recompute each layer keeps 1/tp of its input
  // and all-gathers it over tp before re-running the layer. Megatron, DeepSpeed and meshplan's
  // executor, with recompute full and sequence parallelism off
  // (check_distribute_saved_activations).
  bool distribute_saved_activations = false;

  bool operator==(const PlanOptions&) const = default;
};

/// Whether the cross-entropy loss runs compiled (torch.compile of the blocks with the loss,
/// PlanOptions::compile and compile_loss); otherwise it is costed eager.
inline bool loss_compiled(const PlanOptions& options) {
  return options.compile && options.compile_loss;
}

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kSendRecv, kAllToAll };
/// kDp is the gradient group of grad_group_size(layout) = dp * cp ranks; kCp the cp ranks of
/// one (tp, dp, pp) coordinate, the ring of context-parallel attention; kEp the expert-parallel
/// group (ep ranks etp apart: expert_parallel_ranks); kExpertDp the expert data parallel group
/// (tp * cp * dp / (etp * ep) ranks etp * ep apart holding the same experts). Under hybrid
/// sharding (hybrid_sharded) kDpShard is the shard group of zero_shard_group_size ranks (the
/// first dp_shard * cp of the gradient group, consecutive at stride tp) and kDpReplicate the
/// dp / dp_shard ranks holding the same shard (stride tp * cp * dp_shard).
enum class CommGroup { kTp, kPp, kDp, kEmbedding, kCp, kEp, kExpertDp, kDpShard, kDpReplicate };
std::string to_string(CollectiveKind kind);
std::string to_string(CommGroup group);

/// One kind of collective a rank issues during a step. `message_bytes` is nccl-tests' "size":
/// the full (unsharded) buffer of an all-reduce, the gathered output of an all-gather, the
/// input of a reduce-scatter, the payload of a send. Bytes on the wire per rank follow from the
/// ring algorithm: 2(n-1)/n, (n-1)/n, (n-1)/n and 1 times message_bytes (nccl-tests
/// doc/PERFORMANCE.md); an all-to-all's message is each rank's whole send buffer, (n-1)/n of
/// which leaves the rank (nccl-tests src/alltoall.cu AlltoAllGetBw).
struct CollectiveTraffic {
  std::string what;  // "tp: attention output all-reduce (forward)"
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CommGroup group = CommGroup::kTp;
  int64_t group_size = 1;
  int64_t stage = 0;  // pipeline rank that issues it
  int64_t message_bytes = 0;
  int64_t calls_per_step = 0;
  double seconds_per_call = 0;  // alpha-beta ring time, tiered by placement
  int64_t total_message_bytes() const { return message_bytes * calls_per_step; }
};

/// Per-rank memory of one pipeline stage, bytes. Model states per ZeRO (Rajbhandari et al.
/// 2020, Fig. 1); activations per Korthikanti et al. 2022 (Sec. 4, eqs. 1-6) times the peak
/// in-flight count from the schedule's op list.
struct MemoryBreakdown {
  int64_t weights_bytes = 0;
  int64_t gradients_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activations_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + reserved_bytes;
  }
};

/// One transformer layer as Megatron-Core's EP all-to-all overlap splits it into schedule nodes
/// (model_chunk_schedule_plan.py TransformerLayerSchedulePlan, d98e8a64): the pre-dispatch node
/// (attention, norms, router, token permutation, shared experts, tp and cp collectives), the
/// dispatch all-to-all, the routed experts (mlp node), the combine all-to-all. Backward times
/// hold the weight gradients (delay_wgrad_compute off). A dense layer has only the first.
struct EpOverlapLayer {
  double attention_forward_seconds = 0;
  double mlp_forward_seconds = 0;
  double attention_backward_seconds = 0;
  double mlp_backward_seconds = 0;
  double dispatch_seconds = 0;  // forward dispatch; its transpose in the backward takes the same
  double combine_seconds = 0;
  // The weight-gradient parts of attention_backward_seconds and mlp_backward_seconds (what
  // delay_wgrad_compute takes out of the event chain).
  double attention_weight_seconds = 0;
  double mlp_weight_seconds = 0;
  // An MTP depth's mtp_post_process node (its final norm, the shared output layer and the loss),
  // on the computation stream after combine_fwd and before combine_bwd; 0 for a decoder layer.
  double post_forward_seconds = 0;
  double post_backward_seconds = 0;
};

/// One micro-batch through one model chunk on one rank. Compute and exposed tensor-parallel
/// communication are kept apart so the simulator can put them on different streams.
struct ChunkCost {
  int64_t num_layers = 0;
  bool has_embedding = false;
  bool has_lm_head = false;  // final norm, LM head, loss
  double forward_compute_seconds = 0;
  double forward_tp_comm_seconds = 0;          // exposed
  double backward_input_compute_seconds = 0;   // B (includes recompute forward, if any)
  double backward_weight_compute_seconds = 0;  // W
  double backward_tp_comm_seconds = 0;         // exposed, recompute's included
  double forward_cp_comm_seconds = 0;          // exposed cp attention traffic
  double backward_cp_comm_seconds = 0;         // exposed, recompute's included
  double forward_ep_comm_seconds = 0;          // MoE all-to-alls (dispatch, combine), exposed
  double backward_ep_comm_seconds = 0;         // their backward (and recompute's)
  int64_t num_moe_layers = 0;                  // of num_layers
  // overlap_moe_expert_parallel_comm: how much shorter a forward merged with another
  // micro-batch's backward on this chunk runs than the two in sequence (all-to-all time the
  // other's compute hides; ep_overlap_layers_seconds). 0 when off.
  double ep_overlap_saved_seconds = 0;
  // overlap_moe_expert_parallel_comm: the chunk's layers as schedule nodes, forward order (for
  // merged pairs of two chunks, ep_overlap_pair_saved_seconds). Empty when off.
  std::vector<EpOverlapLayer> ep_overlap_layers;
  bool ep_overlap_delay_wgrad = false;  // delay_wgrad_compute (ep_overlap_layers_seconds)
  int64_t forward_flops = 0;            // matmul FLOPs executed, per rank
  int64_t backward_flops = 0;           // recompute included
  double forward_seconds() const {
    return forward_compute_seconds + forward_tp_comm_seconds + forward_cp_comm_seconds +
           forward_ep_comm_seconds;
  }
  double backward_seconds() const {
    return backward_input_compute_seconds + backward_weight_compute_seconds +
           backward_tp_comm_seconds + backward_cp_comm_seconds + backward_ep_comm_seconds;
  }
};

struct StageEstimate {
  int64_t stage = 0;
  std::vector<ChunkCost> chunks;  // [vpp]
  int64_t peak_in_flight_micro_batches = 0;
  MemoryBreakdown memory;
  int64_t num_parameters = 0;  // per rank of this stage (tp-sharded)
  double optimizer_step_seconds = 0;
  double dp_grad_sync_seconds = 0;  // full duration of the gradient collectives
};

/// Where one step's time goes, on the critical stage.
struct StepBreakdown {
  double pipeline_compute_seconds = 0;  // busy time of the critical stage's F and B
  double tp_comm_exposed_seconds = 0;   // part of the above spent in tp collectives
  double bubble_seconds = 0;            // pipeline fill and drain
  double pp_transfer_seconds = 0;       // exposed stage-to-stage transfers
  double dp_comm_exposed_seconds = 0;   // gradient sync not hidden behind backward
  double optimizer_seconds = 0;
};

struct PlanEstimate {
  Layout layout;
  bool feasible = false;
  std::string rejection_code;    // "memory", "tp_heads", ... (empty when feasible)
  std::string rejection_reason;  // one line, with values
  double step_time_s = 0;
  StepBreakdown breakdown;
  double model_flops_per_step = 0;     // Megatron-LM count, no recompute
  double hardware_flops_per_step = 0;  // executed, recompute included
  double mfu = 0;
  double hfu = 0;
  double model_tflops_per_gpu = 0;
  double tokens_per_s = 0;
  int64_t peak_memory_bytes = 0;      // max over stages
  std::vector<StageEstimate> stages;  // [pp]
  std::vector<CollectiveTraffic> collectives;
};

/// Checks the layout's validity rules (returns a non-empty code and reason on the first
/// violation; memory is not checked here). Codes, in the order checked: "sizes", "gpus",
/// "tp_heads", "tp_kv_heads", "tp_ffn", "tp_node", "stage_layers" (an uneven split that
/// check_stage_layers refuses) or "pp_layers" (even split, l % (pp vpp) != 0), "batch",
/// "vpp_schedule", "interleaved_micro_batches" or "microbatch_group" (check_schedule_shape),
/// "sequence_parallel",
/// "zero", "dp_shard" (check_hybrid_sharding), then check_cp_layout's, then the mixture-of-experts
/// rules (check_moe_layout): "ep", "etp" (negative, or etp != tp on a dense model), with etp != tp
/// "etp_tp" (etp divides tp), "ep_dp" (etp ep divides tp cp dp) and "etp_placement" (tp-dp-pp);
/// then "ep_dp" (ep divides dp cp when etp = tp), "ep_experts", "etp_expert_ffn", "tp_expert_ffn",
/// "moe_sequence_parallel", "moe_zero3", "moe_dp_shard".
struct Validity {
  std::string code;
  std::string reason;
  bool ok() const { return code.empty(); }
};
Validity check_layout(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                      int64_t num_gpus, const Layout& layout, bool allow_tp_across_nodes = false);
/// check_layout's rules before the mixture-of-experts ones (through check_cp_layout's): none of
/// them reads ep or etp.
Validity check_dense_layout(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, int64_t num_gpus,
                            const Layout& layout, bool allow_tp_across_nodes = false);

/// Hybrid sharding rules (dp_shard 0, full sharding, passes): "dp_shard" when dp_shard does not
/// divide dp, the ZeRO stage is not 3, the shard group dp_shard * cp is one rank, or the
/// placement is not tp-dp-pp.
Validity check_hybrid_sharding(const Layout& layout);

/// Context-parallel rules of the layout alone (cp = 1 passes): "cp_seq" (seq_length divisible
/// by 2 cp), "sequence_parallel" (seq_length / cp divisible by tp), "cp_window" (no sliding
/// window shorter than seq_length), "cp_placement" (tp-dp-pp).
Validity check_cp_layout(const models::TransformerConfig& model, const Layout& layout);
/// Context-parallel rules that need the options (cp = 1 passes): "cp_flash_attention",
/// "cp_heads" and "cp_kv_heads" (a2a: heads divisible by tp * cp).
Validity check_cp_options(const models::TransformerConfig& model, const Layout& layout,
                          const PlanOptions& options);

/// Recompute rules that need the model and options: "framework" for FSDP (torchtitan)
/// selective recompute of MoE or MLA blocks, whose op-level policy is not costed.
Validity check_recompute_options(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options);

/// Rules of layout.recompute_modules (the default, core_attn alone, passes): code
/// "recompute_modules" for an empty or unknown set, without recompute selective, and moe_act on
/// a dense model; "framework" outside megatron. check_recompute_options calls it.
Validity check_recompute_modules(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options);

/// Throws InputError naming `field` (a CLI flag) when `modules` (RecomputeModule flags) are
/// asked of a framework without Megatron-Core's list or of a model they need more of (moe_act:
/// MoE layers; mla_up_proj: latent attention): the rules of check_recompute_modules that need
/// no layout.
void check_recompute_modules_request(const models::TransformerConfig& model,
                                     const PlanOptions& options, uint32_t modules,
                                     const std::string& field);

/// Throws InputError naming `field` under fsdp, which has no uniform groups: the rule of
/// check_recompute_group_layers that needs no layout.
void check_recompute_group_layers_request(const PlanOptions& options, const std::string& field);

/// Rules of layout.recompute_group_layers (0 passes): code "recompute_group_layers" when
/// negative, without recompute full or beside recompute_layers; "framework" under fsdp for
/// groups of more than one layer. check_recompute_layers calls it.
Validity check_recompute_group_layers(const Layout& layout, const PlanOptions& options);

/// Rules of layout.recompute_layers (0 passes): code "recompute_layers" when negative or without
/// recompute full; "framework" under deepspeed and fsdp, which have no block method; and those of
/// check_recompute_group_layers. check_recompute_options calls it.
Validity check_recompute_layers(const Layout& layout, const PlanOptions& options);

/// Throws InputError naming `field` (a CLI flag) when the block method is asked of a
/// framework without it (deepspeed, fsdp): the rule of check_recompute_layers that needs no
/// layout.
void check_recompute_layers_request(const PlanOptions& options, const std::string& field);

/// Throws InputError ("<field>: framework fsdp: <why>") when distribute_saved_activations is
/// on under fsdp, the one framework without it.
void check_distribute_saved_activations_options(const PlanOptions& options,
                                                const std::string& field);

/// Layout rules of distribute_saved_activations (off passes): code "saved_activations" when the
/// layout does not recompute full layers, runs sequence parallelism, or (megatron, meshplan)
/// has tp 1.
Validity check_distribute_saved_activations(const Layout& layout, const PlanOptions& options);

/// fp8_param_gather rules that need the model and layout (off passes): code "fp8_param_gather"
/// for MoE models (expert weights' fp8 buffers not modelled) and "framework" for layouts
/// without Megatron's distributed optimizer (zero != 1; Megatron-FSDP's fp8 units not modelled).
Validity check_fp8_param_gather(const models::TransformerConfig& model, const Layout& layout,
                                const PlanOptions& options);

/// Time of one merged forward-backward over a chunk's layers (TransformerModelChunkSchedulePlan
/// .run): forward layer i beside backward layer i of `backward` (the chunk's layers in backward
/// order), the layers one side lacks run alone, replayed on a compute and a communication stream
/// in TransformerLayerSchedulePlan.run's issue order, each node after the same micro-batch's
/// previous node (docs/research/ep-a2a-overlap.md).
/// With `delay_wgrad` (delay_wgrad_compute) the backward's weight gradients run on the
/// computation stream outside the backward's event chain: mlp_weight after mlp_bwd (issue item 5,
/// before dispatch_bwd), attention_weight after pre_dispatch_bwd (item 10).
double ep_overlap_layers_seconds(const std::vector<EpOverlapLayer>& forward,
                                 const std::vector<EpOverlapLayer>& backward,
                                 bool delay_wgrad = false);

/// How much shorter one micro-batch's forward through `forward`'s layers merged with another's
/// backward through `backward`'s layers (in reverse: TransformerModelChunkSchedulePlan.run pairs
/// forward layer i with the backward's i-th popped layer, the last first) runs than the two in
/// sequence: the forward's nodes in sequence plus the backward alone (ep_overlap_layers_seconds
/// with no forward: its nodes in sequence, or with delay_wgrad_compute its weight gradients
/// beside its dispatch) minus the merged ep_overlap_layers_seconds, at least 0. The chunks may
/// differ (interleaved pipelining merges a forward of one chunk with a backward of another).
double ep_overlap_pair_saved_seconds(const ChunkCost& forward, const ChunkCost& backward);

/// Whether the layout's pipeline schedule is the interleaved combined 1F1B of
/// overlap_moe_expert_parallel_comm (generate_schedule's ep_overlap): the option on, pp > 1,
/// interleaved (check_moe_a2a_overlap refuses the other schedules at pp > 1).
bool ep_overlap_schedule(const Layout& layout, const PlanOptions& options);

/// overlap_moe_expert_parallel_comm's rules (off passes), code "moe_a2a_overlap": framework
/// megatron, an MoE model at ep > 1, no full recompute and no "moe" recompute module (Megatron-
/// Core transformer_config.py __post_init__ asserts, d98e8a64), and pp 1: the interleaved
/// schedule's merged slots (schedules.py combined_1f1b_schedule_for_interleaved_pipelining) are
/// not costed; Megatron refuses pp > 1 without vpp.
Validity check_moe_a2a_overlap(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options);

/// Whether `framework` can run `layout`: "" (ok) or code "framework" with a one-line reason
/// naming the framework, the version read and the source that says so (an empty reason when
/// `with_reason` is false: the search formats it once).
Validity check_framework(Framework framework, const Layout& layout, bool with_reason = true);
/// check_framework(options.framework, layout) plus the rules that also read the options or the
/// model: megatron refuses interleaved pp 2 (vpp > 1) without options.overlap_p2p_comm;
/// deepspeed runs only the stage splits its PipelineModule builds (deepspeed_stage_splits)
/// (validity.cpp). The search, plan files and validate call this one.
Validity check_framework(const models::TransformerConfig& model, const PlanOptions& options,
                         const Layout& layout, bool with_reason = true);

/// A caveat on a layout `framework` runs only in part of its software, "" when none, for the
/// plan table and --json ("caveat"): Megatron-FSDP (megatron, ZeRO 2-3) with pp > 1, which
/// Megatron-LM's v1 adapter accepts, none of its tests runs, and its v2 adapter refuses
/// (mcore_fsdp_adapter.py _validate_config, d98e8a64); ZB-H1 under deepspeed, which only
/// Megatron-DeepSpeed's --enable-zbh1-pipeline runs.
std::string framework_caveat(Framework framework, const Layout& layout);

/// Throws InputError when options.gemm_precision is fp8 and the cluster's GPU has no FP8 peak
/// (A100) or the cluster trains in fp32: "<cluster>: precision: fp8: ...", and when
/// options.fp8_param_gather is on without fp8 or under a framework other than megatron:
/// "fp8_param_gather: ...", cross_entropy_loss_fusion on under a framework other than megatron:
/// "cross_entropy_loss_fusion: ...", options.compile on under a framework other than fsdp:
/// "compile: framework <f>: ...", check_grad_reduce_dtype_options with field
/// "grad_reduce_dtype" and check_norm_kernel_options with field "norm_kernel".
void check_precision(const models::ClusterConfig& cluster, const PlanOptions& options);
/// Throws InputError "compile: framework <f>: <why>" when options.compile is on under a
/// framework other than fsdp (torchtitan's --training.compile).
void check_compile_options(const PlanOptions& options);
/// Throws InputError ("<field>: framework <f>: <why>") when overlap_p2p_comm is on for a
/// framework other than Megatron-LM, the one that overlaps pipeline sends.
void check_overlap_p2p_options(const PlanOptions& options,
                               const std::string& field = "options: overlap_p2p_comm");

/// Throws InputError "<field>: ..." when options.grad_reduce_dtype names a dtype the cluster's
/// precision or the framework cannot reduce in (any layout): bf16 in fp32 training; fp32 under
/// deepspeed (communication_data_type not modelled) or meshplan (its executor reduces in the
/// cluster's precision); bf16 under fsdp (reduce_dtype bf16 not modelled). Unset passes.
void check_grad_reduce_dtype_options(const models::ClusterConfig& cluster,
                                     const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: eager: ..." when options.norm_kernel is eager under a framework
/// other than fsdp (torchtitan's model.norm_type) or with options.compile on (Inductor fuses
/// the norm).
void check_norm_kernel_options(const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: eager: ..." when options.norm_kernel is eager for a model whose
/// norm is not rmsnorm (torchtitan's eager norm is its hand-written RMSNorm).
void check_norm_kernel_model(const models::TransformerConfig& model, const PlanOptions& options,
                             const std::string& field = "norm_kernel");
/// Throws InputError "<field>: off: ..." when the model has attention sinks (gpt-oss) and
/// options.flash_attention is off: sinks are costed inside the fused attention kernel only.
void check_attention_sinks_kernel(const models::TransformerConfig& model,
                                  const PlanOptions& options,
                                  const std::string& field = "flash_attention");
/// Throws InputError "<field>: framework <f>: ..." when the model has multi-token prediction
/// (mtp_num_layers > 0) and the framework is not megatron (only Megatron-Core's --mtp-num-layers
/// builds it), and "<field>: ...: overlap_moe_expert_parallel_comm ..." with the EP overlap
/// (the MTP layer's place in the merged schedule is not costed).
void check_mtp_options(const models::TransformerConfig& model, const PlanOptions& options,
                       const std::string& field = "mtp_num_layers");
/// Throws InputError "<field>: ..." when options.flash_attention_version is not 1 or 2, or is 1
/// with flash_attention off (no fused kernel to be of generation 1).
void check_flash_attention_version(const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: ..." when options.fsdp_version is not 1 or 2, or is 1 under a
/// framework other than fsdp.
void check_fsdp_version(const PlanOptions& options, const std::string& field);
/// options.fsdp_head_in_root, resolved (set: as given; unset: fsdp_version == 1).
bool fsdp_head_in_root(const PlanOptions& options);
/// Throws InputError "<field>: ..." when options.fsdp_head_in_root is set under a framework
/// other than fsdp.
void check_fsdp_head_in_root(const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: <impl> under framework <f>: ..." when options.optimizer_impl is
/// not fused under a framework other than fsdp.
void check_optimizer_impl_options(const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: off with the fused optimizer: ..." (weight decay is only read by
/// the unfused implementations).
void check_weight_decay_options(const PlanOptions& options, const std::string& field);
/// Throws InputError "<field>: flex: framework <f>: ..." when options.moe_dispatcher is flex
/// under a framework other than megatron (the flex dispatcher is Megatron-Core's).
void check_moe_dispatcher_options(const PlanOptions& options, const std::string& field);
/// moe_dispatcher rules that need the model and layout (alltoall passes): code "moe_dispatcher"
/// for a dense model, ep 1 (Megatron-Core asserts TPxEP > 1 for DeepEP; nothing to dispatch) and
/// etp > 1 (the flex dispatcher's TPxEP group, which sends each token to every etp rank of its
/// experts, is not modelled).
Validity check_moe_dispatcher(const models::TransformerConfig& model, const Layout& layout,
                              const PlanOptions& options);
/// grad_reduce_dtype rules that need the layout (unset passes): code "framework" for fp32 under
/// megatron with zero >= 2 (Megatron-FSDP's fp32 main grads are not modelled).
Validity check_grad_reduce_dtype(const Layout& layout, const PlanOptions& options);

/// Full estimate of one layout (valid or not: an invalid one comes back infeasible, with its
/// reason). Throws nothing for infeasible layouts.
PlanEstimate estimate_plan(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const Layout& layout,
                           const PlanOptions& options = {});

/// The vocabulary padding divisor d a plan is costed with: options.make_vocab_size_divisible_by
/// when given, else the framework's default: 128 under megatron (Megatron-LM d98e8a64
/// arguments.py `--make-vocab-size-divisible-by`) and deepspeed (Megatron-DeepSpeed's same flag,
/// GPT-NeoX's `make_vocab_size_divisible_by`, both 128), 1 under fsdp (torchtitan builds the
/// tokenizer's vocabulary as it is) and meshplan (its executor builds whatever rows the divisor
/// pads to; 1 keeps the plan's vocabulary at a multiple of tp only).
int64_t vocab_size_divisible_by(const PlanOptions& options);

/// Vocabulary rows as the framework builds them: V padded to the smallest multiple of d tp,
/// ceil(V / (d tp)) d tp with d = vocab_size_divisible_by(options) (Megatron-LM build_tokenizer.py
/// vocab_size_with_padding: "divisible by model parallel size and still having GPU friendly
/// size"), so the vocab-parallel embedding and LM head split evenly over tp.
int64_t padded_vocab_size(const models::TransformerConfig& model, int64_t tp,
                          const PlanOptions& options);

/// "" when the framework builds the vocabulary padded as options say, else why not: a divisor
/// above 1 under fsdp (torchtitan pads nothing), or a divisor outside 1..2^20 (1,048,576). The
/// message names the field as `field`.
std::string vocab_padding_error(const PlanOptions& options, std::string_view field);
/// Throws InputError with vocab_padding_error's message when it has one (check_precision calls
/// it with the plan-file name, make_vocab_size_divisible_by; the CLI with its flag).
/// Layout-independent and cheap when it passes (no allocation): the search calls it per layout.
void check_vocab_padding_options(const PlanOptions& options, std::string_view field);

/// Parameters one rank of pipeline stage `stage` holds (tp-sharded matrices, replicated norms
/// and row-parallel biases, padded vocab-parallel embedding on the first stage, untied or
/// pipeline-tied LM head on the last). The executor allocates exactly this many.
int64_t stage_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage, const PlanOptions& options);

/// What the compute cost tells one transformer layer by: an MoE or a dense MLP
/// (TransformerConfig::is_moe_layer), attention over the sliding window or full causal
/// attention (TransformerConfig::is_windowed_layer). A chunk costs the sum of its layers' kinds.
struct LayerKind {
  bool moe = false;
  bool windowed = false;
  bool operator==(const LayerKind&) const = default;
};
inline constexpr std::array<LayerKind, 4> kLayerKinds = {
    {{false, false}, {false, true}, {true, false}, {true, true}}};
LayerKind layer_kind(const models::TransformerConfig& model, int64_t layer);
/// The kind of each multi-token-prediction depth's transformer layer: the decoder's last layer's
/// (Megatron-Core gpt_layer_specs.py get_gpt_mtp_block_spec uses the decoder's last layer spec).
LayerKind mtp_layer_kind(const models::TransformerConfig& model);
/// Whether the word embedding's gradient is all-reduced between the first and the last pipeline
/// stage (Megatron-Core finalize_model_grads.py _allreduce_word_embedding_grads): pp > 1 with a
/// tied head, or with MTP, whose last stage holds a copy of the embedding (gpt_model.py builds
/// `embedding` where `pre_process or mtp_process`).
bool embedding_gradient_all_reduced(const models::TransformerConfig& model, const Layout& layout);
/// The stage's multi-token-prediction depths: all mtp_num_layers of them on the last stage
/// (Megatron-Core multi_token_prediction.py mtp_on_this_rank without a custom layout, in the last
/// virtual chunk), 0 on the others. Each is one transformer layer of mtp_layer_kind.
int64_t stage_mtp_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage);
/// Whether full recompute re-runs the MTP depths: Megatron-Core multi_token_prediction.py
/// MultiTokenPredictionLayer._checkpointed_forward checkpoints each depth under the uniform
/// method (recompute_layers 0, one layer per group) and skips it under the block method.
bool mtp_recomputed_under_full(const Layout& layout);
/// Forward FLOPs of the MTP module outside its transformer layers, for `tokens` tokens: per depth
/// eh_proj 2 T (2h) h, plus Megatron-LM's count of the three norms, 2 T 3h (training.py
/// num_floating_point_operations, d98e8a64 "MTP norms and proj"), and one more logits GEMM,
/// 2 T h V ("MTP + final logit"). 0 without MTP.
double mtp_extra_forward_flops(const models::TransformerConfig& model, double tokens);

/// Global transformer-layer indices [first, end) of one model chunk on one pipeline stage.
struct LayerRange {
  int64_t first = 0;
  int64_t end = 0;
  int64_t count() const { return end - first; }
  /// MoE layers among them (TransformerConfig::is_moe_layer); 0 for a dense model.
  int64_t num_moe(const models::TransformerConfig& model) const;
  /// Layers among them of kind `kind` (layer_kind).
  int64_t num_of_kind(const models::TransformerConfig& model, LayerKind kind) const;
};

/// The layers of a model chunk's `range` whose forward runs again: all of them under full
/// recompute, its first recompute_layers under Megatron's block method, none otherwise
/// (recomputed_layer_count).
inline LayerRange recomputed_layers(const Layout& layout, const LayerRange& range) {
  return LayerRange{range.first, range.first + recomputed_layer_count(layout, range.count())};
}

/// The layers of a model chunk's `range` whose forward runs again as the plan's framework runs
/// it: recomputed_layers(layout, range), except under DeepSpeed's pipeline engine (framework
/// deepspeed, pp > 1), which checkpoints only runs of activation_checkpoint_interval functions
/// made of transformer layers alone: stage 0 keeps the activations of its first N - 2 layers
/// (its first run also holds two functions that are not layers) and the last stage those of its
/// last L mod N (their run also holds the final norm and the LM head). parameters.cpp cites it.
LayerRange recomputed_layers(const models::TransformerConfig& model, const Layout& layout,
                             const PlanOptions& options, const LayerRange& range);
/// Layer inputs a chunk keeps per micro-batch for its recompute: one per group of
/// recompute_group_layers (one per layer when unset) of its recomputed_layers, ceil(R / N).
int64_t checkpointed_input_count(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options, const LayerRange& range);
/// checkpointed_input_count over the recomputed layers' count (1 when none is recomputed): what
/// a chunk's kept inputs cost per recomputed layer, every layer input having the same bytes.
double checkpointed_inputs_per_recomputed_layer(const models::TransformerConfig& model,
                                                const Layout& layout, const PlanOptions& options,
                                                const LayerRange& range);

/// Layers of one kind (MoE or dense) in a chunk's `range` that are costed as layout.recompute
/// says: all of them, except under full recompute, where only its recomputed_layers are (the
/// first recompute_layers under Megatron's block method, DeepSpeed's checkpointed runs); the
/// others are costed as without recompute. Memory and chunk cost both read it.
int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range, bool moe_layer);
/// The same for the layers of kind `kind` (chunk cost: windowed and full layers apart).
int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range, LayerKind kind);

/// The one rule of which layers a (stage, chunk) holds; planner, simulator and executor all
/// read it. Even split (layout.stage_layers empty): virtual stage v = chunk * pp + stage holds
/// [v L, (v + 1) L), L = l / (pp vpp) (Narayanan et al. 2021, Sec. 2.2.2). Uneven split:
/// chunk c of stage s holds n_s / vpp layers starting at c l / vpp + sum_{j<s} n_j / vpp, as
/// Megatron-Core's get_transformer_layer_offset and get_num_layers_to_build place them (vpp 1:
/// stage s holds n_s layers after those of stages 0..s-1). Uneven split whose counts vpp does
/// not divide: Megatron-Core's embedding/loss-accounted split (--account-for-embedding-in-
/// pipeline-split, --account-for-loss-in-pipeline-split): L layers per stage, L - 1 on the
/// first and/or last, every chunk L / vpp layers except the first chunk of stage 0 and/or the
/// last chunk of the last stage, one fewer (they carry the embedding, the LM head and loss);
/// Llama 3 405B's 126 layers on pp 16 with vpp 8 leave those two chunks no layer at all.
/// Any other uneven split: stage s's n_s layers over its chunks as evenly as they go, the
/// longer chunks last (chunk_layer_count: 7 layers in 8 chunks leave chunk 0 empty, 9 give
/// chunk 7 two), in virtual-stage order as Megatron-Core's --pipeline-model-parallel-layout
/// lists them. A virtual-stage list (Layout::virtual_stage_layers, from a layout string) gives
/// each virtual stage its count, in that order. Precondition: check_layout passed ("pp_layers",
/// "stage_layers").
LayerRange stage_layer_range(const models::TransformerConfig& model, const Layout& layout,
                             int64_t stage, int64_t chunk);
/// Layers of chunk `chunk` (0..vpp-1) of a stage of `stage_layer_count` layers under the general
/// uneven rule (stage_layer_range): n / vpp, plus one in the last n % vpp chunks.
int64_t chunk_layer_count(int64_t stage_layer_count, int64_t vpp, int64_t chunk);
/// Most layers any chunk of pipeline stage `stage` holds (the unit of in-flight activations).
int64_t max_chunk_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage);
/// Whether the uneven `stage_layers` split into vpp chunks is the embedding/loss-accounted one
/// (some count not divisible by vpp; see stage_layer_range). False for the even split ({}).
bool is_accounted_split(const std::vector<int64_t>& stage_layers, int64_t vpp);
/// Whether `stage_layers` ({}: the even split of num_layers over pp) splits into vpp chunks by
/// one of Megatron-Core's flag rules: even l % (pp vpp) == 0, every count divisible by vpp, or
/// the embedding/loss-accounted form (the search's vpp choices; other splits need a pipeline
/// layout, see stage_layer_range).
bool split_allows_vpp(const std::vector<int64_t>& stage_layers, int64_t num_layers, int64_t pp,
                      int64_t vpp);
/// Transformer layers of pipeline stage `stage`, over all its chunks.
int64_t stage_layer_count(const models::TransformerConfig& model, const Layout& layout,
                          int64_t stage);

/// Megatron-Core's uneven split (arguments.py --decoder-first-pipeline-num-layers and
/// --decoder-last-pipeline-num-layers; transformer_config.py __post_init__): the given first
/// and/or last stage counts (each >= 1), the other layers evenly over the remaining stages
/// (which must divide them). Returns the per-stage list, or {} when it is the even split.
/// Throws InputError "<field>: ..." naming what is wrong, with values.
std::vector<int64_t> first_last_stage_layers(int64_t num_layers, int64_t pp,
                                             std::optional<int64_t> first,
                                             std::optional<int64_t> last, const std::string& field);

/// Checks an explicit per-stage list against the model and pp: pp entries, each >= 1 (as
/// Megatron-Core requires of first and last), summing to num_layers; and a virtual-stage list
/// (Layout::virtual_stage_layers): pp * vpp entries, each >= 0, summing per stage to the
/// stage's count (at least one). Any vpp is admitted
/// (stage_layer_range says how the chunks split). Returns "" when fine, else one line without
/// the source (check_layout's "stage_layers" reason).
std::string check_stage_layers(const models::TransformerConfig& model, const Layout& layout);

/// `stage_layers` with the even split mapped to {} (so even layouts compare and serialise as
/// before the field existed).
std::vector<int64_t> canonical_stage_layers(std::vector<int64_t> stage_layers);

/// DeepSpeed PipelineModule's partition_method (deepspeed/runtime/pipe/module.py
/// _partition_layers): "type:transformer" balances the count of transformer layers (what GPT-NeoX
/// and Megatron-DeepSpeed pass), "parameters" (PipelineModule's default) the parameters of every
/// layer spec, the embedding and LM head included, and "type:transformer|embedding"
/// (Megatron-DeepSpeed's --pp-partition-method, as GLM-130B trained) the count of transformer
/// layers and embedding specs, the tied LM head being one.
enum class DeepSpeedPartition { kTypeTransformer, kParameters, kTypeTransformerEmbedding };
inline constexpr std::array<DeepSpeedPartition, 3> kDeepSpeedPartitions = {
    DeepSpeedPartition::kTypeTransformer, DeepSpeedPartition::kParameters,
    DeepSpeedPartition::kTypeTransformerEmbedding};
std::string to_string(DeepSpeedPartition method);

/// Transformer layers per stage, [pp], that DeepSpeed 0.19.6's partition_balanced gives `method`
/// over a GPT pipeline's layer specs (embedding, the layers, final norm, LM head; parameters per
/// tensor-parallel rank, the vocabulary padded as `options` say). A stage may get 0 layers when
/// pp is close to the layer count.
std::vector<int64_t> deepspeed_stage_layers(const models::TransformerConfig& model, int64_t tp,
                                            int64_t pp, DeepSpeedPartition method,
                                            const PlanOptions& options);

/// Which method builds `layout`'s split (canonical form; the first of kDeepSpeedPartitions that
/// does), or nothing when none does.
std::optional<DeepSpeedPartition> deepspeed_partition_of(const models::TransformerConfig& model,
                                                         const Layout& layout,
                                                         const PlanOptions& options);

/// The splits a DeepSpeed pipeline can run for pp stages: deepspeed_stage_layers of every method,
/// canonical (canonical_stage_layers: even is {}), without duplicates, leaving out any that
/// gives a stage no transformer layer.
std::vector<std::vector<int64_t>> deepspeed_stage_splits(const models::TransformerConfig& model,
                                                         int64_t tp, int64_t pp,
                                                         const PlanOptions& options);

/// A split a file states (a plan's or a published run's stage_layers): checked as written against
/// the model and pp (check_stage_layers: count, sign, sum), even when it is the even one, then
/// canonical_stage_layers. Throws InputError "<where>: <reason>".
std::vector<int64_t> checked_stage_layers(const models::TransformerConfig& model, int64_t pp,
                                          std::vector<int64_t> stage_layers,
                                          const std::string& where);

/// The layers of model chunk `chunk` on pipeline rank `stage`: stage_layer_range's, the one
/// rule (even or uneven split); its num_moe counts the MoE layers among them.
LayerRange chunk_layers(const models::TransformerConfig& model, const Layout& layout, int64_t stage,
                        int64_t chunk);

/// Expert parameters one rank of stage `stage` holds: its E / ep experts of every MoE layer of
/// the stage, tp-sharded (0 for a dense model). Included in stage_parameter_count.
int64_t stage_expert_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options);

/// Bytes one rank sends in one MoE all-to-all (token dispatch or combine) of one micro-batch:
/// its T / sp tokens, each to k experts, h elements of e bytes (Megatron's alltoall token
/// dispatcher; dropless). (ep - 1) / ep of it leaves the rank. Exact for the forward dispatch
/// and the combine's backward (every token goes to k experts whatever the routing); the combine
/// and the dispatch's backward send back the rows this rank's experts received, which is this
/// balanced figure only on average over the ep group (the group's sum is always ep times it).
/// moe_load_imbalance scales the experts' GEMMs, not these bytes.
int64_t moe_all_to_all_bytes(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout);

/// P(a token's k experts, k distinct of E under balanced routing, include at least one of a
/// given `group_experts`): 1 - C(E - g, k) / C(E, k).
double moe_expected_groups_hit(int64_t num_experts, int64_t group_experts,
                               int64_t experts_per_token);
/// P(a token's k experts include one of the consecutive experts [first_expert, first_expert +
/// expert_count)) under balanced routing: moe_expected_groups_hit(E, count, k) without routing
/// groups; with the model's group-limited routing (router_num_groups G, router_group_topk M),
/// M of the G groups equally likely and k / M distinct experts in each chosen group (moe_cost.cpp
/// says why and how close that is).
double moe_expected_range_hit(const models::TransformerConfig& model, int64_t first_expert,
                              int64_t expert_count);
/// Expected distinct destinations a token reaches when the E experts are split evenly, in
/// order, over `destinations` (ep ranks or nodes): the sum of their moe_expected_range_hit;
/// G (1 - C(E - E/G, k) / C(E, k)) without routing groups.
double moe_expected_destinations(const models::TransformerConfig& model, int64_t destinations);

/// One MoE layer's flex dispatch and combine (DeepEP normal kernels) of one micro-batch on one
/// rank of stage `stage`'s ep group (moe_cost.cpp; etp 1): its T / sp tokens of h elements,
/// each sent over RDMA once per destination node other than its own (inter_node_bytes) and
/// forwarded over NVLink once per destination GPU (nvlink_bytes); rdma_logical_bytes counts the
/// own node too, the count DeepEP's published RDMA bandwidth is measured on. All zero at ep 1.
struct MoeFlexTraffic {
  int64_t nodes = 1;             // nodes the ep group spans
  int64_t local_members = 1;     // most ep ranks on one node
  double destination_nodes = 0;  // expected nodes a token reaches, its own included
  double destination_gpus = 0;   // expected ep ranks a token reaches
  double inter_node_bytes_per_rank = 0;
  double rdma_logical_bytes_per_rank = 0;
  double nvlink_bytes_per_rank = 0;
  double dispatch_seconds = 0;  // one dispatch (and one combine backward)
  double combine_seconds = 0;   // one combine (and one dispatch backward)
};
MoeFlexTraffic moe_flex_traffic(const models::TransformerConfig& model,
                                const models::ClusterConfig& cluster, const Layout& layout,
                                int64_t stage);
/// One MoE layer's dispatch plus combine of one micro-batch on stage `stage` under
/// options.moe_dispatcher (the same pair again in its backward): 2 moe_all_to_all_seconds for
/// alltoall, the flex kernels' dispatch_seconds + combine_seconds for flex.
double moe_dispatch_combine_seconds(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, int64_t stage);

/// Bytes of one expert's token count in the MoE dispatcher's and router's count collectives:
/// Megatron-Core counts routed tokens in int64 (routing_map.sum() of a bool tensor).
inline constexpr int64_t kMoeTokenCountBytes = 8;

/// Bytes (gathered output) of the token-count all-gather before each MoE layer's forward
/// dispatch: every ep rank's E int64 counts (Megatron-Core token_dispatcher.py
/// MoEAlltoAllTokenDispatcher.preprocess, routing_map.sum(dim=0)), ep E 8.
int64_t moe_token_count_bytes(const models::TransformerConfig& model, const Layout& layout);

/// Ring collective time on a group of `group_size` ranks placed `stride` ranks apart in the
/// global numbering (tp: 1, dp: tp, ...), starting at global rank `first_rank` (a send goes
/// from first_rank to first_rank + stride). Groups inside one node use NVLink; groups that span
/// nodes are costed hierarchically (intra-node tier, then inter-node tier) over the nodes they
/// actually touch.
double collective_seconds(const models::ClusterConfig& cluster, CollectiveKind kind,
                          int64_t message_bytes, int64_t group_size, int64_t stride,
                          int64_t first_rank = 0);

/// Whether pipeline sends are scattered over tp and the receiver all-gathers them: the
/// scatter_gather_pipeline option with tp > 1 and no sequence parallelism (which already sends
/// 1/t of the tensor).
/// `gradient`: for the gradient sends, which pipeline_grad_scatter_gather false leaves whole.
bool pipeline_scatter_gather(const Layout& layout, const PlanOptions& options,
                             bool gradient = false);

/// One stage-to-stage activation (`gradient` false) or gradient transfer leaving `stage`: the
/// collective inventory's send over the slower of the stage's two boundaries, plus the
/// receiver's tp all-gather when scatter/gather is in effect for that direction.
double pipeline_transfer_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, int64_t stage, bool gradient = false);

/// Throws InputError "<field>: false under framework <f> ..." when deepspeed_grad_all_reduce is
/// false under a framework other than deepspeed (only DeepSpeed's reduce has the choice).
void check_deepspeed_grad_all_reduce_options(const PlanOptions& options, const std::string& field);

/// overlap_tp_comm under framework deepspeed: refused. Megatron-DeepSpeed, what runs DeepSpeed
/// plans with tp > 1, overlaps no tensor-parallel communication under --deepspeed (megatron/
/// arguments.py validate_args at f4157bea turns async_tensor_model_parallel_allreduce off).
void check_overlap_tp_comm_options(const PlanOptions& options, const std::string& field);

/// Throws InputError "<field>: false ..." when pipeline_grad_scatter_gather is false under a
/// framework other than deepspeed or without scatter_gather_pipeline (nothing to leave whole).
void check_pipeline_grad_scatter_gather_options(const PlanOptions& options,
                                                const std::string& field);

/// Effective inverse size of an m x n x k GEMM (m x k times k x n), in 1/elements:
/// 1/k + w (1/m + 1/n) with the model's fixed w (compute_cost.cpp). For a cube of side x it is
/// (1 + 2w) / x.
double gemm_inverse_size(double m, double n, double k);

/// Time of one m x n x k GEMM (2mnk FLOPs, k the reduced dimension) at the cluster's peak times
/// the shape-dependent efficiency e_max / (1 + x_half * gemm_inverse_size(m, n, k))
/// (compute_cost.cpp). meshplan calibrate fits e_max and x_half with it. FP8 GEMMs (Transformer
/// Engine) run at the GPU's FP8 peak with their own e_max and the same x_half.
double gemm_seconds(const models::ClusterConfig& cluster, double m, double n, double k,
                    GemmPrecision precision = GemmPrecision::kBf16);

/// Tokens of one micro-batch one rank computes: micro_batch * seq_length / cp (context
/// parallelism shards the sequence; Megatron-Core get_batch_on_this_cp_rank gives each cp rank
/// 2 of the 2 cp sequence chunks). Precondition: divisible (check_layout "cp_seq").
int64_t rank_micro_batch_tokens(const models::TransformerConfig& model, const Layout& layout);

/// Context-parallel attention traffic of one layer and one micro-batch on one rank (of its cp
/// group), and the part of it the attention compute cannot hide. cp_attention.cpp gives the
/// formulas and their sources.
struct CpAttentionComm {
  struct Call {
    std::string what;                                 // the collective inventory's description
    CollectiveKind kind = CollectiveKind::kSendRecv;  // send_recv (p2p ring), all_to_all (a2a)
    int64_t message_bytes = 0;                        // one call, nccl-tests "size"
    int64_t forward_calls = 0;                        // per layer forward (and recomputed one)
    int64_t backward_calls = 0;                       // per layer backward
  };
  std::vector<Call> calls;              // empty when cp = 1
  double forward_exposed_seconds = 0;   // per layer forward
  double backward_exposed_seconds = 0;  // per layer backward
};
/// Precondition: check_layout passed.
CpAttentionComm cp_attention_comm(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// (query, key) pairs one sequence of `seq_tokens` attends over under a window of
/// `window_tokens` (0: none): s (s + 1) / 2 for full causal attention; w (w + 1) / 2 + (s - w) w
/// when 0 < w < s (query i attends keys i - w < j <= i: the first w queries see 1..w keys, the
/// rest w each). The one place of the count; flops.cpp attention_window_fraction uses it.
double attention_key_pairs(int64_t seq_tokens, int64_t window_tokens);
/// attention_key_pairs of the model's window over those of full causal attention at its
/// seq_length: 1 without a window (or one of seq_length or more), below 1 with one. Scales the
/// attention core's FLOPs (layer_forward_flops) and FlashAttention's time on a windowed layer
/// (LayerKind::windowed); a full-attention layer's share is 1.
double attention_window_fraction(const models::TransformerConfig& model);

/// Megatron-LM model FLOPs of one step (no recompute), generalised to GQA and SwiGLU:
/// 6 * tokens * (matmul parameters per token) + attention scores term, see flops.cpp. Each
/// windowed layer (TransformerConfig::is_windowed_layer) scales its attention term by
/// attention_window_fraction.
double model_flops_per_step(const models::TransformerConfig& model, int64_t global_batch);

}  // namespace meshplan::planner
