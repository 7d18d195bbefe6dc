// Validity rules of activation recompute: which framework runs which recompute mode, Megatron-
// Core's recompute modules, partial and grouped recompute, distributed saved activations.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "validity_internal.h"

namespace meshplan::planner {

// Which framework runs which recompute mode. selective-op is torchtitan's
// `selective_ac_option = "op"` (parallelize_llama.py at 1ea476e9f, _apply_ac_to_transformer_block
// with `_custom_policy`); it is costed from the dense block's mm order (wq, wk, wv, wo, MLP;
// op_sac_recompute in compute_cost.cpp), which MoE blocks (grouped expert GEMMs, absent from
// torchtitan at that commit) and MLA projections do not have. torchtitan has no attention-core
// recompute (its modes are none, selective op or every-n-layers, and full: job_config.py).
Validity check_recompute_options(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options) {
  const bool op = layout.recompute == Recompute::kSelectiveOp;
  if (op && options.framework == Framework::kMegatron) {
    return refuse(options.framework,
                  "selective-op is torchtitan's op-level checkpointing; Megatron-LM's "
                  "--recompute-granularity is full or selective (the core attention only)",
                  layout);
  }
  if (op && options.framework == Framework::kDeepSpeed) {
    return refuse(
        options.framework,
        "selective-op is torchtitan's op-level checkpointing; DeepSpeed checkpoints "
        "whole layers (activation_checkpointing, pipeline.activation_checkpoint_interval)",
        layout);
  }
  if (op && options.framework == Framework::kMeshplan) {
    return refuse(options.framework,
                  "selective-op is torchtitan's op-level checkpointing; meshplan's executor "
                  "re-runs Megatron-Core's recompute modules or the whole layer only "
                  "(executor/model_chunk.cpp)",
                  layout);
  }
  if (op && (model.is_moe() || model.is_mla())) {
    return refuse(options.framework,
                  "meshplan costs torchtitan's op-level selective recompute for dense MHA/GQA "
                  "blocks only, not MoE or MLA",
                  layout);
  }
  if (layout.recompute == Recompute::kSelective && options.framework == Framework::kFsdp) {
    return refuse(options.framework,
                  "torchtitan has no attention-core selective recompute; its selective AC is "
                  "op-level (recompute selective-op) or per layer (full)",
                  layout);
  }
  if (Validity modules = check_recompute_modules(model, layout, options); !modules.ok()) {
    return modules;
  }
  if (Validity block = check_recompute_layers(layout, options); !block.ok()) {
    return block;
  }
  return check_distribute_saved_activations(layout, options);
}

namespace {

// Why `framework` cannot run --recompute-modules beyond core_attn, or "" (megatron, and
// meshplan's executor, which runs the list: executor/transformer_layer.h
// drop_module_activations): Megatron-DeepSpeed and torchtitan have no such list. The layout rule
// and the CLI's early check share it.
std::string recompute_modules_framework_refusal(Framework framework) {
  switch (framework) {
    case Framework::kMegatron:
    case Framework::kMeshplan:
      return "";
    case Framework::kDeepSpeed:
    case Framework::kFsdp:
      break;
  }
  return "the list is Megatron-Core's (Megatron-LM --recompute-modules)";
}

// Why `model` cannot take `modules`, or "": Megatron-Core raises for moe_act without MoE layers
// (and grouped GEMMs, which meshplan's MoE layers are) and for mla_up_proj without latent
// attention (transformer_config.py __post_init__, d98e8a64).
std::string recompute_modules_model_refusal(const models::TransformerConfig& model,
                                            uint32_t modules) {
  if ((modules & kRecomputeMoeAct) != 0 && !model.is_moe()) {
    return "moe_act needs a mixture-of-experts model";
  }
  if ((modules & kRecomputeMoe) != 0 && !model.is_moe()) {
    return "moe needs a mixture-of-experts model";
  }
  if ((modules & kRecomputeMlaUpProj) != 0 && !model.is_mla()) {
    return "mla_up_proj needs a latent-attention model";
  }
  // A module the model does not have: Megatron-Core would run without checkpointing anything
  // (moe_layer.py shared_experts_compute; TransformerLayer's recompute_mlp is set for dense
  // layers only); meshplan refuses it rather than accept a list that names nothing. (layernorm
  // names the model's norms, which a dense layer fuses into its linear layers: it is costed as
  // recomputing nothing there, README "Recompute modules".)
  if ((modules & kRecomputeSharedExperts) != 0 &&
      (!model.is_moe() || model.num_shared_experts == 0)) {
    return "shared_experts needs a mixture-of-experts model with shared experts";
  }
  if ((modules & kRecomputeMlp) != 0 && model.num_moe_layers() == model.num_layers) {
    return "mlp needs dense (non-MoE) layers";
  }
  // Megatron-Core's TransformerLayer checkpoints a separate MLP (recompute_mlp); a parallel
  // block's MLP shares the attention's output reduction (model.parallel_residual).
  if ((modules & kRecomputeMlp) != 0 && model.parallel_residual) {
    return "mlp needs separate attention and MLP blocks, not a parallel block";
  }
  return "";
}

// Why the options cannot recompute `modules`, or "": Megatron-Core raises "Delayed scaling does
// not support moe_act and layernorm recompute for fp8" (transformer_config.py __post_init__,
// fd0df7d3 and d98e8a64), and delayed scaling is the FP8 recipe meshplan costs (memory.cpp
// fp8_state_bytes: the amax history).
std::string recompute_modules_options_refusal(const PlanOptions& options, uint32_t modules) {
  if (options.framework == Framework::kMegatron && options.gemm_precision == GemmPrecision::kFp8 &&
      (modules & (kRecomputeMoeAct | kRecomputeLayernorm)) != 0) {
    return "Megatron-Core's delayed FP8 scaling cannot recompute moe_act or layernorm";
  }
  return "";
}

// torchtitan's layer AC (fsdp) has no uniform groups: the layout rule and the CLI's early check.
constexpr const char* kFsdpNoRecomputeGroups =
    "torchtitan's layer AC checkpoints each transformer block on its own, not groups of "
    "recompute_group_layers (Megatron-LM's uniform method)";

}  // namespace

void check_recompute_modules_request(const models::TransformerConfig& model,
                                     const PlanOptions& options, uint32_t modules,
                                     const std::string& field) {
  if (modules == kRecomputeCoreAttn) {
    return;
  }
  if (const std::string why = recompute_modules_framework_refusal(options.framework);
      !why.empty()) {
    throw InputError(fmt::format("{}: framework {}: {}", field, to_string(options.framework), why));
  }
  if (const std::string why = recompute_modules_model_refusal(model, modules); !why.empty()) {
    throw InputError(fmt::format("{}: {} ({})", field, why, model.name));
  }
  if (const std::string why = recompute_modules_options_refusal(options, modules); !why.empty()) {
    throw InputError(fmt::format("{}: {} (--precision fp8)", field, why));
  }
}

void check_recompute_group_layers_request(const PlanOptions& options, const std::string& field) {
  if (options.framework == Framework::kFsdp) {
    throw InputError(fmt::format("{}: framework fsdp: {}", field, kFsdpNoRecomputeGroups));
  }
}

// Megatron-Core's --recompute-modules (transformer_config.py recompute_modules and its checks,
// d98e8a64): a list for selective recompute, under megatron and meshplan's executor
// (recompute_modules_framework_refusal), with the model rules of recompute_modules_model_refusal.
Validity check_recompute_modules(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options) {
  if (layout.recompute_modules == kRecomputeCoreAttn) {
    return {};
  }
  const std::string modules = format_recompute_modules(layout.recompute_modules);
  const auto refuse_modules = [&](const std::string& why) {
    return reject("recompute_modules",
                  fmt::format("recompute_modules {}: {} ({})", modules.empty() ? "(none)" : modules,
                              why, describe(layout)));
  };
  if (layout.recompute_modules == 0 ||
      (layout.recompute_modules &
       ~uint32_t{kRecomputeCoreAttn | kRecomputeMoeAct | kRecomputeLayernorm | kRecomputeMlaUpProj |
                 kRecomputeMlp | kRecomputeSharedExperts | kRecomputeMoe}) != 0) {
    return refuse_modules(
        "expected core_attn, moe_act, layernorm, mla_up_proj, mlp, shared_experts or moe");
  }
  if (layout.recompute != Recompute::kSelective) {
    return refuse_modules(
        "needs recompute selective (Megatron-LM's --recompute-granularity "
        "selective)");
  }
  if (const std::string why = recompute_modules_framework_refusal(options.framework);
      !why.empty()) {
    return refuse(options.framework, why, layout);
  }
  if (const std::string why = recompute_modules_model_refusal(model, layout.recompute_modules);
      !why.empty()) {
    return refuse_modules(why);
  }
  if (const std::string why = recompute_modules_options_refusal(options, layout.recompute_modules);
      !why.empty()) {
    return refuse_modules(why);
  }
  return {};
}

void check_recompute_layers_request(const PlanOptions& options, const std::string& field) {
  if (options.framework == Framework::kDeepSpeed || options.framework == Framework::kFsdp) {
    throw InputError(
        fmt::format("{}: framework {}: Megatron-LM's --recompute-method block; {}", field,
                    to_string(options.framework),
                    options.framework == Framework::kDeepSpeed
                        ? "DeepSpeed recomputes every activation_checkpoint_interval layers"
                        : "torchtitan's layer AC checkpoints every selective_ac_option-th layer"));
  }
}

// Megatron-Core's uniform method with groups of N layers (megatron/core/recompute.py, its
// uniform branch, d98e8a64), DeepSpeed's PipelineModule activation_checkpoint_interval N
// (deepspeed/runtime/pipe/module.py, which checkpoints runs of N layers), and meshplan's
// executor (executor/model_chunk.cpp). torchtitan's layer AC wraps each block on its own.
Validity check_recompute_group_layers(const Layout& layout, const PlanOptions& options) {
  if (layout.recompute_group_layers == 0) {
    return {};
  }
  const auto refuse_group = [&](const std::string& why) {
    return reject("recompute_group_layers",
                  fmt::format("recompute_group_layers {}: {} ({})", layout.recompute_group_layers,
                              why, describe(layout)));
  };
  if (layout.recompute_group_layers < 0 || layout.recompute_group_layers > kMaxRecomputeLayers) {
    return refuse_group(
        fmt::format("must be between 1 and {} (1: one layer per group)", kMaxRecomputeLayers));
  }
  if (layout.recompute != Recompute::kFull) {
    return refuse_group(
        "needs recompute full (Megatron-LM's uniform method recomputes whole layers)");
  }
  if (layout.recompute_layers > 0) {
    return refuse_group(
        "not with recompute_layers (Megatron-LM's --recompute-method is uniform or block)");
  }
  if (options.framework == Framework::kFsdp && layout.recompute_group_layers > 1) {
    return refuse(options.framework, kFsdpNoRecomputeGroups, layout);
  }
  return {};
}

// Megatron-Core's block method (megatron/core/recompute.py, its block branch, d98e8a64): the
// first --recompute-num-layers layers of each chunk are checkpointed. meshplan's executor runs
// the same. DeepSpeed's pipeline engine checkpoints every activation_checkpoint_interval layers
// (uniform), torchtitan's layer AC every selective_ac_option-th layer: neither is the block
// method. The cost model splits recomputed and kept layers of every kind (dense, MoE, latent
// attention) in memory, time and the tp, cp and ep collectives the recomputed forwards repeat;
// ZeRO-3's gathers are per forward and backward op, which a recompute inside the backward does
// not change.
Validity check_recompute_layers(const Layout& layout, const PlanOptions& options) {
  if (Validity group = check_recompute_group_layers(layout, options); !group.ok()) {
    return group;
  }
  if (layout.recompute_layers == 0) {
    return {};
  }
  const auto refuse_block = [&](const std::string& why) {
    return reject("recompute_layers", fmt::format("recompute_layers {}: {} ({})",
                                                  layout.recompute_layers, why, describe(layout)));
  };
  if (layout.recompute_layers < 0 || layout.recompute_layers > kMaxRecomputeLayers) {
    return refuse_block(
        fmt::format("must be between 1 and {} (0: every layer)", kMaxRecomputeLayers));
  }
  if (layout.recompute != Recompute::kFull) {
    return refuse_block(
        "needs recompute full (Megatron-LM's block method recomputes whole layers)");
  }
  if (options.framework == Framework::kDeepSpeed) {
    return refuse(options.framework,
                  "its activation checkpointing recomputes every activation_checkpoint_interval "
                  "layers, not a chunk's first recompute_layers (Megatron-LM's block method)",
                  layout);
  }
  if (options.framework == Framework::kFsdp) {
    return refuse(options.framework,
                  "torchtitan's layer AC checkpoints every selective_ac_option-th layer, not a "
                  "chunk's first recompute_layers (Megatron-LM's block method)",
                  layout);
  }
  return {};
}

// Megatron-LM and DeepSpeed split the checkpointed layer input over the tp ranks, and so does
// meshplan's executor (executor/model_chunk.cpp, as Megatron-LM); torchtitan
// (torch.utils.checkpoint) keeps it whole.
void check_distribute_saved_activations_options(const PlanOptions& options,
                                                const std::string& field) {
  if (!options.distribute_saved_activations) {
    return;
  }
  if (options.framework == Framework::kFsdp) {
    throw InputError(fmt::format(
        "{}: framework fsdp: torchtitan's activation checkpointing (torch.utils.checkpoint) "
        "keeps each layer input whole; a Megatron-LM and DeepSpeed option",
        field));
  }
}

// Megatron-LM training/arguments.py validate_args (d98e8a64): "can distribute recomputed
// activations only across tensor model parallel groups" (tp > 1), "distributed recompute
// activations is only application to full recompute granularity"; transformer_config.py: "must
// be false when sequence parallel is enabled". DeepSpeed partitions what its activation
// checkpointing saves, whole layers (checkpointing.py CheckpointFunction), at any tp; meshplan's
// executor splits as Megatron-LM does, tp > 1; with
// sequence parallelism the input is already split over tp, and a second split is not modelled.
Validity check_distribute_saved_activations(const Layout& layout, const PlanOptions& options) {
  if (!options.distribute_saved_activations) {
    return {};
  }
  const std::string who = options.framework == Framework::kDeepSpeed
                              ? "DeepSpeed's partition_activations"
                              : "Megatron-LM's --distribute-saved-activations";
  if (layout.recompute != Recompute::kFull) {
    return reject("saved_activations",
                  fmt::format("distribute_saved_activations needs recompute full: {} splits the "
                              "input each checkpointed layer saves ({})",
                              who, describe(layout)));
  }
  if (layout.sequence_parallel) {
    return reject("saved_activations",
                  fmt::format("distribute_saved_activations with sequence parallelism: the saved "
                              "input is already split over tp ({})",
                              describe(layout)));
  }
  if (options.framework != Framework::kDeepSpeed && layout.tp == 1) {
    return reject("saved_activations",
                  fmt::format("distribute_saved_activations needs tp > 1 (Megatron-LM "
                              "arguments.py: only across tensor model parallel groups) ({})",
                              describe(layout)));
  }
  return {};
}

}  // namespace meshplan::planner
