// plan --emit deepspeed: a DeepSpeed config JSON for a plan. Keys as DeepSpeed's config parser
// reads them (microsoft/DeepSpeed 38327e07: deepspeed/runtime/constants.py train_batch_size,
// train_micro_batch_size_per_gpu, gradient_accumulation_steps, bf16.enabled;
// deepspeed/runtime/zero/config.py zero_optimization.{stage, overlap_comm, reduce_bucket_size,
// allgather_bucket_size, use_multi_rank_bucket_allreduce}; deepspeed/runtime/config.py
// get_pipeline_config pipeline.{pipe_partitioned, grad_partitioned,
// activation_checkpoint_interval}). The model-parallel sizes are not config keys: the training
// script sets them (deepspeed_launch_note). Not pipeline.stages, which nothing reads, nor
// tensor_parallel.autotp_size, DeepSpeed's AutoTP: a 2-D (dp x tp) sharding that asserts
// ZeRO <= 2 and is not the Megatron-style tensor parallelism meshplan costs.

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "emit_common.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/emit.h"

namespace meshplan::reports {

namespace {

using emit_detail::refuse;

constexpr EmitTarget kDeepSpeedTarget = EmitTarget::kDeepSpeed;

// What a config alone cannot express: the settings Megatron-DeepSpeed's flags make
// (--emit megatron-deepspeed writes them), beyond check_framework(kDeepSpeed) (ZeRO-2/3 with
// pp > 1, schedules other than 1F1B and ZB-H1).
void check_config_expressible(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  if (layout.pp > 1 && layout.schedule == planner::ScheduleKind::kZbH1) {
    // DeepSpeed's pipeline engine runs TrainSchedule; ZB-H1 is Megatron-DeepSpeed's patch of it
    // (megatron/initialize.py, --enable-zbh1-pipeline), no config key.
    refuse(kDeepSpeedTarget, "layout.schedule",
           "DeepSpeed's pipeline engine runs 1F1B; ZB-H1 is Megatron-DeepSpeed's "
           "--enable-zbh1-pipeline, not a DeepSpeed config key: --emit megatron-deepspeed "
           "writes it, or plan with --schedule 1f1b",
           "zb-h1");
  }
  if (layout.sequence_parallel) {
    // Kept a refusal, not a note: the config of a sequence-parallel plan runs as costed only
    // under a training script that shards the sequence too.
    refuse(kDeepSpeedTarget, "layout.sequence_parallel",
           "sequence parallelism is the training script's flag (Megatron-DeepSpeed "
           "--sequence-parallel), not a DeepSpeed config key: --emit megatron-deepspeed writes "
           "both",
           "on");
  }
  if (layout.recompute == planner::Recompute::kSelective ||
      layout.recompute == planner::Recompute::kSelectiveOp) {
    refuse(kDeepSpeedTarget, "layout.recompute",
           "DeepSpeed checkpoints whole layers (pipeline.activation_checkpoint_interval), not "
           "the attention core or single ops",
           to_string(layout.recompute));
  }
  if (layout.recompute == planner::Recompute::kFull && layout.pp == 1) {
    refuse(kDeepSpeedTarget, "layout.recompute",
           "without the pipeline engine DeepSpeed's activation checkpointing is called from the "
           "model's code, not set in the config",
           "full");
  }
}

// What the DeepSpeed engine cannot run as the plan is costed, whichever target writes its
// config.
void check_engine_expressible(const planner::Plan& plan, EmitTarget target) {
  const planner::Layout& layout = plan.layout;
  if (layout.placement != planner::Placement::kTpDpPp) {
    refuse(target, "layout.placement",
           "DeepSpeed's PipeModelDataParallelTopology orders ranks pipe, data, model (tp-dp-pp)",
           planner::to_string(layout.placement));
  }
  // fsdp_version 1, the eager norm (fsdp-only) and fp8 (planner::check_precision) never
  // reach a deepspeed plan, nor a sliding window shorter than seq_length (check_framework:
  // Megatron-DeepSpeed has none).
  if (layout.vpp > 1) {
    refuse(target, "layout.vpp", "DeepSpeed's pipeline engine runs one stage per rank",
           std::to_string(layout.vpp));
  }
  // Planner features added after this writer (uneven pipeline stages, context parallelism,
  // MoE expert parallelism, FP8) must be emitted here or refused with refuse().
  if (layout.cp > 1) {
    refuse(target, "layout.cp", "context parallelism is not emitted for DeepSpeed",
           std::to_string(layout.cp));
  }
  if (plan.model.is_moe()) {
    refuse(target, "model.num_experts", "mixture-of-experts models are not emitted for DeepSpeed",
           std::to_string(plan.model.num_experts));
  }
}

}  // namespace

namespace emit_detail {

std::string deepspeed_config(const planner::Plan& plan, EmitTarget target) {
  check_engine_expressible(plan, target);
  const planner::Layout& layout = plan.layout;
  // DeepSpeed's bucket sizes count elements of the reduce dtype, meshplan's count bytes: the
  // plan's bucket, or DeepSpeed's own default (5e8 elements, dp_bucket_bytes) when the plan
  // states none.
  planner::PlanOptions deepspeed_options = plan.options;
  deepspeed_options.framework = planner::Framework::kDeepSpeed;
  const int64_t bucket_elements =
      planner::dp_bucket_bytes(plan.cluster, layout, deepspeed_options) /
      planner::grad_reduce_element_bytes(plan.cluster, layout, deepspeed_options);
  nlohmann::json config = {
      {"train_batch_size", layout.global_batch},
      {"train_micro_batch_size_per_gpu", layout.micro_batch},
      {"gradient_accumulation_steps", layout.num_micro_batches()},
      {"bf16", {{"enabled", plan.cluster.precision == models::Precision::kBf16Mixed}}},
      {"zero_optimization",
       {{"stage", layout.zero},
        {"overlap_comm", plan.options.overlap_grad_reduce},
        {"reduce_bucket_size", bucket_elements},
        {"allgather_bucket_size", bucket_elements}}}};
  if (!plan.options.deepspeed_grad_all_reduce &&
      planner::grad_all_reduce_option_applies(layout.zero)) {
    // A reduce per rank's slice instead of the bucket all-reduce (zero/config.py
    // use_multi_rank_bucket_allreduce, default true since v0.12.4; stage_1_and_2.py
    // average_tensor: allreduce_no_retain to each slice's rank).
    config["zero_optimization"]["use_multi_rank_bucket_allreduce"] = false;
  }
  if (layout.pp > 1) {
    // pipe/engine.py: is_pipe_partitioned = is_model_parallel and pipeline["pipe_partitioned"],
    // the same for grad_partitioned (both default true): 1/tp of each pipeline tensor is sent
    // and all-gathered by the receiver, as meshplan's scatter_gather_pipeline (and
    // pipeline_grad_scatter_gather, false for DeepSpeed before #1407) cost it.
    const bool activations_split = planner::pipeline_scatter_gather(layout, plan.options, false);
    config["pipeline"] = {
        {"pipe_partitioned", activations_split},
        {"grad_partitioned", planner::pipeline_scatter_gather(layout, plan.options, true)},
        // PipelineModule checkpoints runs of this many layers (deepspeed/runtime/pipe/
        // module.py), meshplan's recompute_group_layers (1 when unset).
        {"activation_checkpoint_interval", layout.recompute == planner::Recompute::kFull
                                               ? std::max<int64_t>(layout.recompute_group_layers, 1)
                                               : 0}};
  }
  if (plan.options.distribute_saved_activations) {
    // The config's "activation_checkpointing" section (runtime/activation_checkpointing/
    // config.py ACT_CHKPT_PARTITION_ACTIVATIONS), which deepspeed.checkpointing.configure(mpu,
    // deepspeed_config=...) reads when the training script calls it (Megatron-DeepSpeed passes
    // its --partition-activations to the same function).
    config["activation_checkpointing"] = {{"partition_activations", true}};
  }
  return config.dump(2) + "\n";
}

}  // namespace emit_detail

std::string emit_deepspeed(const planner::Plan& plan) {
  emit_detail::require_framework(kDeepSpeedTarget, planner::Framework::kDeepSpeed, plan);
  check_config_expressible(plan);
  return emit_detail::deepspeed_config(plan, kDeepSpeedTarget);
}

namespace {

// The PipelineModule partition_method line of deepspeed_launch_note ("" for pp 1).
std::string partition_note(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  if (layout.pp <= 1) {
    return "";
  }
  // check_framework admitted only a split that partition_method builds; the method is an
  // argument of PipelineModule in the model's code, which no DeepSpeed config key sets.
  const std::optional<planner::DeepSpeedPartition> method =
      planner::deepspeed_partition_of(plan.model, layout, plan.options);
  if (!method) {
    return "";
  }
  std::vector<int64_t> layers = layout.stage_layers;
  if (layers.empty()) {
    layers.assign(static_cast<size_t>(layout.pp), plan.model.num_layers / layout.pp);
  }
  const bool both = planner::canonical_stage_layers(planner::deepspeed_stage_layers(
                        plan.model, layout.tp, layout.pp, planner::DeepSpeedPartition::kParameters,
                        plan.options)) == layout.stage_layers;
  const std::string who = *method == planner::DeepSpeedPartition::kTypeTransformer
                              ? "what GPT-NeoX and Megatron-DeepSpeed pass"
                              : "THUDM LargeScale's --pp-partition-method (the Megatron-DeepSpeed "
                                "fork GLM-130B ran; microsoft/Megatron-DeepSpeed hard-codes "
                                "type:transformer)";
  const std::string why =
      *method == planner::DeepSpeedPartition::kParameters ? "PipelineModule's default"
      : both ? who + "; PipelineModule's default, parameters, builds the same split"
             : who + "; PipelineModule's default, parameters, splits this model differently";
  return fmt::format(
      "# --emit deepspeed: stages of {} layers: build the PipelineModule with "
      "partition_method=\"{}\" ({}); a DeepSpeed config cannot set it\n",
      planner::format_stage_layers(layers), to_string(*method), why);
}

}  // namespace

std::string deepspeed_launch_note(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  std::string note;
  if (layout.tp > 1 || layout.pp > 1) {
    // Megatron-DeepSpeed megatron/arguments.py (f4157bea): the sizes its
    // PipeModelDataParallelTopology and mpu are built from.
    note += fmt::format(
        "# --emit deepspeed: the model-parallel sizes are the training script's: "
        "Megatron-DeepSpeed --tensor-model-parallel-size {} --pipeline-model-parallel-size {}; "
        "a DeepSpeed config cannot set them\n",
        layout.tp, layout.pp);
  }
  return note + partition_note(plan);
}

}  // namespace meshplan::reports
