#pragma once
// Shared by the --emit writers (emit_*.cpp): node shape, refusals, the comment header.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshplan/emit.h"

namespace meshplan::reports::emit_detail {

/// A launch script's (flag, value or "") pairs, in the order they are written.
using Flags = std::vector<std::pair<std::string, std::string>>;

/// `flags` one per line, "  --flag value \\" (or "  --flag \\"), then "  \"$@\"" for the
/// user's own flags, as the megatron and megatron-deepspeed scripts end.
std::string flag_lines(const Flags& flags);

/// Processes per node and nodes, as launchers start them: the same count on every node.
struct NodeShape {
  int64_t num_nodes = 1;
  int64_t ranks_per_node = 1;
};
/// min(num_gpus, gpus_per_node) per node; InputError "--emit <target>: num_gpus: ..." when
/// num_gpus is above one node and not a multiple of gpus_per_node.
NodeShape node_shape(const planner::Plan& plan, EmitTarget target);

/// Throws InputError "--emit <target>: <field>: <what> (<value>)".
[[noreturn]] void refuse(EmitTarget target, const std::string& field, const std::string& what,
                         const std::string& value);

/// The model's rope_theta as the integer Megatron-LM's --rotary-base and Megatron-DeepSpeed's
/// --rotary-position-embeddings-theta parse (arguments.py type=int in both); a base with a
/// fraction is refused, named for `target`.
std::string integral_rope_theta(const models::TransformerConfig& model, EmitTarget target);

/// Refuses a plan costed for another framework than the target's (`framework`), and a layout
/// the framework's own rules (planner::check_framework) refuse.
void require_framework(EmitTarget target, planner::Framework framework, const planner::Plan& plan);

/// Comment lines (each starting with `comment`) naming the plan: model, cluster, layout.
std::string plan_comment(const planner::Plan& plan, EmitTarget target, const std::string& comment);

/// The DeepSpeed config JSON of a deepspeed plan (emit_deepspeed.cpp), shared by --emit
/// deepspeed and the config --emit megatron-deepspeed embeds. Refuses, named for `target`, what
/// the DeepSpeed engine cannot run as costed (placement, vpp, cp, MoE); the framework check and
/// each target's own refusals are the caller's.
std::string deepspeed_config(const planner::Plan& plan, EmitTarget target);

/// Megatron-LM pretrain_gpt.py flags of a megatron plan (emit_megatron.cpp), in the order the
/// script writes them; what Megatron-LM cannot express is refused, named for `target`. The
/// caller checks the framework first (require_framework).
Flags megatron_flags(const planner::Plan& plan, EmitTarget target);

/// The CUDA_DEVICE_MAX_CONNECTIONS a Megatron-Core run of the plan needs exported (1 for tp or
/// cp > 1 without Megatron-FSDP, 32 with the EP all-to-all overlap), 0 for none.
int megatron_device_max_connections(const planner::Plan& plan);

/// The launch of a Megatron-Core script on every node: "# Run once per node ...", the
/// CUDA_DEVICE_MAX_CONNECTIONS export the plan needs, then "torchrun --nnodes ... \" and
/// "  <entry_point> \" (node_shape refuses a GPU count that is not whole nodes).
std::string torchrun_lines(const planner::Plan& plan, EmitTarget target,
                           const std::string& entry_point);

}  // namespace meshplan::reports::emit_detail
