// plan --emit torchtitan: a torchtitan job config (TOML) for a plan. Key names and meanings are
// those of torchtitan's JobConfig (torchtitan/config/job_config.py, commit e347b1e5: sections
// [model], [training], [parallelism], [activation_checkpoint], [compile]).

#include <fmt/format.h>

#include <array>

#include "emit_common.h"
#include "meshplan/emit.h"

namespace meshplan::reports {

namespace {

using emit_detail::refuse;

constexpr EmitTarget kTorchtitanTarget = EmitTarget::kTorchtitan;

// torchtitan picks a model by name and flavor (torchtitan/models/llama3/__init__.py:
// llama3_args "8B", "70B", "405B"); the flavor whose shape equals meshplan's preset of the same
// model, else a refusal.
// The flavors turn by Llama 3.1's scaled frequencies (torchtitan/models/llama3/model/args.py:
// rope_scaling_args defaults to RoPEScalingArgs(), llama3 bands of factor 8), as meshplan's
// presets do; a model of a flavor's shape without them is refused by name.
std::string llama3_flavor(const models::TransformerConfig& model) {
  constexpr std::array<std::pair<const char*, const char*>, 3> kFlavors = {
      {{"llama3-8b", "8B"}, {"llama3-70b", "70B"}, {"llama3-405b", "405B"}}};
  for (const auto& [preset, flavor] : kFlavors) {
    models::TransformerConfig reference = models::load_model(preset);
    reference.name = model.name;
    reference.seq_length = model.seq_length;
    if (reference == model) {
      return flavor;
    }
    const models::RopeScaling flavor_scaling = reference.rope_scaling;
    reference.rope_scaling = model.rope_scaling;
    if (reference == model) {
      refuse(kTorchtitanTarget, "model.rope_scaling",
             fmt::format("torchtitan's llama3 {} flavor turns by Llama 3.1's scaled frequencies "
                         "(RoPEScalingArgs: {} x{:g})",
                         flavor, models::to_string(flavor_scaling.type), flavor_scaling.factor),
             fmt::format("{} x{:g}", models::to_string(model.rope_scaling.type),
                         model.rope_scaling.factor));
    }
  }
  refuse(kTorchtitanTarget, "model",
         "torchtitan selects a model by flavor; none of llama3 8B, 70B, 405B has this shape",
         model.name);
}

// Whether dp is FSDP-sharded (ZeRO 3 over dp > 1) rather than replicated (DDP).
bool sharded(const planner::Layout& layout) {
  return layout.zero == 3 && layout.dp > 1;
}

// What torchtitan's parallelize and pipelining code cannot run, beyond check_framework(kFsdp).
void check_torchtitan_expressible(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  emit_detail::require_framework(kTorchtitanTarget, planner::Framework::kFsdp, plan);
  if (layout.cp > 1) {
    refuse(kTorchtitanTarget, "layout.cp", "context parallelism is not emitted for torchtitan yet",
           std::to_string(layout.cp));
  }
  if (plan.model.is_moe()) {
    refuse(kTorchtitanTarget, "model.num_experts",
           "mixture-of-experts models are not emitted for torchtitan",
           std::to_string(plan.model.num_experts));
  }
  if (plan.model.has_partial_rotary()) {
    // torchtitan/models/llama3 (b5bcd76c6) precompute_freqs_cis over the whole head dim.
    refuse(kTorchtitanTarget, "model.rotary_percent",
           "torchtitan's llama3 model rotates every channel of a head",
           fmt::format("{:g}", plan.model.rotary_percent));
  }
  if (!plan.model.no_rope_freq.empty() || plan.model.qk_l2_norm) {
    // torchtitan/models/llama3 (b5bcd76c6): rotary positions on every layer, no q/k norm.
    const bool nope = !plan.model.no_rope_freq.empty();
    refuse(kTorchtitanTarget, nope ? "model.no_rope_freq" : "model.qk_l2_norm",
           nope ? "torchtitan's llama3 model applies rotary positions on every layer"
                : "torchtitan's llama3 model has no query/key norm",
           nope ? "NoPE layers" : "true");
  }
  if (plan.model.is_windowed()) {
    // torchtitan/models/llama3 (b5bcd76c6) attends causally over the whole sequence; sliding
    // windows appear only in other models and experiments.
    refuse(kTorchtitanTarget, "model.sliding_window",
           "torchtitan's llama3 model has no sliding-window attention",
           std::to_string(plan.model.sliding_window));
  }
  if (layout.placement != planner::Placement::kTpDpPp) {
    refuse(kTorchtitanTarget, "layout.placement",
           "torchtitan's device mesh is [pp, dp_replicate, dp_shard, cp, tp] (tp-dp-pp)",
           planner::to_string(layout.placement));
  }
  // torchtitan/models/llama3/infra/parallelize.py line 151: "DDP has not supported > 1D
  // parallelism" (replicated dp beside tp or pp).
  if (layout.dp > 1 && layout.zero == 0 && (layout.tp > 1 || layout.pp > 1)) {
    refuse(kTorchtitanTarget, "layout.zero",
           "torchtitan's DDP (replicated dp) runs without tp and pp only; plan with --zero 3", "0");
  }
  if (!plan.options.flash_attention) {
    refuse(kTorchtitanTarget, "options.flash_attention",
           "torchtitan always runs fused SDPA attention", "off");
  }
  if (plan.options.flash_attention_version == 1) {
    refuse(kTorchtitanTarget, "options.flash_attention_version",
           "torchtitan's SDPA picks FlashAttention-2 or cuDNN, not FlashAttention-1", "1");
  }
  if (plan.options.fsdp_version == 1) {
    refuse(kTorchtitanTarget, "options.fsdp_version",
           "torchtitan shards with FSDP2 fully_shard, not FSDP1", "1");
  }
  if (planner::fsdp_head_in_root(plan.options)) {
    refuse(kTorchtitanTarget, "options.fsdp_head_in_root",
           "torchtitan since 83e694105 wraps [norm, output] as their own FSDP unit", "true");
  }
  // The JobConfig this writer targets (e347b1e5) has no model.norm_type: its Llama 3 builds
  // nn.RMSNorm, and config/manager.py _dict_to_dataclass raises on an unknown key, so the
  // hand-written eager norm of 1ea476e9f's norm_type = "rmsnorm" cannot be asked for.
  if (plan.options.norm_kernel == planner::NormKernel::kEager) {
    refuse(kTorchtitanTarget, "options.norm_kernel",
           "torchtitan's current JobConfig has no model.norm_type (the hand-written eager "
           "RMSNorm is gone)",
           "eager");
  }
  if (plan.options.optimizer_impl == planner::OptimizerImpl::kComposer) {
    refuse(kTorchtitanTarget, "options.optimizer_impl",
           "Composer's DecoupledAdamW is llm-foundry's optimizer; torchtitan steps with "
           "torch.optim.AdamW (fused, foreach or for-loop)",
           "composer");
  }
  if (plan.options.cross_entropy_loss_fusion == planner::CrossEntropyFusion::kXentropy) {
    refuse(kTorchtitanTarget, "options.cross_entropy_loss_fusion",
           "xentropy is llm-foundry's FlashAttention loss; torchtitan's loss is its own "
           "cross_entropy",
           "xentropy");
  }
  if (!plan.options.overlap_grad_reduce) {
    refuse(kTorchtitanTarget, "options.overlap_grad_reduce",
           "FSDP2 and DDP always overlap the gradient reduction with backward", "off");
  }
  if (!plan.options.overlap_param_gather) {
    refuse(kTorchtitanTarget, "options.overlap_param_gather",
           "FSDP2 always prefetches the next unit's all-gather", "off");
  }
  // job_config.py: mixed_precision_reduce: Literal["float32"].
  if (plan.options.grad_reduce_dtype == planner::GradReduceDtype::kBf16) {
    refuse(kTorchtitanTarget, "options.grad_reduce_dtype",
           "torchtitan reduces gradients in float32 only (training.mixed_precision_reduce)",
           "bf16");
  }
  // distributed/utils.py maybe_enable_amp: without FSDP (or cp) and with tp or pp, "Mixed
  // precision training is disabled": the model would train in fp32, not the plan's bf16.
  const bool fsdp_enabled = sharded(layout) && planner::dp_shard_size(layout) > 1;
  if (plan.cluster.precision == models::Precision::kBf16Mixed && !fsdp_enabled &&
      (layout.tp > 1 || layout.pp > 1)) {
    refuse(kTorchtitanTarget, "layout.zero",
           "torchtitan trains in bf16 with tp or pp only under FSDP (maybe_enable_amp); plan "
           "with --zero 3 and dp above 1",
           fmt::format("zero {}, dp {}", layout.zero, layout.dp));
  }
}

std::string schedule_name(const planner::Layout& layout) {
  switch (layout.schedule) {
    case planner::ScheduleKind::kGpipe:
      return "GPipe";
    case planner::ScheduleKind::kOneFOneB:
      return "1F1B";
    case planner::ScheduleKind::kInterleaved:
      if (layout.microbatch_group > 0) {
        // torch.distributed.pipelining's ScheduleInterleaved1F1B derives its round size from
        // the micro-batch count; torchtitan exposes no group size to set.
        refuse(kTorchtitanTarget, "layout.microbatch_group",
               "torchtitan's Interleaved1F1B takes no micro-batch group size",
               std::to_string(layout.microbatch_group));
      }
      return "Interleaved1F1B";
    case planner::ScheduleKind::kZbH1:
      break;  // refused by check_framework(kFsdp)
  }
  refuse(kTorchtitanTarget, "layout.schedule", "no torchtitan schedule",
         to_string(layout.schedule));
}

// The plan's split as torchtitan's parallelism.module_fqns_per_model_part (job_config.py; since
// 3c84ce095): the modules of each virtual stage v = chunk * pp + stage, the "loop" order
// torchtitan's pipeline_module_split gives Interleaved1F1B (rank r holds r, r + pp, ...). The
// layers are stage_layer_range's; tok_embeddings opens the first part, norm and output close the
// last. The names are torchtitan's llama3 Transformer attributes. Always written for pp > 1:
// pipeline_parallel_layers_per_stage would make torchtitan's own split, ceil((l + 2) / n) virtual
// stages with the first and last one layer short (pipeline_parallel_first/last_stage_less_layers
// = 1), not the plan's.
std::string module_fqns_per_model_part(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  std::string parts;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    for (int64_t stage = 0; stage < layout.pp; ++stage) {
      std::string modules;
      const auto add = [&modules](const std::string& name) {
        modules += fmt::format("{}\"{}\"", modules.empty() ? "" : ", ", name);
      };
      const bool first = chunk == 0 && stage == 0;
      const bool last = chunk == layout.vpp - 1 && stage == layout.pp - 1;
      if (first) {
        add("tok_embeddings");
      }
      const planner::LayerRange range =
          planner::stage_layer_range(plan.model, layout, stage, chunk);
      for (int64_t layer = range.first; layer < range.end; ++layer) {
        add(fmt::format("layers.{}", layer));
      }
      if (last) {
        add("norm");
        add("output");
      }
      parts += fmt::format("{}[{}]", parts.empty() ? "" : ", ", modules);
    }
  }
  return "[" + parts + "]";
}

}  // namespace

