// Validity rules of a layout, each with a named reason.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "validity_internal.h"

namespace meshplan::planner {

Validity reject(std::string code, std::string reason) {
  return Validity{std::move(code), std::move(reason)};
}

Validity refuse(Framework framework, const std::string& why, const Layout& layout) {
  return reject("framework", fmt::format("{} cannot run this layout: {} ({})", to_string(framework),
                                         why, describe(layout)));
}

namespace {

// Expert tensor parallelism other than tp. Megatron-Core checks only that etp * ep * pp divides
// the world size (parallel_state.py initialize_model_parallel: "world_size ... is not divisible
// by expert_tensor_model_pipeline_parallel size"), i.e. etp * ep divides tp * cp * dp. meshplan
// models the expert tp group inside the dense tp group, so etp divides tp ("etp_tp"), and the
// expert grid for placement tp-dp-pp only (under tp-pp-dp Megatron-Core asserts that the
// attention and expert data-parallel sizes agree, a different grid).
Validity check_expert_tensor_parallel(const Layout& layout) {
  const int64_t etp = expert_tensor_parallel(layout);
  if (layout.tp % etp != 0) {
    return reject("etp_tp", fmt::format("etp must divide tp: meshplan models the expert tensor-"
                                        "parallel group inside the tp group ({} % {})",
                                        layout.tp, etp));
  }
  const int64_t stage_ranks = layout.tp * grad_group_size(layout);
  if (stage_ranks % (etp * layout.ep) != 0) {
    return reject("ep_dp", fmt::format("etp*ep must divide tp*cp*dp: the expert grid etp x ep x "
                                       "expert-dp covers a stage's ranks ({} % {})",
                                       stage_ranks, etp * layout.ep));
  }
  if (layout.placement != Placement::kTpDpPp) {
    return reject("etp_placement",
                  fmt::format("etp != tp needs placement tp-dp-pp (Megatron-Core's "
                              "expert order tp-ep-dp-pp); not modelled under {} "
                              "(etp {}, tp {})",
                              to_string(layout.placement), etp, layout.tp));
  }
  return {};
}

// Mixture-of-experts rules, as Megatron-LM's arguments.py validates them
// (megatron/training/arguments.py, validate_args): "num_experts must be non None to use expert
// model parallelism", "num_experts must be divisible by expert_model_parallel_size", and "When
// using MoE and tensor parallelism, sequence parallelism must be used"; ep divides the data
// parallel size (parallel_state.py builds the expert groups inside dp x cp).
Validity check_moe_layout(const models::TransformerConfig& model, const Layout& layout) {
  if (layout.ep < 1) {
    return reject("ep", fmt::format("ep must be positive ({})", layout.ep));
  }
  if (layout.etp < 0) {
    return reject("etp", fmt::format("etp must be positive ({})", layout.etp));
  }
  const int64_t etp = expert_tensor_parallel(layout);
  if (!model.is_moe()) {
    if (layout.ep > 1) {
      return reject("ep", fmt::format("expert parallelism needs a mixture-of-experts model (ep {}, "
                                      "num_experts 0)",
                                      layout.ep));
    }
    if (etp != layout.tp) {
      return reject("etp", fmt::format("expert tensor parallelism needs a mixture-of-experts "
                                       "model (etp {}, num_experts 0)",
                                       etp));
    }
    return {};
  }
  if (etp != layout.tp) {
    if (Validity expert_tp = check_expert_tensor_parallel(layout); !expert_tp.ok()) {
      return expert_tp;
    }
  }
  // Megatron-Core lays the experts over the dense dp x cp ranks (parallel_state.py: expert
  // ranks tp-ep-dp-pp, ep * expert_dp = dp * cp), so ep divides dp * cp.
  if (grad_group_size(layout) % layout.ep != 0 && etp == layout.tp) {
    return reject("ep_dp", fmt::format("ep must divide dp*cp: experts are split over data- and "
                                       "context-parallel ranks ({} % {})",
                                       grad_group_size(layout), layout.ep));
  }
  if (model.num_experts % layout.ep != 0) {
    return reject("ep_experts", fmt::format("num_experts not divisible by ep ({} % {})",
                                            model.num_experts, layout.ep));
  }
  // Routed experts are split over etp, shared experts (an ordinary MLP) over tp.
  if (etp != layout.tp && model.expert_ffn_hidden_size % etp != 0) {
    return reject("etp_expert_ffn", fmt::format("expert_ffn_hidden_size not divisible by etp "
                                                "({} % {})",
                                                model.expert_ffn_hidden_size, etp));
  }
  if ((etp == layout.tp && model.expert_ffn_hidden_size % layout.tp != 0) ||
      model.shared_expert_ffn_hidden_size % layout.tp != 0) {
    return reject(
        "tp_expert_ffn",
        fmt::format("expert_ffn_hidden_size or shared_expert_ffn_hidden_size not "
                    "divisible by tp ({}, {} % {})",
                    model.expert_ffn_hidden_size, model.shared_expert_ffn_hidden_size, layout.tp));
  }
  if (layout.tp > 1 && !layout.sequence_parallel) {
    return reject("moe_sequence_parallel",
                  "Megatron-LM runs mixture-of-experts with tp > 1 only with sequence parallelism");
  }
  if (layout.zero == 3 && layout.dp > 1) {
    return reject("moe_zero3", "ZeRO-3 of expert parameters is not modelled");
  }
  // Megatron-Core splits the expert data-parallel group into instances too (parallel_state.py
  // intra_partial_expert_data_parallel_size); expert_dp_buckets reduces over the whole group.
  if (hybrid_sharded(layout)) {
    return reject("moe_dp_shard", fmt::format("hybrid sharding of a mixture-of-experts model is "
                                              "not modelled: its expert gradients' instances "
                                              "(dp_shard {} of dp {})",
                                              dp_shard_size(layout), layout.dp));
  }
  return {};
}

}  // namespace

std::string framework_caveat(Framework framework, const Layout& layout) {
  if (framework == Framework::kMegatron && layout.zero >= 2 && layout.pp > 1 && layout.dp > 1) {
    return "Megatron-FSDP with pp > 1: accepted by Megatron-LM's v1 adapter, run by none of its "
           "tests, refused by its v2 adapter (mcore_fsdp_adapter.py, d98e8a64)";
  }
  if (framework == Framework::kDeepSpeed && layout.schedule == ScheduleKind::kZbH1 &&
      layout.pp > 1) {
    return "ZB-H1 runs under Megatron-DeepSpeed only (--enable-zbh1-pipeline "
           "--enable-zbh1-exact-semantics, f4157bea; --emit megatron-deepspeed writes them), not "
           "under DeepSpeed's own pipeline engine or GPT-NeoX";
  }
  return "";
}

bool backward_waits_for_reduce_scatter(Framework framework) {
  return framework != Framework::kMeshplan;
}

// Megatron-LM steps with Transformer Engine's or Apex's FusedAdam (megatron/core/optimizer/
// __init__.py imports torch's AdamW only when neither is installed, and no flag selects it);
// DeepSpeed's passes around its optimizer are not costed (estimate.cpp), so an unfused one
// there would be half a model. meshplan's executor runs its own update.
void check_optimizer_impl_options(const PlanOptions& options, const std::string& field) {
  if (options.optimizer_impl == OptimizerImpl::kFused || options.framework == Framework::kFsdp) {
    return;
  }
  throw InputError(
      fmt::format("{}: {} under framework {}: only framework fsdp (torch.optim.AdamW's foreach and "
                  "for-loop paths, Composer's DecoupledAdamW) steps with an unfused optimizer here",
                  field, to_string(options.optimizer_impl), to_string(options.framework)));
}

void check_weight_decay_options(const PlanOptions& options, const std::string& field) {
  if (options.optimizer_impl == OptimizerImpl::kFused && !options.weight_decay) {
    throw InputError(fmt::format(
        "{}: off with the fused optimizer: a fused AdamW decays inside its one kernel, so the "
        "decay costs nothing to leave out; only foreach, for-loop and composer read it",
        field));
  }
}

// torchtitan's model.norm_type (norms.py build_norm at 1ea476e9f): "rmsnorm" is the
// hand-written RMSNorm run op by op; compiled (--training.compile), Inductor fuses it like any
// other element-wise chain, so eager means nothing there.
void check_norm_kernel_options(const PlanOptions& options, const std::string& field) {
  if (options.norm_kernel == NormKernel::kFused) {
    return;
  }
  if (options.framework != Framework::kFsdp) {
    throw InputError(
        fmt::format("{}: eager under framework {}: only torchtitan's model.norm_type = \"rmsnorm\" "
                    "(framework fsdp) runs the norm eager",
                    field, to_string(options.framework)));
  }
  if (options.compile) {
    throw InputError(fmt::format(
        "{}: eager with compile on: torch.compile fuses the norm (use fused or compile off)",
        field));
  }
}

void check_deepspeed_grad_all_reduce_options(const PlanOptions& options, const std::string& field) {
  if (options.deepspeed_grad_all_reduce || options.framework == Framework::kDeepSpeed) {
    return;
  }
  throw InputError(fmt::format(
      "{}: false under framework {}: only DeepSpeed's ZeRO 1-2 reduce chooses between an "
      "all-reduce and per-rank reduces (framework deepspeed)",
      field, to_string(options.framework)));
}

void check_overlap_tp_comm_options(const PlanOptions& options, const std::string& field) {
  if (options.overlap_tp_comm && options.framework == Framework::kDeepSpeed) {
    throw InputError(fmt::format(
        "{}: on under framework deepspeed: Megatron-DeepSpeed overlaps no tensor-parallel "
        "communication under --deepspeed (arguments.py validate_args turns "
        "async_tensor_model_parallel_allreduce off)",
        field));
  }
}

// DeeperSpeed eb7f5cff runtime/pipe/engine.py line 122 (is_grad_partitioned = False) sends the
// gradients whole; Megatron-LM splits both directions, DeepSpeed too since #1407 (e2fdd254).
void check_pipeline_grad_scatter_gather_options(const PlanOptions& options,
                                                const std::string& field) {
  if (options.pipeline_grad_scatter_gather) {
    return;
  }
  if (options.framework != Framework::kDeepSpeed) {
    throw InputError(
        fmt::format("{}: false under framework {}: only DeepSpeed's pipeline engine before #1407 "
                    "(framework deepspeed) sends the gradients whole",
                    field, to_string(options.framework)));
  }
  if (!options.scatter_gather_pipeline) {
    throw InputError(fmt::format(
        "{}: false without scatter_gather_pipeline: no pipeline tensor is split", field));
  }
}

void check_norm_kernel_model(const models::TransformerConfig& model, const PlanOptions& options,
                             const std::string& field) {
  if (options.norm_kernel == NormKernel::kEager && model.norm != models::Norm::kRmsNorm) {
    throw InputError(fmt::format(
        "{}: eager: model {} uses {}; the eager kernel is torchtitan's hand-written RMSNorm "
        "(norm rmsnorm only)",
        field, model.name, models::to_string(model.norm)));
  }
}

void check_attention_sinks_kernel(const models::TransformerConfig& model,
                                  const PlanOptions& options, const std::string& field) {
  // Sinks are costed inside the fused kernel: one more logit per head in each row's running
  // softmax (Transformer Engine's cuDNN attention with softmax_type "learnable", Megatron-Core
  // d98e8a64 extensions/transformer_engine.py), free beside the s x s scores. The unfused path
  // (transformers' eager_attention_forward: torch.cat of the scores with the sinks, a max
  // subtraction, a slice) would add passes over the a s^2 b scores that meshplan does not cost.
  if (model.attention_sinks && !options.flash_attention) {
    throw InputError(fmt::format(
        "{}: off: model {} has attention_sinks, costed only inside a fused attention kernel "
        "(Transformer Engine's learnable softmax offset); plan it with flash attention on",
        field, model.name));
  }
}

void check_mtp_options(const models::TransformerConfig& model, const PlanOptions& options,
                       const std::string& field) {
  if (!model.has_mtp()) {
    return;
  }
  // Multi-token prediction is built by Megatron-Core alone (--mtp-num-layers,
  // transformer/multi_token_prediction.py): Megatron-DeepSpeed's GPTModel has no such module
  // (megatron/model/gpt_model.py at f4157bea), torchtitan's llama3 and deepseek_v3 models as
  // meshplan emits them build none, and meshplan's executors do not build it.
  const char* why = nullptr;
  switch (options.framework) {
    case Framework::kMegatron:
      break;
    case Framework::kDeepSpeed:
      why = "Megatron-DeepSpeed's GPTModel has no multi-token-prediction module";
      break;
    case Framework::kFsdp:
      why = "meshplan's torchtitan hand-off does not run the multi-token-prediction module";
      break;
    case Framework::kMeshplan:
      why = "meshplan's executors do not build the multi-token-prediction module";
      break;
  }
  if (why != nullptr) {
    throw InputError(fmt::format("{}: framework {}: {}; plan it with --framework megatron ({})",
                                 field, to_string(options.framework), why, model.mtp_num_layers));
  }
  // transformer_config.py __post_init__ (d98e8a64): "MTP supports at most one layer when
  // enabling overlap_moe_expert_parallel_comm".
  if (options.overlap_moe_expert_parallel_comm && model.mtp_num_layers > 1) {
    throw InputError(
        fmt::format("{}: overlap_moe_expert_parallel_comm: Megatron-Core runs at most one MTP "
                    "layer in the merged forward-backward schedule ({})",
                    field, model.mtp_num_layers));
  }
}

bool fsdp_head_in_root(const PlanOptions& options) {
  return options.fsdp_head_in_root.value_or(options.fsdp_version == 1);
}

void check_fsdp_head_in_root(const PlanOptions& options, const std::string& field) {
  if (options.fsdp_head_in_root && options.framework != Framework::kFsdp) {
    throw InputError(
        fmt::format("{}: needs framework fsdp (framework {}): only PyTorch FSDP's "
                    "wrapping puts the LM head in a unit",
                    field, to_string(options.framework)));
  }
}

void check_fsdp_version(const PlanOptions& options, const std::string& field) {
  if (options.fsdp_version != 1 && options.fsdp_version != 2) {
    throw InputError(fmt::format("{}: expected 1 or 2 ({})", field, options.fsdp_version));
  }
  if (options.fsdp_version == 1 && options.framework != Framework::kFsdp) {
    throw InputError(fmt::format("{}: 1 needs framework fsdp (framework {})", field,
                                 to_string(options.framework)));
  }
  // precision fp8 under fsdp is torchtitan's float8 recipe with its float8 all-gather, an
  // FSDP2 extension (torchao/float8/fsdp_utils.py fsdp_pre_all_gather / fsdp_post_all_gather):
  // FSDP1 would gather the weights in 16 bits, which is not what fp8 is costed as here.
  if (options.fsdp_version == 1 && options.gemm_precision == GemmPrecision::kFp8) {
    throw InputError(fmt::format(
        "{}: 1 with precision fp8: fp8 under fsdp is costed with torchao's float8 all-gather, "
        "which only FSDP2 (fsdp_version 2) runs",
        field));
  }
}

void check_flash_attention_version(const PlanOptions& options, const std::string& field) {
  if (options.flash_attention_version != 1 && options.flash_attention_version != 2) {
    throw InputError(
        fmt::format("{}: expected 1 or 2 ({})", field, options.flash_attention_version));
  }
  if (options.flash_attention_version == 1 && !options.flash_attention) {
    throw InputError(
        fmt::format("{}: 1 needs flash_attention on (unfused attention has no "
                    "kernel generation)",
                    field));
  }
  if (options.flash_attention_version == 1 && options.framework == Framework::kMeshplan) {
    throw InputError(fmt::format(
        "{}: 1 under framework meshplan: the executor runs its own fused kernel", field));
  }
}

void check_grad_reduce_dtype_options(const models::ClusterConfig& cluster,
                                     const PlanOptions& options, const std::string& field) {
  if (!options.grad_reduce_dtype) {
    return;
  }
  const GradReduceDtype dtype = *options.grad_reduce_dtype;
  const std::string what = fmt::format("{}: {} under framework {}", field, to_string(dtype),
                                       to_string(options.framework));
  if (cluster.precision == models::Precision::kFp32) {
    if (dtype == GradReduceDtype::kBf16) {
      throw InputError(
          fmt::format("{}: bf16 needs 16-bit mixed-precision training ({} trains in "
                      "{})",
                      field, cluster.name, models::to_string(cluster.precision)));
    }
    return;
  }
  switch (options.framework) {
    case Framework::kMegatron:
      return;  // both (--grad-reduce-in-bf16); zero >= 2 fp32: check_grad_reduce_dtype
    case Framework::kDeepSpeed:
      if (dtype == GradReduceDtype::kFp32) {
        throw InputError(what +
                         ": DeepSpeed's communication_data_type fp32 (an upcast copy of "
                         "each bf16 bucket) is not modelled");
      }
      return;
    case Framework::kFsdp:
      // Both: FSDP1 MixedPrecision(reduce_dtype), FSDP2 MixedPrecisionPolicy(reduce_dtype),
      // torchtitan mixed_precision_reduce "float32" (default) or "bfloat16".
      return;
    case Framework::kMeshplan:
      if (dtype == GradReduceDtype::kFp32) {
        throw InputError(what + ": the executor reduces gradients in the precision it trains in");
      }
      return;
  }
}

namespace {

// Megatron-LM megatron/training/arguments.py validate_args: "--fp8-param-gather only supported
// with distributed optimizer, torch fsdp2, megatron fsdp, or inference mode" (read in the code
// index at an unpinned 2025 commit; older versions: distributed optimizer only). The fp8 model
// weights come from TE's fp8_model_init, used only under --fp8-format (training/training.py).
void check_fp8_param_gather_options(const PlanOptions& options) {
  if (!options.fp8_param_gather) {
    return;
  }
  if (options.gemm_precision != GemmPrecision::kFp8) {
    throw InputError(
        "fp8_param_gather: needs precision fp8 (Megatron-LM's --fp8-param-gather keeps Transformer "
        "Engine FP8 weights, made only under --fp8-format)");
  }
  switch (options.framework) {
    case Framework::kMegatron:
      return;
    case Framework::kFsdp:
      throw InputError(
          "fp8_param_gather: framework fsdp: torchtitan's float8 all-gather "
          "(enable_fsdp_float8_all_gather) is already part of precision fp8 under fsdp");
    case Framework::kDeepSpeed:
      throw InputError(
          "fp8_param_gather: framework deepspeed: DeepSpeed has no fp8 parameter "
          "all-gather (a Megatron-LM option)");
    case Framework::kMeshplan:
      throw InputError(
          "fp8_param_gather: framework meshplan: the executor keeps fp32/bf16 "
          "weights and runs no FP8 (a Megatron-LM option)");
  }
}

// Megatron-LM --fp8-recipe (arguments.py, Megatron Core 0.12 on): Transformer Engine's recipes.
// torchtitan's float8 under fsdp is torchao's own dynamic tensorwise scaling, costed apart
// (torchao_float8_cast_bytes); DeepSpeed and the executor run no FP8.
void check_fp8_recipe_options(const PlanOptions& options) {
  if (options.fp8_recipe == Fp8Recipe::kDelayed) {
    return;
  }
  if (options.gemm_precision != GemmPrecision::kFp8) {
    throw InputError(
        "fp8_recipe: tensorwise: needs precision fp8 (the recipe scales Transformer Engine's FP8 "
        "casts)");
  }
  if (options.framework != Framework::kMegatron) {
    throw InputError(fmt::format(
        "fp8_recipe: tensorwise: framework {}: Transformer Engine's recipes are Megatron-LM's "
        "(--fp8-recipe); under fsdp torchao's float8 is its own tensorwise scaling",
        to_string(options.framework)));
  }
}

// Megatron-Core's --cross-entropy-loss-fusion (model_parallel_config.py at 358e5f07): the other
// frameworks have no such switch; torchtitan's loss is costed as its own cross_entropy. xentropy
// is llm-foundry's FlashAttention loss under fsdp, on one rank's whole vocabulary (no tensor
// parallelism) and eager (--compile compiles torchtitan's own loss).
void check_cross_entropy_fusion_options(const PlanOptions& options) {
  const CrossEntropyFusion fusion = options.cross_entropy_loss_fusion;
  if (fusion == CrossEntropyFusion::kOff) {
    return;
  }
  if (fusion == CrossEntropyFusion::kXentropy) {
    if (options.framework != Framework::kFsdp) {
      throw InputError(fmt::format(
          "cross_entropy_loss_fusion: xentropy (llm-foundry's FlashAttention loss) runs under "
          "framework fsdp, not {}",
          to_string(options.framework)));
    }
    if (loss_compiled(options)) {
      throw InputError(
          "cross_entropy_loss_fusion: xentropy with compile: torch.compile compiles torchtitan's "
          "own loss (use compile_loss false, --compile blocks, to keep the xentropy loss)");
    }
    return;
  }
  if (options.framework != Framework::kMegatron) {
    throw InputError(
        fmt::format("cross_entropy_loss_fusion: framework {}: only Megatron-Core has "
                    "--cross-entropy-loss-fusion (its fused vocab-parallel loss)",
                    to_string(options.framework)));
  }
}

// torchtitan's --training.compile (torchtitan components/loss.py build_cross_entropy_loss,
// models/llama3/infra/parallelize.py apply_compile at e7c0cae): the other frameworks' compile
// paths (Megatron-LM's TorchScript/TE fusions, DeepSpeed's compile) are not this one.
}  // namespace

void check_compile_options(const PlanOptions& options) {
  if (!options.compile) {
    return;
  }
  switch (options.framework) {
    case Framework::kFsdp:
      return;
    case Framework::kMegatron:
      throw InputError(
          "compile: framework megatron: Megatron-LM has no torch.compile of its blocks and loss "
          "(torchtitan's --training.compile); its fusions are separate options");
    case Framework::kDeepSpeed:
      throw InputError(
          "compile: framework deepspeed: DeepSpeed's compile is not torchtitan's "
          "--training.compile and is not modelled");
    case Framework::kMeshplan:
      throw InputError(
          "compile: framework meshplan: the executor runs its own C++ kernels, nothing to "
          "compile");
  }
}

void check_vocab_padding_options(const PlanOptions& options, std::string_view field) {
  if (const std::string error = vocab_padding_error(options, field); !error.empty()) {
    throw InputError(error);
  }
}

void check_precision(const models::ClusterConfig& cluster, const PlanOptions& options) {
  check_fp8_param_gather_options(options);
  check_fp8_recipe_options(options);
  check_cross_entropy_fusion_options(options);
  check_compile_options(options);
  check_grad_reduce_dtype_options(cluster, options, "grad_reduce_dtype");
  check_flash_attention_version(options, "flash_attention_version");
  check_fsdp_version(options, "fsdp_version");
  check_optimizer_impl_options(options, "optimizer_impl");
  check_weight_decay_options(options, "weight_decay");
  check_norm_kernel_options(options, "norm_kernel");
  check_pipeline_grad_scatter_gather_options(options, "pipeline_grad_scatter_gather");
  check_deepspeed_grad_all_reduce_options(options, "deepspeed_grad_all_reduce");
  check_overlap_tp_comm_options(options, "overlap_tp_comm");
  check_distribute_saved_activations_options(options, "distribute_saved_activations");
  check_moe_dispatcher_options(options, "moe_dispatcher");
  check_vocab_padding_options(options, "make_vocab_size_divisible_by");
  if (options.gemm_precision != GemmPrecision::kFp8) {
    return;
  }
  if (cluster.gpu.peak_fp8_flops_per_second <= 0) {
    throw InputError(fmt::format(
        "{}: precision: fp8: {} has no FP8 tensor cores (no gpu.peak_fp8_flops_per_second)",
        cluster.name, cluster.gpu.name));
  }
  if (cluster.precision != models::Precision::kBf16Mixed) {
    throw InputError(fmt::format("{}: precision: fp8 needs bf16 mixed-precision training ({})",
                                 cluster.name, models::to_string(cluster.precision)));
  }
  // DeepSpeed 38327e07 has no FP8 config key (runtime/constants.py, config.py) and
  // Megatron-DeepSpeed f4157bea no FP8 flag (megatron/arguments.py).
  if (options.framework == Framework::kDeepSpeed) {
    throw InputError(
        "precision: fp8: framework deepspeed: neither DeepSpeed nor Megatron-DeepSpeed runs FP8 "
        "GEMMs");
  }
}

// Megatron-LM is the one framework with overlap_p2p_comm (megatron/core/model_parallel_config.py,
// d98e8a64). DeepSpeed's pipeline engine sends with blocking dist.send/recv (runtime/pipe/p2p.py:
// async_op == False); torchtitan's torch.distributed.pipelining and meshplan's executor are
// costed with every send exposed, their own overlap not modelled.
void check_overlap_p2p_options(const PlanOptions& options, const std::string& field) {
  if (!options.overlap_p2p_comm) {
    return;
  }
  switch (options.framework) {
    case Framework::kMegatron:
      return;
    case Framework::kDeepSpeed:
      throw InputError(
          fmt::format("{}: framework deepspeed: the pipeline engine's sends are blocking "
                      "(runtime/pipe/p2p.py send/recv, async_op False)",
                      field));
    case Framework::kFsdp:
      throw InputError(
          fmt::format("{}: framework fsdp: a Megatron-Core option; torchtitan's "
                      "torch.distributed.pipelining overlap is not modelled",
                      field));
    case Framework::kMeshplan:
      throw InputError(
          fmt::format("{}: framework meshplan: the executor receives each pipeline tensor "
                      "when it needs it, not posted early (a Megatron-Core option)",
                      field));
  }
}

// Each rule names the version read and the file that says so (README "Frameworks").
Validity check_framework(Framework framework, const Layout& layout, bool with_reason) {
  const bool pipelined = layout.pp > 1;
  // The search asks for the reason once: formatting it (describe) for each of the hundreds of
  // thousands of layouts it refuses took a fifth of a DeepSeek-V3 search.
  const auto refused = [&](const std::string& why) {
    return with_reason ? refuse(framework, why, layout) : reject("framework", "");
  };
  // Hybrid sharding is FSDP2's 2-D mesh at ZeRO 3 (torchtitan data_parallel_replicate_degree x
  // data_parallel_shard_degree) and Megatron-Core's partial distributed optimizer at ZeRO 1
  // (--num-distributed-optimizer-instances dp / dp_shard); Megatron-FSDP's HSDP, DeepSpeed's
  // hpZ and MiCS are not modelled, and the executor shards over all dp.
  if (hybrid_sharded(layout)) {
    const bool fsdp2 = framework == Framework::kFsdp && layout.zero == 3;
    const bool partial_distributed_optimizer =
        framework == Framework::kMegatron && layout.zero == 1;
    if (!fsdp2 && !partial_distributed_optimizer) {
      return refused(
          "hybrid sharding (dp_shard < dp) is modelled as PyTorch FSDP2 runs it at "
          "ZeRO 3 and as Megatron-Core's distributed optimizer instances at ZeRO 1 only");
    }
  }
  if (framework != Framework::kMegatron && expert_tensor_parallel(layout) != layout.tp) {
    // The expert grid, token dispatch and expert sharding with etp != tp are costed as
    // Megatron-Core runs them (check_expert_tensor_parallel); other frameworks are not read.
    return refused("meshplan models etp != tp as Megatron-Core runs it only");
  }
  switch (framework) {
    case Framework::kMegatron:
      // Megatron-Core d98e8a64 megatron/core/pipeline_parallel/schedules.py: no pipelining,
      // 1F1B and interleaved 1F1B only. ZeRO 0 (DDP), 1 (distributed optimizer), 2 and 3
      // (Megatron-FSDP optim_grads, optim_grads_params; docs megatron_fsdp.md line 148).
      if (pipelined &&
          (layout.schedule == ScheduleKind::kGpipe || layout.schedule == ScheduleKind::kZbH1)) {
        return refused("Megatron-Core schedules.py has 1F1B and interleaved 1F1B, no " +
                       to_string(layout.schedule));
      }
      return {};
    case Framework::kDeepSpeed:
      // DeepSpeed 0.19.6 deepspeed/runtime/pipe/engine.py lines 76-77: "ZeRO-2 and ZeRO-3 are
      // incompatible with pipeline parallelism"; deepspeed/runtime/pipe/schedule.py
      // TrainSchedule is 1F1B over one stage per rank (no interleaving, no GPipe).
      // Megatron-DeepSpeed f4157bea replaces it with ZB-H1 under --enable-zbh1-pipeline
      // (megatron/initialize.py: TrainSchedule = ZeroBubbleH1Pipeline,
      // core/pipeline_parallel/deepspeed_zbh1_schedule.py), whose arguments.py asserts
      // sequence parallelism off ("Sequence Parallel not tested").
      if (pipelined && layout.zero >= 2) {
        return refused("its pipeline engine refuses ZeRO-2 and ZeRO-3 with pp > 1");
      }
      if (pipelined && layout.schedule == ScheduleKind::kZbH1 && layout.sequence_parallel) {
        return refused(
            "Megatron-DeepSpeed's ZB-H1 (--enable-zbh1-pipeline) asserts sequence parallelism "
            "off (arguments.py)");
      }
      if (pipelined && layout.schedule != ScheduleKind::kOneFOneB &&
          layout.schedule != ScheduleKind::kZbH1) {
        return refused(
            "its pipeline engine runs 1F1B (TrainSchedule), or ZB-H1 under Megatron-DeepSpeed's "
            "--enable-zbh1-pipeline");
      }
      // The stage split is checked with the model (check_framework with a model).
      return {};
    case Framework::kFsdp:
      // torchtitan 018740b7 parallelize.py: FSDP2 fully_shard (ZeRO-3) over dp_shard or DDP
      // over dp_replicate, no ZeRO-1/2; tensor parallelism always shards the norms' sequence
      // (SequenceParallel); torch.distributed.pipelining has GPipe, 1F1B, interleaved 1F1B,
      // and zero-bubble only as interleaved/V schedules, not ZB-H1 over one stage per rank.
      if (layout.dp > 1 && (layout.zero == 1 || layout.zero == 2)) {
        return refused("torchtitan shards with FSDP2 (ZeRO-3) or replicates (DDP)");
      }
      if (layout.tp > 1 && !layout.sequence_parallel) {
        return refused("torchtitan's tensor parallelism is always sequence-parallel");
      }
      if (pipelined && layout.schedule == ScheduleKind::kZbH1) {
        return refused("torch.distributed.pipelining has no ZB-H1 schedule");
      }
      // Uneven stages are admitted: torchtitan takes any split as the module names of each
      // virtual stage (parallelism.module_fqns_per_model_part, since 3c84ce095, 2025-07-30;
      // its default split is itself uneven, first and last stage one layer short,
      // pipeline_parallel_first/last_stage_less_layers = 1), and the Dec 2024 torchtitan
      // (9dec370) cut stages at experimental.pipeline_parallel_split_points.
      return {};
    case Framework::kMeshplan:
      // executor/shard_dims.cpp validate_plan_for_executor.
      if (layout.zero == 3 && layout.dp > 1 && layout.vpp > 1) {
        return refused("the executor's ZeRO 3 gathers a stage whole, not per interleaved chunk");
      }
      return {};
  }
  return {};
}

Validity check_framework(const models::TransformerConfig& model, const PlanOptions& options,
                         const Layout& layout, bool with_reason) {
  if (Validity runnable = check_framework(options.framework, layout, with_reason); !runnable.ok()) {
    return runnable;
  }
  // deepspeed/runtime/pipe/module.py PipelineModule (0.19.6) builds its stages from
  // partition_method ("parameters", "type:...", "uniform"), not from a stated list: a split is
  // runnable when one of kDeepSpeedPartitions builds it (deepspeed_stage_splits).
  if (options.framework == Framework::kDeepSpeed && layout.pp > 1 &&
      (!layout.stage_layers.empty() || model.num_layers % layout.pp != 0)) {
    const std::vector<std::vector<int64_t>> runnable =
        deepspeed_stage_splits(model, layout.tp, layout.pp, options);
    if (std::find(runnable.begin(), runnable.end(), layout.stage_layers) == runnable.end()) {
      if (!with_reason) {
        return reject("framework", "");
      }
      std::vector<std::string> builds;
      for (DeepSpeedPartition method : kDeepSpeedPartitions) {
        builds.push_back(fmt::format("{} ({})", to_string(method),
                                     format_stage_layers(deepspeed_stage_layers(
                                         model, layout.tp, layout.pp, method, options))));
      }
      return refuse(
          options.framework,
          fmt::format("its PipelineModule splits layers by partition_method, and none of "
                      "{} gives {}",
                      fmt::join(builds, ", "),
                      layout.stage_layers.empty() ? "the even split"
                                                  : format_stage_layers(layout.stage_layers)),
          layout);
    }
  }
  // Megatron-DeepSpeed's ParallelAttention and its arguments have no sliding window
  // (megatron/model/transformer.py, megatron/arguments.py at f4157bea: no window option).
  // Megatron-Core has --window-size (arguments.py, d98e8a64); under fsdp llm-foundry's MPT has
  // attn_config.sliding_window_size (llmfoundry/models/layers/attention.py, 8c8dd48f), though
  // torchtitan's llama3 has none (its emitter refuses); meshplan's executor masks it.
  if (options.framework == Framework::kDeepSpeed && model.is_windowed()) {
    return with_reason ? refuse(options.framework,
                                fmt::format("Megatron-DeepSpeed's ParallelAttention has no "
                                            "sliding window (sliding_window {} < seq_length {})",
                                            model.sliding_window, model.seq_length),
                                layout)
                       : reject("framework", "");
  }
  // Nor has it a learnable softmax offset (megatron/model/transformer.py CoreAttention and
  // FlashSelfAttention at f4157bea): gpt-oss's attention sinks.
  if (options.framework == Framework::kDeepSpeed && model.attention_sinks) {
    return with_reason ? refuse(options.framework,
                                "Megatron-DeepSpeed's attention has no learnable softmax offset "
                                "(attention_sinks)",
                                layout)
                       : reject("framework", "");
  }
  // meshplan's CPU executor (executor/shard_dims.cpp validate_moe_for_executor) builds routed
  // experts without tensor parallelism and without ZeRO sharding, and adds gpt-oss's sinks in
  // the standard attention kernel's softmax, not the context-parallel ring's
  // (validate_plan_for_executor): a meshplan plan it would refuse at execute is none.
  if (options.framework == Framework::kMeshplan && model.is_moe() &&
      (layout.tp > 1 || layout.zero > 0)) {
    return with_reason
               ? refuse(options.framework,
                        layout.tp > 1 ? "its executor's mixture-of-experts runs tp 1 only "
                                        "(expert tensor parallelism is not built)"
                                      : "its executor's mixture-of-experts runs ZeRO 0 only "
                                        "(experts are not ZeRO-sharded)",
                        layout)
               : reject("framework", "");
  }
  if (options.framework == Framework::kMeshplan && model.attention_sinks && layout.cp > 1) {
    return with_reason ? refuse(options.framework,
                                "its executor adds attention_sinks in the standard attention "
                                "kernel, not the context-parallel ring's",
                                layout)
                       : reject("framework", "");
  }
  // Gemma 2's soft-cap and query scale: the same kernel, the same limit (shard_dims.cpp).
  if (options.framework == Framework::kMeshplan && layout.cp > 1 &&
      (model.attn_logit_softcapping > 0.0 || model.has_attention_scale_override())) {
    return with_reason
               ? refuse(options.framework,
                        model.attn_logit_softcapping > 0.0
                            ? "its executor soft-caps attn_logit_softcapping in the standard "
                              "attention kernel, not the context-parallel ring's"
                            : "its executor rescales by query_pre_attn_scalar in the standard "
                              "attention kernel, not the context-parallel ring's",
                        layout)
               : reject("framework", "");
  }
  // DeepSpeed has no attention-core recompute of its own; Megatron-DeepSpeed's
  // --recompute-granularity selective checkpoints only the unfused CoreAttention
  // (megatron/model/transformer.py ParallelAttention at f4157bea: checkpoint_core_attention is
  // not used on the flash-attention path), so with flash attention it recomputes nothing, and
  // the plan would be costed with a recompute that does not run.
  if (options.framework == Framework::kDeepSpeed && layout.recompute == Recompute::kSelective &&
      options.flash_attention) {
    return with_reason ? refuse(options.framework,
                                "Megatron-DeepSpeed recomputes the attention core only without "
                                "flash attention (transformer.py ParallelAttention)",
                                layout)
                       : reject("framework", "");
  }
  // Megatron-Core multi_token_prediction.py MultiTokenPredictionLayer._checkpointed_forward
  // (d98e8a64) asserts "recompute_num_layers must be 1 for MTP recompute" under the uniform
  // method.
  if (model.has_mtp() && layout.recompute == Recompute::kFull && layout.recompute_layers == 0 &&
      layout.recompute_group_layers > 1) {
    return with_reason ? refuse(options.framework,
                                "Megatron-Core's MTP recompute asserts one layer per uniform "
                                "group (multi_token_prediction.py, recompute_num_layers 1)",
                                layout)
                       : reject("framework", "");
  }
  // Megatron-LM training/arguments.py validate_args (d98e8a64 lines 1000-1009; since 3ee489d9,
  // 2024-05-31, before which interleaving needed pp > 2 outright): with
  // --num-layers-per-virtual-pipeline-stage and overlap_p2p_comm off, "pipeline-model-parallel
  // size should be greater than 2 to avoid having multiple p2p sends and recvs between same 2
  // ranks per communication batch".
  if (options.framework == Framework::kMegatron && layout.pp == 2 && layout.vpp > 1 &&
      layout.schedule == ScheduleKind::kInterleaved && !options.overlap_p2p_comm) {
    return with_reason ? refuse(options.framework,
                                "Megatron-LM arguments.py refuses the interleaved schedule at "
                                "pp 2 without --overlap-p2p-communication",
                                layout)
                       : reject("framework", "");
  }
  // llm-foundry's FlashAttention loss (cross_entropy_loss_fusion xentropy) takes the whole
  // vocabulary's logits on the rank: its MPT models run FSDP without tensor parallelism.
  if (options.cross_entropy_loss_fusion == CrossEntropyFusion::kXentropy && layout.tp > 1) {
    return with_reason ? refuse(options.framework,
                                "cross_entropy_loss_fusion xentropy (llm-foundry's loss) is "
                                "modelled without tensor parallelism",
                                layout)
                       : reject("framework", "");
  }
  return {};
}

Validity check_layout(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                      int64_t num_gpus, const Layout& layout, bool allow_tp_across_nodes) {
  if (Validity dense = check_dense_layout(model, cluster, num_gpus, layout, allow_tp_across_nodes);
      !dense.ok()) {
    return dense;
  }
  return check_moe_layout(model, layout);
}

Validity check_dense_layout(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, int64_t num_gpus,
                            const Layout& layout, bool allow_tp_across_nodes) {
  if (layout.tp < 1 || layout.pp < 1 || layout.dp < 1 || layout.vpp < 1 || layout.micro_batch < 1 ||
      layout.global_batch < 1) {
    return reject("sizes", fmt::format("tp, pp, dp, vpp, micro_batch and global_batch must be "
                                       "positive ({})",
                                       describe(layout)));
  }
  if (layout.cp < 1) {
    return reject("sizes", fmt::format("cp must be positive ({})", layout.cp));
  }
  if (layout.num_gpus() != num_gpus) {
    if (layout.cp > 1) {
      return reject("gpus", fmt::format("tp*cp*pp*dp must equal the GPU count ({}*{}*{}*{} != {})",
                                        layout.tp, layout.cp, layout.pp, layout.dp, num_gpus));
    }
    return reject("gpus", fmt::format("tp*pp*dp must equal the GPU count ({}*{}*{} != {})",
                                      layout.tp, layout.pp, layout.dp, num_gpus));
  }
  if (model.num_attention_heads % layout.tp != 0) {
    return reject("tp_heads", fmt::format("num_attention_heads not divisible by tp ({} % {})",
                                          model.num_attention_heads, layout.tp));
  }
  if (model.num_kv_heads % layout.tp != 0) {
    return reject("tp_kv_heads", fmt::format("num_kv_heads not divisible by tp ({} % {})",
                                             model.num_kv_heads, layout.tp));
  }
  if (model.ffn_hidden_size % layout.tp != 0) {
    return reject("tp_ffn", fmt::format("ffn_hidden_size not divisible by tp ({} % {})",
                                        model.ffn_hidden_size, layout.tp));
  }
  if (!allow_tp_across_nodes &&
      (layout.tp > cluster.gpus_per_node || cluster.gpus_per_node % layout.tp != 0)) {
    return reject("tp_node", fmt::format("tp group does not fit in one node (tp {} with {} GPUs "
                                         "per node)",
                                         layout.tp, cluster.gpus_per_node));
  }
  if (!layout.stage_layers.empty() || !layout.virtual_stage_layers.empty()) {
    const std::string reason = check_stage_layers(model, layout);
    if (!reason.empty()) {
      return reject("stage_layers", reason);
    }
  } else if (model.num_layers % (layout.pp * layout.vpp) != 0) {
    return reject("pp_layers", fmt::format("num_layers not divisible by pp*vpp ({} % {})",
                                           model.num_layers, layout.pp * layout.vpp));
  }
  if (layout.global_batch % (layout.dp * layout.micro_batch) != 0) {
    return reject("batch", fmt::format("global_batch not divisible by dp*micro_batch ({} % {})",
                                       layout.global_batch, layout.dp * layout.micro_batch));
  }
  std::string reason;
  const std::string schedule_code =
      check_schedule_shape(layout.schedule, layout.pp, layout.vpp, layout.num_micro_batches(),
                           &reason, layout.microbatch_group);
  if (!schedule_code.empty()) {
    return reject(schedule_code, reason);
  }
  if (layout.sequence_parallel && layout.tp < 2) {
    return reject("sequence_parallel", "sequence parallel needs tp > 1");
  }
  if (layout.sequence_parallel && model.seq_length % layout.tp != 0) {
    return reject("sequence_parallel", fmt::format("seq_length not divisible by tp ({} % {})",
                                                   model.seq_length, layout.tp));
  }
  if (layout.zero < 0 || layout.zero > 3) {
    return reject("zero", fmt::format("ZeRO stage must be 0-3 ({})", layout.zero));
  }
  if (Validity hybrid = check_hybrid_sharding(layout); !hybrid.ok()) {
    return hybrid;
  }
  return check_cp_layout(model, layout);
}

Validity check_hybrid_sharding(const Layout& layout) {
  if (layout.dp_shard == 0) {
    return {};
  }
  // torchtitan/distributed/parallel_dims.py: dp_replicate * dp_shard * cp * tp * pp = world
  // size, so the shard degree divides dp; FSDP2 then shards over dp_shard * cp ranks.
  if (layout.dp_shard < 1 || layout.dp % layout.dp_shard != 0) {
    return reject("dp_shard",
                  fmt::format("dp_shard must divide dp ({} % {})", layout.dp, layout.dp_shard));
  }
  if (layout.zero != 1 && layout.zero != 3) {
    return reject("dp_shard",
                  fmt::format("hybrid sharding (dp_shard {} of dp {}) shards ZeRO-3's "
                              "states (PyTorch FSDP2) or ZeRO-1's optimizer (Megatron's "
                              "distributed optimizer instances); it needs zero 1 or 3 "
                              "(zero {})",
                              layout.dp_shard, layout.dp, layout.zero));
  }
  if (zero_shard_group_size(layout) < 2) {
    return reject("dp_shard", fmt::format("a shard group of dp_shard*cp = 1 shards nothing: use "
                                          "zero 0 (DDP) for plain replication (dp_shard {})",
                                          layout.dp_shard));
  }
  if (layout.placement != Placement::kTpDpPp) {
    return reject("dp_shard", fmt::format("hybrid sharding needs placement tp-dp-pp "
                                          "(torchtitan's mesh pp, dp_replicate, dp_shard, cp, "
                                          "tp) ({})",
                                          to_string(layout.placement)));
  }
  return {};
}

Validity check_cp_layout(const models::TransformerConfig& model, const Layout& layout) {
  if (layout.cp == 1) {
    return {};
  }
  // Megatron-Core get_batch_on_this_cp_rank splits each sequence into 2 cp chunks and gives
  // cp rank r chunks r and 2 cp - 1 - r (causal load balancing, utils.py, d98e8a64).
  if (model.seq_length % (2 * layout.cp) != 0) {
    return reject("cp_seq", fmt::format("seq_length not divisible by 2*cp ({} % {})",
                                        model.seq_length, 2 * layout.cp));
  }
  if (layout.sequence_parallel && model.seq_length / layout.cp % layout.tp != 0) {
    return reject("sequence_parallel", fmt::format("seq_length/cp not divisible by tp ({} % {})",
                                                   model.seq_length / layout.cp, layout.tp));
  }
  // Ring attention's cost and its 2 cp chunk load balancing are modelled for full causal
  // attention; under a window shorter than the sequence most K/V chunks a rank receives fall
  // outside every query's window, which the ring's time and balance here do not model.
  if (model.is_windowed()) {
    return reject("cp_window",
                  fmt::format("cp > 1 with a sliding window shorter than seq_length is not "
                              "modelled (ring attention's load balance under a window) (window "
                              "{} < seq_length {}, cp {})",
                              model.sliding_window, model.seq_length, layout.cp));
  }
  if (layout.placement != Placement::kTpDpPp) {
    return reject("cp_placement", fmt::format("cp > 1 needs placement tp-dp-pp (Megatron-Core's "
                                              "tp-cp-ep-dp-pp); {} puts no single stride between "
                                              "the dp x cp gradient group's ranks (cp {})",
                                              to_string(layout.placement), layout.cp));
  }
  return {};
}

Validity check_cp_options(const models::TransformerConfig& model, const Layout& layout,
                          const PlanOptions& options) {
  if (layout.cp == 1) {
    return {};
  }
  if (!options.flash_attention) {
    // Transformer Engine runs context parallelism only inside its fused (flash / cuDNN)
    // attention (DotProductAttention, context_parallel.py); the s x s path has none.
    return reject("cp_flash_attention",
                  fmt::format("cp > 1 needs flash attention (cp {})", layout.cp));
  }
  if (options.cp_comm == CpComm::kA2a) {
    // Ulysses scatters heads over tp * cp ranks (Jacobs et al. 2023, Sec. 3.1).
    const int64_t ranks = layout.tp * layout.cp;
    if (model.num_attention_heads % ranks != 0) {
      return reject("cp_heads", fmt::format("num_attention_heads not divisible by tp*cp for "
                                            "cp_comm a2a ({} % {})",
                                            model.num_attention_heads, ranks));
    }
    if (model.num_kv_heads % ranks != 0) {
      return reject("cp_kv_heads", fmt::format("num_kv_heads not divisible by tp*cp for cp_comm "
                                               "a2a ({} % {})",
                                               model.num_kv_heads, ranks));
    }
  }
  return {};
}

// --fp8-param-gather's layouts: dense models under the distributed optimizer (zero 1).
Validity check_fp8_param_gather(const models::TransformerConfig& model, const Layout& layout,
                                const PlanOptions& options) {
  if (!options.fp8_param_gather) {
    return {};
  }
  if (model.is_moe() || model.is_mla()) {
    return reject("fp8_param_gather",
                  "fp8_param_gather: MoE and MLA models' fp8 weights are not modelled");
  }
  if (layout.zero != 1) {
    // Megatron-FSDP (zero 2, 3) accepts it in recent Megatron-LM, but its fp8 units' gather
    // and working set are not modelled; ZeRO-0 (DDP) is refused by arguments.py.
    return refuse(options.framework,
                  "--fp8-param-gather is modelled with the distributed optimizer (zero 1) only",
                  layout);
  }
  return {};
}

// Megatron-Core's flex dispatcher (token_dispatcher.py MoEFlexTokenDispatcher, d98e8a64) runs
// under Megatron-LM only; the other frameworks and meshplan's executor dispatch with their own
// all-to-all.
void check_moe_dispatcher_options(const PlanOptions& options, const std::string& field) {
  if (options.moe_dispatcher == MoeDispatcher::kAllToAll ||
      options.framework == Framework::kMegatron) {
    return;
  }
  throw InputError(fmt::format(
      "{}: flex: framework {}: Megatron-Core's flex token dispatcher (DeepEP) runs under "
      "Megatron-LM only",
      field, to_string(options.framework)));
}

// MoEFlexTokenDispatcher.__init__ (d98e8a64): "DeepEP dispatcher requires TPxEP > 1", its
// group being the expert tp x ep ranks (tp_ep_group), over which _initialize_metadata copies
// each token to every expert-tp rank of its experts' ep rank. meshplan costs the etp 1 case,
// where that group is the ep group (moe_cost.cpp moe_flex_traffic).
Validity check_moe_dispatcher(const models::TransformerConfig& model, const Layout& layout,
                              const PlanOptions& options) {
  if (options.moe_dispatcher == MoeDispatcher::kAllToAll) {
    return {};
  }
  if (!model.is_moe()) {
    return reject("moe_dispatcher",
                  "moe_dispatcher flex: needs a mixture-of-experts model (no experts to "
                  "dispatch to)");
  }
  if (layout.ep <= 1) {
    return reject("moe_dispatcher",
                  fmt::format("moe_dispatcher flex: needs ep > 1 (Megatron-Core's DeepEP "
                              "dispatcher requires TPxEP > 1) ({})",
                              describe(layout)));
  }
  if (expert_tensor_parallel(layout) > 1) {
    return reject("moe_dispatcher",
                  fmt::format("moe_dispatcher flex: modelled with etp 1 only (the flex "
                              "dispatcher's etp x ep group is not) ({})",
                              describe(layout)));
  }
  return {};
}

// Megatron-Core's EP all-to-all overlap (transformer_config.py __post_init__, d98e8a64 lines
// 3002-3046: ep > 1, alltoall or flex dispatcher, no full recompute, no recompute method or
// layer count, "moe" not in recompute_modules, bf16/fp16 training; pp > 1 needs vpp). meshplan
// costs the merged pairs of the no-pipelining schedule (pp 1) and of the interleaved schedule
// (generate_schedule's ep_overlap); the other schedules at pp > 1 are refused as Megatron does.
Validity check_moe_a2a_overlap(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options) {
  if (!options.overlap_moe_expert_parallel_comm) {
    if (options.delay_wgrad_compute) {
      return reject("moe_a2a_overlap",
                    "delay_wgrad_compute: needs overlap_moe_expert_parallel_comm (Megatron-Core "
                    "asserts it, transformer_config.py)");
    }
    return {};
  }
  const std::string field = "overlap_moe_expert_parallel_comm";
  if (options.framework != Framework::kMegatron) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: framework {}: only Megatron-Core merges a forward with a "
                              "backward to overlap the expert all-to-alls",
                              field, to_string(options.framework)));
  }
  if (!model.is_moe() || layout.ep <= 1) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: needs a mixture-of-experts model at ep > 1 (ep {}): Megatron-"
                              "Core asserts expert_model_parallel_size > 1",
                              field, layout.ep));
  }
  if (layout.recompute == Recompute::kFull) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: recompute full: Megatron-Core asserts recompute_granularity "
                              "!= 'full' with it",
                              field));
  }
  if (recomputes_module(layout, kRecomputeMoe)) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: recompute module moe: Megatron-Core asserts 'moe' not in "
                              "recompute_modules with it",
                              field));
  }
  if (layout.zero >= 2) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: zero {}: Megatron-FSDP's parameter gathers beside the merged "
                              "layers are not modelled",
                              field, layout.zero));
  }
  if (layout.pp > 1 && layout.schedule != ScheduleKind::kInterleaved) {
    return reject("moe_a2a_overlap",
                  fmt::format("{}: pp {} with schedule {}: Megatron-Core asserts "
                              "virtual_pipeline_model_parallel_size at pp > 1 (only the "
                              "interleaved schedule runs the combined 1F1B)",
                              field, layout.pp, to_string(layout.schedule)));
  }
  return {};
}

