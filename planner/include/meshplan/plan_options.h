#pragma once
// The knobs of a training run that are not part of the layout (PlanOptions), the enumerations
// they take, and how the plan file and the CLI spell those (to_string, parse_*).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/layout.h"
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

}  // namespace meshplan::planner
