// plan --emit: the target dispatch and what the writers share (emit_common.h).

#include "meshplan/emit.h"

#include <fmt/format.h>

#include <cmath>

#include "emit_common.h"
#include "meshplan/errors.h"

namespace meshplan::reports {

namespace emit_detail {

NodeShape node_shape(const planner::Plan& plan, EmitTarget target) {
  const int64_t per_node = plan.cluster.gpus_per_node;
  if (plan.num_gpus <= per_node) {
    return {1, plan.num_gpus};
  }
  if (plan.num_gpus % per_node != 0) {
    refuse(
        target, "num_gpus",
        fmt::format("the launcher starts the same number of ranks on every node of {}", per_node),
        std::to_string(plan.num_gpus));
  }
  return {plan.num_gpus / per_node, per_node};
}

std::string flag_lines(const Flags& flags) {
  std::string out;
  for (const auto& [flag, value] : flags) {
    out +=
        value.empty() ? fmt::format("  {} \\\n", flag) : fmt::format("  {} {} \\\n", flag, value);
  }
  return out + "  \"$@\"\n";
}

void refuse(EmitTarget target, const std::string& field, const std::string& what,
            const std::string& value) {
  throw InputError(fmt::format("--emit {}: {}: {} ({})", to_string(target), field, what, value));
}

std::string integral_rope_theta(const models::TransformerConfig& model, EmitTarget target) {
  // One base for every layer: Megatron-Core's RotaryEmbedding(rotary_base=...) is built once per
  // model (gpt_model.py, d98e8a64); Gemma 3's (local, global) pair exists only in
  // Megatron-Bridge's own Gemma3ModelProvider (gemma3_bridge.py provider.rotary_base).
  if (model.rope_local_theta != 0.0) {
    refuse(target, "model.rope_local_theta",
           fmt::format("the sliding layers turn by a base of their own, the others by rope_theta "
                       "{}; Megatron-LM's --rotary-base gives every layer one base",
                       model.rope_theta),
           fmt::format("{}", model.rope_local_theta));
  }
  // validate_model bounds the base to (1, 1e12]: an integral one fits int64_t exactly.
  if (model.rope_theta != std::floor(model.rope_theta)) {
    refuse(target, "model.rope_theta",
           "the rotary base is an integer flag in Megatron-LM and Megatron-DeepSpeed (arguments.py "
           "type=int)",
           fmt::format("{}", model.rope_theta));
  }
  return std::to_string(static_cast<int64_t>(model.rope_theta));
}

void require_framework(EmitTarget target, planner::Framework framework, const planner::Plan& plan) {
  // Megatron-Core's flex token dispatcher (DeepEP) has no counterpart in DeepSpeed or
  // torchtitan: their MoE layers dispatch with an all-to-all.
  if (plan.options.moe_dispatcher != planner::MoeDispatcher::kAllToAll &&
      framework != planner::Framework::kMegatron) {
    refuse(target, "options.moe_dispatcher",
           fmt::format("Megatron-Core's flex token dispatcher is emitted for Megatron-LM only; "
                       "re-plan with --moe-dispatcher alltoall to emit it for {}",
                       to_string(target)),
           planner::to_string(plan.options.moe_dispatcher));
  }
  // Multi-token prediction runs under Megatron-Core's --mtp-num-layers only
  // (planner::check_mtp_options says why for each framework).
  if (plan.model.has_mtp() && framework != planner::Framework::kMegatron) {
    refuse(target, "model.mtp_num_layers",
           fmt::format("the multi-token-prediction module is emitted for Megatron-LM only "
                       "(--mtp-num-layers); {} has none",
                       to_string(target)),
           std::to_string(plan.model.mtp_num_layers));
  }
  // A plan costed for other software has other predictions (memory, step time) and often another
  // best layout: the config would run something meshplan did not choose for this framework.
  if (plan.options.framework != framework) {
    refuse(target, "options.framework",
           fmt::format("the plan was costed for {}; re-plan with --framework {} to emit it for {}",
                       planner::to_string(plan.options.framework), planner::to_string(framework),
                       to_string(target)),
           planner::to_string(plan.options.framework));
  }
  const planner::Validity validity =
      planner::check_framework(plan.model, plan.options, plan.layout, true);
  if (!validity.ok()) {
    throw InputError(fmt::format("--emit {}: layout: {}", to_string(target), validity.reason));
  }
}

std::string plan_comment(const planner::Plan& plan, EmitTarget target, const std::string& comment) {
  const models::TransformerConfig& m = plan.model;
  std::string out =
      fmt::format("{} meshplan plan --emit {}: model {}, cluster {}, {} GPUs\n", comment,
                  to_string(target), m.name, plan.cluster.name, plan.num_gpus);
  out += fmt::format("{} layout {}, global batch {}, costed for framework {}\n", comment,
                     planner::describe(plan.layout), plan.layout.global_batch,
                     planner::to_string(plan.options.framework));
  const std::string caveat = planner::framework_caveat(plan.options.framework, plan.layout);
  if (!caveat.empty()) {
    out += fmt::format("{} caveat: {}\n", comment, caveat);
  }
  return out;
}

}  // namespace emit_detail

EmitTarget parse_emit_target(const std::string& text, const std::string& field) {
  for (EmitTarget target :
       {EmitTarget::kMegatron, EmitTarget::kTorchtitan, EmitTarget::kDeepSpeed,
        EmitTarget::kMegatronDeepSpeed, EmitTarget::kMegatronBridge, EmitTarget::kSlurm}) {
    if (text == to_string(target)) {
      return target;
    }
  }
  throw InputError(
      fmt::format("{}: unknown emit target ({}); supported: megatron, torchtitan, deepspeed, "
                  "megatron-deepspeed, megatron-bridge, slurm",
                  field, text));
}

std::string to_string(EmitTarget target) {
  switch (target) {
    case EmitTarget::kMegatron:
      return "megatron";
    case EmitTarget::kTorchtitan:
      return "torchtitan";
    case EmitTarget::kDeepSpeed:
      return "deepspeed";
    case EmitTarget::kMegatronDeepSpeed:
      return "megatron-deepspeed";
    case EmitTarget::kMegatronBridge:
      return "megatron-bridge";
    case EmitTarget::kSlurm:
      return "slurm";
  }
  return "?";
}

std::optional<planner::Framework> target_framework(EmitTarget target) {
  switch (target) {
    case EmitTarget::kMegatron:
    case EmitTarget::kMegatronBridge:
      return planner::Framework::kMegatron;
    case EmitTarget::kTorchtitan:
      return planner::Framework::kFsdp;
    case EmitTarget::kDeepSpeed:
    case EmitTarget::kMegatronDeepSpeed:
      return planner::Framework::kDeepSpeed;
    case EmitTarget::kSlurm:
      break;
  }
  return std::nullopt;
}

std::string emit_launch_config(const planner::Plan& plan, EmitTarget target,
                               const std::string& plan_path) {
  switch (target) {
    case EmitTarget::kMegatron:
      return emit_megatron(plan);
    case EmitTarget::kTorchtitan:
      return emit_torchtitan(plan);
    case EmitTarget::kDeepSpeed:
      return emit_deepspeed(plan);
    case EmitTarget::kMegatronDeepSpeed:
      return emit_megatron_deepspeed(plan);
    case EmitTarget::kMegatronBridge:
      return emit_megatron_bridge(plan);
    case EmitTarget::kSlurm:
      if (plan_path.empty()) {
        throw InputError(
            "--emit slurm: needs --save-plan (the script runs meshplan execute on that file)");
      }
      return emit_slurm(plan, plan_path);
  }
  return "";
}

EmitChoice emit_best_expressible(const std::vector<planner::Plan>& ranked, EmitTarget target,
                                 const std::string& plan_path) {
  EmitChoice choice;
  // Every ranked plan was costed for the same framework: when it is not the target's, no later
  // rank can be emitted either, and rank 1's refusal says so on its own.
  const std::optional<planner::Framework> framework = target_framework(target);
  if (!ranked.empty() && framework && ranked.front().options.framework != *framework) {
    emit_launch_config(ranked.front(), target, plan_path);  // throws the framework refusal
  }
  for (size_t i = 0; i < ranked.size(); ++i) {
    try {
      choice.config = emit_launch_config(ranked[i], target, plan_path);
      choice.index = i;
      return choice;
    } catch (const InputError& refusal) {
      if (i == 0) {
        choice.best_refusal = refusal.what();
      }
    }
  }
  if (ranked.size() <= 1) {
    throw InputError(choice.best_refusal);
  }
  throw InputError(fmt::format("{}; none of the {} next-ranked plans can be emitted either",
                               choice.best_refusal, ranked.size() - 1));
}

std::string format_emit_choice(EmitTarget target, const EmitChoice& choice,
                               const planner::Plan& chosen, double chosen_step_time_s,
                               double best_step_time_s, bool saved) {
  if (choice.index == 0) {
    return "";
  }
  // The refusal without its "--emit T: " prefix, which the note already starts with.
  const std::string prefix = fmt::format("--emit {}: ", to_string(target));
  std::string why = choice.best_refusal;
  if (why.rfind(prefix, 0) == 0) {
    why = why.substr(prefix.size());
  }
  return fmt::format(
      "# --emit {}: the best plan cannot be emitted ({}); rank {} is emitted{} instead: {}, "
      "{:.4f} s/step (+{:.2f}% over the best)\n",
      to_string(target), why, choice.index + 1, saved ? " and saved" : "",
      planner::describe(chosen.layout), chosen_step_time_s,
      100.0 * (chosen_step_time_s / best_step_time_s - 1.0));
}

}  // namespace meshplan::reports
