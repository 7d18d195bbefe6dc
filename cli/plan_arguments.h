#pragma once
// meshplan plan's flags: what each holds, and how they become the search space and the software
// options every searched layout is costed with. Each function throws InputError naming the flag.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "meshplan/cost_model.h"
#include "meshplan/emit.h"
#include "meshplan/models.h"
#include "meshplan/search.h"

namespace meshplan::cli {

struct PlanArguments {
  std::string model;
  std::string cluster;
  int64_t gpus = 0;
  std::optional<int64_t> global_batch, seq_len, tp, pp, dp, vpp, micro_batch, ep, etp, mb_group,
      dp_shard;
  double moe_load_imbalance = 1.0;
  double moe_aux_loss_coeff = 0.0;
  std::optional<std::string> recompute, sequence_parallel, schedule, stage_layers;
  std::optional<std::string> recompute_layers;        // a count or "auto"
  std::optional<std::string> recompute_group_layers;  // a count or "auto"
  std::optional<std::string> recompute_modules;       // comma-separated Megatron-Core names
  std::optional<int64_t> first_stage_layers, last_stage_layers;
  std::optional<std::string> pipeline_layout;  // Megatron-Core's layout string
  std::optional<int> zero;
  std::optional<std::string> cp;  // a size or "auto"
  std::string cp_comm = "p2p";
  std::string moe_dispatcher = "alltoall";
  std::string objective = "time";
  std::string placement = "tp-dp-pp";
  std::optional<std::string> framework;  // unset: meshplan on a CPU cluster, else megatron
  std::string precision = "bf16";
  std::string flash_attention = "on";
  int flash_attention_version = 2;
  int fsdp_version = 2;
  std::optional<std::string> fsdp_head_in_root;
  std::string overlap_grad_reduce = "on";
  std::string overlap_param_gather = "on";
  std::string overlap_tp_comm = "off";
  std::string fp8_param_gather = "off";
  std::string fp8_recipe = "delayed";
  std::string overlap_moe_expert_parallel_comm = "off";
  std::string delay_wgrad_compute = "off";
  std::string cross_entropy_loss_fusion = "off";
  std::string compile = "off";
  std::string norm_kernel = "fused";
  std::string optimizer_impl = "fused";
  std::string weight_decay = "on";
  std::string distribute_saved_activations = "off";
  // Unset: on for --framework megatron (Megatron-Core's default for interleaved schedules), off
  // for the others (planner::check_overlap_p2p_options refuses on for them).
  std::optional<std::string> overlap_p2p_comm;
  std::optional<std::string> grad_reduce_dtype;  // unset: the framework's default
  std::string scatter_gather_pipeline = "off";
  std::string pipeline_grad_scatter_gather = "on";
  std::string deepspeed_grad_all_reduce = "on";
  std::optional<double> bucket_mb;  // unset: the framework's default (planner::dp_bucket_bytes)
  // Unset: the framework's default (planner::vocab_size_divisible_by).
  std::optional<int64_t> make_vocab_size_divisible_by;
  bool allow_tp_across_nodes = false;
  int64_t top = 10;
  std::optional<int64_t> refine;
  std::string json_path, save_plan_path;
  int64_t save_plan_rank = 1;
  std::optional<std::string> memory_headroom;
  bool explain_rejections = false;
  std::string emit, emit_out;  // --emit TARGET [--emit-out FILE]
  // The flags given on the command line ("--overlap-tp-comm"), set before run_plan: an option
  // with a default cannot otherwise tell "given" from "left at its default".
  std::set<std::string> given;
};

/// Registers every flag of `meshplan plan` on `plan`, writing into `args`.
void add_plan_flags(CLI::App& plan, PlanArguments& args);

/// The model to plan: the preset or config file, at --seq-len when given (a Hugging Face config
/// without one plans at models::kHfDefaultSeqLength at most; `*note` says so, for stderr once
/// every input has been checked, so that bad input still prints one line).
models::TransformerConfig plan_model(const PlanArguments& args, std::string* note);

/// The layouts to search, from --gpus, the fixed sizes and the fixed choices; also checks --top,
/// --refine and --objective.
planner::SearchSpace search_space(const PlanArguments& args, const models::ClusterConfig& cluster);

/// --stage-layers or --first-stage-layers / --last-stage-layers into space.stage_layers (and
/// pp, which the list fixes); --pipeline-layout into the split, vpp and the interleaved schedule
/// (vpp > 1) it fixes.
void fix_stage_layers(const PlanArguments& args, const models::TransformerConfig& model,
                      planner::SearchSpace& space);

/// The software options every searched layout is costed with (on/off flags, --bucket-mb).
planner::PlanOptions plan_options(const PlanArguments& args, const models::ClusterConfig& cluster);

/// The checks that need the model, the space and the options together: a fixed flag the search
/// could only answer with "no feasible layout", or one that would be ignored, is named here.
void check_plan_arguments(const PlanArguments& args, const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const planner::SearchSpace& space,
                          const planner::PlanOptions& options);

/// --emit's target (none without --emit); --emit-out needs --emit, slurm needs --save-plan.
std::optional<reports::EmitTarget> emit_target(const PlanArguments& args);

}  // namespace meshplan::cli
