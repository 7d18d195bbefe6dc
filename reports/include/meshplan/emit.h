#pragma once
// plan --emit: the chosen plan as the launch configuration of the software people run it with.
// Each target expresses what its framework can; anything it cannot throws InputError
// "--emit <target>: <field>: <what the framework cannot express> (<value>)", never a silent
// approximation. Flag and key names are checked against each framework's own parser source
// (tests/reports/emit_test.cpp cites the files).

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/plan_file.h"

namespace meshplan::reports {

enum class EmitTarget {
  kMegatron,
  kTorchtitan,
  kDeepSpeed,
  kMegatronDeepSpeed,
  kMegatronBridge,
  kSlurm
};
/// "megatron", "torchtitan", "deepspeed", "megatron-deepspeed", "megatron-bridge", "slurm";
/// InputError naming
/// `field` otherwise.
EmitTarget parse_emit_target(const std::string& text, const std::string& field);
std::string to_string(EmitTarget target);
/// The framework whose plans a target emits (megatron and megatron-bridge: megatron, torchtitan:
/// fsdp, deepspeed and megatron-deepspeed: deepspeed); none for slurm, whose script runs meshplan's
/// executor on any plan it accepts.
std::optional<planner::Framework> target_framework(EmitTarget target);

/// Megatron-LM: a bash script, the torchrun line and pretrain_gpt.py's flags for the plan (one
/// flag per line, "  --flag [value] \"), then "$@" for the flags the plan does not decide
/// (data, tokenizer, --train-iters, --lr).
std::string emit_megatron(const planner::Plan& plan);
/// torchtitan: a TOML job config (model flavor, [training], [parallelism],
/// [activation_checkpoint]). Refuses models that are not a torchtitan llama3 flavor.
std::string emit_torchtitan(const planner::Plan& plan);
/// DeepSpeed: a config JSON (batch sizes, gradient accumulation, zero_optimization, bf16,
/// pipeline's partitioned sends and checkpoint interval).
std::string emit_deepspeed(const planner::Plan& plan);
/// What a DeepSpeed config cannot say, as comment lines ("# --emit deepspeed: ...\n") printed
/// beside it: for tp or pp > 1 the Megatron-DeepSpeed flags of the model-parallel sizes; for
/// pp > 1 the PipelineModule partition_method that builds the plan's stages
/// (deepspeed_partition_of). "" when there is nothing to say.
std::string deepspeed_launch_note(const planner::Plan& plan);
/// Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed f4157bea): a bash script that writes the
/// plan's DeepSpeed config (emit_deepspeed's JSON) to ds_config.json and starts pretrain_gpt.py
/// with the deepspeed launcher, one flag per line ("  --flag [value] \"), then "$@" for the
/// flags the plan does not decide (--train-iters, --lr and its schedule, checkpointing).
std::string emit_megatron_deepspeed(const planner::Plan& plan);
/// Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge 067f987d): a bash script that starts
/// scripts/training/run_recipe.py's vanilla_gpt_pretrain_config recipe (Megatron-LM's
/// pretrain_gpt.py defaults, emit_megatron_bridge.cpp) under torchrun with one ConfigContainer
/// override per line ("  model.tensor_model_parallel_size=4 \"), then "$@". Every setting the
/// plan decides is written, whatever the recipe's default.
std::string emit_megatron_bridge(const planner::Plan& plan);
/// Slurm: an sbatch script that runs `meshplan execute <plan_path>` on plan.num_gpus ranks
/// (nodes, tasks per node, one core per rank bound with srun), passing the script's arguments
/// on to execute. Refuses plans the executor cannot run (its own check).
std::string emit_slurm(const planner::Plan& plan, const std::string& plan_path);

/// The target's text; `plan_path` is the saved plan file (only slurm needs it: InputError
/// "--emit slurm: needs --save-plan ..." when empty).
std::string emit_launch_config(const planner::Plan& plan, EmitTarget target,
                               const std::string& plan_path);

/// plan --emit's pick among the search's ranked plans: the best-ranked one the target can
/// express (emit_best_expressible).
struct EmitChoice {
  size_t index = 0;          // into the ranked list, 0 = the best plan
  std::string config;        // the launch configuration emit_launch_config wrote for it
  std::string best_refusal;  // why the best plan could not be emitted; "" when index is 0
};
/// Tries `ranked` (best first) in order and returns the first plan emit_launch_config accepts,
/// so `plan --framework deepspeed --emit deepspeed` emits the best plan DeepSpeed's config can
/// say instead of stopping at a ZB-H1 or sequence-parallel pick. When none can be emitted,
/// throws the best plan's InputError, saying how many plans were tried. Precondition: `ranked`
/// is not empty.
EmitChoice emit_best_expressible(const std::vector<planner::Plan>& ranked, EmitTarget target,
                                 const std::string& plan_path);
/// The note plan prints beside the table when the emitted plan is not the best one:
/// "# --emit T: the best plan cannot be emitted (<why>); rank K is emitted instead: <layout>,
/// S s/step (+P% over the best)\n". "" when choice.index is 0.
std::string format_emit_choice(EmitTarget target, const EmitChoice& choice,
                               const planner::Plan& chosen, double chosen_step_time_s,
                               double best_step_time_s, bool saved);

}  // namespace meshplan::reports
