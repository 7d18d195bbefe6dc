#pragma once
// The rules a layout and its options must satisfy before they are costed: check_layout's codes,
// each framework's limits (check_framework), and the option checks that throw InputError naming
// the field. A refused layout carries its Validity's code and one-line reason.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/plan_options.h"

namespace meshplan::planner {

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

}  // namespace meshplan::planner
