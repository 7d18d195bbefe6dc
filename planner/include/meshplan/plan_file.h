#pragma once
// The versioned plan file: what `plan --save-plan` writes and `explain`, `simulate` and
// `execute` read. Schema: docs/plan-format.md.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/input_kind.h"
#include "meshplan/layout.h"
#include "meshplan/models.h"

namespace meshplan::planner {

inline constexpr const char* kPlanFormat = kPlanFileFormat;
inline constexpr int kPlanFormatVersion = 1;

struct Plan {
  models::TransformerConfig model;  // seq_length is the training sequence length
  models::ClusterConfig cluster;
  int64_t num_gpus = 0;
  Layout layout;
  PlanOptions options;

  bool operator==(const Plan&) const = default;
};

/// The plan file's JSON; `prediction` is stored as given (the planner's estimate as the plan
/// report writes it, reports::estimate_json; informative only, readers recompute it).
nlohmann::json plan_to_json(const Plan& plan, const nlohmann::json& prediction);
/// Throws InputError naming the field: missing or wrong-typed fields, a newer version,
/// tp*pp*dp != num_gpus, unknown schedule, an invalid layout.
Plan plan_from_json(const nlohmann::json& json, const std::string& source);

/// A layout's `recompute_modules`: a JSON list of Megatron-Core module names (at most 16),
/// parsed by parse_recompute_modules; anything else is an InputError naming `field`. Plan files
/// and runs files read it alike.
uint32_t recompute_modules_from_json(const nlohmann::json& names, const std::string& field);

/// Writes atomically (temporary file, then rename). Throws RuntimeError if it cannot.
void write_plan_file(const std::string& path, const Plan& plan, const nlohmann::json& prediction);
Plan read_plan_file(const std::string& path);

/// Layout <-> JSON object {tp, pp, dp, vpp, micro_batch, global_batch, recompute,
/// sequence_parallel, zero, schedule, placement[, cp][, stage_layers]}; cp is written only when
/// > 1 and read as 1 when absent, stage_layers only when the split is uneven.
nlohmann::json layout_to_json(const Layout& layout);
Layout layout_from_json(const nlohmann::json& json, const std::string& source);

/// The plan file's optional layout field "stage_layers" (or `field`, "virtual_stage_layers"): a
/// non-empty array of integers, as written (plan_from_json checks it against the model with
/// check_stage_layers, then maps the even split to {}). Throws InputError "<where>: <field>: ..."
/// on a wrong type.
std::vector<int64_t> stage_layers_from_json(const nlohmann::json& json, const std::string& where,
                                            const std::string& field = "stage_layers");

/// PlanOptions <-> the plan file's JSON object {flash_attention, overlap_grad_reduce,
/// overlap_param_gather, overlap_tp_comm, scatter_gather_pipeline, bucket_bytes,
/// allow_tp_across_nodes, framework[, cp_comm]}; cp_comm is written only when not "p2p" and
/// optional on reading. Throws InputError "<source>: options: <key>: ..." for an unknown key, a
/// wrong type or bucket_bytes < 1; bucket_bytes null (or unset when written) is the framework's
/// default, dp_bucket_bytes (`meshplan plan --save-plan` writes the value it used). Without
/// `defaults` every key is required (plan files); with them an absent key keeps its value from
/// `defaults` (validation runs state only what they know).
nlohmann::json options_to_json(const PlanOptions& options);
/// Throws InputError "<field>: must be in [1, 64] (<factor>)" for a load-imbalance factor
/// outside that range (PlanOptions::moe_load_imbalance).
void check_moe_load_imbalance(double factor, const std::string& field);
/// Throws InputError "<field>: must be in [0, 1] (<value>)" for a load-balancing loss
/// coefficient outside that range (PlanOptions::moe_aux_loss_coeff).
void check_moe_aux_loss_coeff(double coefficient, const std::string& field);
PlanOptions options_from_json(const nlohmann::json& json, const std::string& source,
                              const PlanOptions* defaults = nullptr);

}  // namespace meshplan::planner