// Megatron-FSDP (zero 2, 3) keeps bf16 main grads by default (megatron_fsdp_main_grads_dtype
// "auto", arguments.py line 3691); its fp32 choice is not modelled.
Validity check_grad_reduce_dtype(const Layout& layout, const PlanOptions& options) {
  if (options.framework == Framework::kMegatron && layout.zero >= 2 &&
      options.grad_reduce_dtype == GradReduceDtype::kFp32) {
    return refuse(options.framework,
                  "grad_reduce_dtype fp32 is modelled with DDP and the distributed optimizer "
                  "(zero 0, 1) only, not Megatron-FSDP's fp32 main grads",
                  layout);
  }
  if (options.framework == Framework::kFsdp && !zero_shards_parameters(layout) &&
      options.grad_reduce_dtype == GradReduceDtype::kBf16) {
    // reduce_dtype is FSDP's (MixedPrecision / MixedPrecisionPolicy); torchtitan's DDP (zero 0)
    // all-reduces the fp32 gradients of its fp32 parameters.
    return refuse(options.framework,
                  "grad_reduce_dtype bf16 is FSDP's reduce_dtype (zero 3); DDP (zero 0) reduces "
                  "its fp32 gradients",
                  layout);
  }
  return {};
}

}  // namespace meshplan::planner