std::string emit_torchtitan(const planner::Plan& plan) {
  check_torchtitan_expressible(plan);
  // Planner features added after this writer (uneven pipeline stages, context parallelism,
  // MoE expert parallelism, FP8) must be emitted here or refused with refuse().
  const planner::Layout& layout = plan.layout;
  const std::string flavor = llama3_flavor(plan.model);
  const bool sharded_dp = sharded(layout);
  std::string out = emit_detail::plan_comment(plan, kTorchtitanTarget, "#");
  out +=
      "# torchtitan job config (torchtitan/config/job_config.py at e347b1e5, the last torchtitan\n"
      "# with TOML job configs: 9810191bb, 2026-02-23, replaced them with Python config "
      "registries)\n\n";
  out += fmt::format("[model]\nname = \"llama3\"\nflavor = \"{}\"\n", flavor);
  const bool float8 = plan.options.gemm_precision == planner::GemmPrecision::kFp8;
  if (float8) {
    // torchao's Float8Linear (components/quantization/float8.py, registered as this name).
    out += "converters = [\"quantize.linear.float8\"]\n";
  }
  out += "\n";
  // torchtitan/train.py: gradient_accumulation_steps = global_batch_size / (local_batch_size *
  // dp); with pp the local batch goes through the schedule in micro-batches of
  // pipeline_parallel_microbatch_size, so one pass carries all of a rank's micro-batches.
  const int64_t local_batch = layout.pp > 1 ? layout.global_batch / layout.dp : layout.micro_batch;
  out += fmt::format(
      "[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\n"
      "mixed_precision_param = \"{}\"\n\n",
      local_batch, layout.global_batch, plan.model.seq_length,
      plan.cluster.precision == models::Precision::kBf16Mixed ? "bfloat16" : "float32");
  out += fmt::format(
      "[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n"
      "tensor_parallel_degree = {}\nenable_async_tensor_parallel = {}\n"
      "pipeline_parallel_degree = {}\n",
      sharded_dp ? planner::dp_replicate_size(layout) : layout.dp,
      sharded_dp ? planner::dp_shard_size(layout) : 1, layout.tp,
      plan.options.overlap_tp_comm ? "true" : "false", layout.pp);
  if (layout.pp > 1) {
    out += fmt::format(
        "pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\n"
        "module_fqns_per_model_part = {}\n",
        schedule_name(layout), layout.micro_batch, module_fqns_per_model_part(plan));
  }
  out += "context_parallel_degree = 1\n\n";
  if (float8) {
    // What meshplan costs (README "FP8"): tensorwise dynamic scaling (no recipe_name), weights
    // all-gathered in fp8 (float8.py enables it only when dp_shard is), the output layer left in
    // bf16 by torchtitan's filter.
    out +=
        "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"
        "precompute_float8_dynamic_scale_for_fsdp = true\nfilter_fqns = [\"output\"]\n\n";
  }
  // selective-op is costed as torchtitan's op-level policy (planner compute_cost.cpp
  // op_sac_recompute, memory.cpp op_sac_saved_bytes_per_layer): ActivationCheckpoint.
  // selective_ac_option "op" (job_config.py; the default "2" would checkpoint every second layer
  // whole instead). torchtitan has no attention-core recompute (selective).
  switch (layout.recompute) {
    case planner::Recompute::kFull:
      out += "[activation_checkpoint]\nmode = \"full\"\n";
      break;
    case planner::Recompute::kSelectiveOp:
      out += "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n";
      break;
    case planner::Recompute::kSelective:
      refuse(kTorchtitanTarget, "layout.recompute",
             "torchtitan has no attention-core recompute; its op-level policy is selective-op",
             "selective");
    case planner::Recompute::kNone:
      out += "[activation_checkpoint]\nmode = \"none\"\n";
      break;
  }
  // Optimizer.implementation (job_config.py: "for-loop", "foreach", "fused"; default fused)
  // and Optimizer.weight_decay (default 0.1).
  if (plan.options.optimizer_impl != planner::OptimizerImpl::kFused || !plan.options.weight_decay) {
    out += fmt::format("\n[optimizer]\nimplementation = \"{}\"\n",
                       planner::to_string(plan.options.optimizer_impl));
    if (!plan.options.weight_decay) {
      out += "weight_decay = 0.0\n";
    }
  }
  // --compile on is Compile.enable with its default components ["model", "loss"]
  // (job_config.py); --compile blocks compiles the model only, the loss eager.
  // Async tensor parallelism only takes effect under torch.compile of the model (job_config.py
  // Compile, "Async TP requires 'model' in --compile.components"); without --compile the plan
  // costs the loss eager, so only the blocks are compiled (components since torchtitan
  // 08b8b244f, #1608).
  if (planner::loss_compiled(plan.options)) {
    out += "\n[compile]\nenable = true\n";
  } else if (plan.options.compile || plan.options.overlap_tp_comm) {
    out += "\n[compile]\nenable = true\ncomponents = [\"model\"]\n";
  }
  return out;
}

}  // namespace meshplan::reports
