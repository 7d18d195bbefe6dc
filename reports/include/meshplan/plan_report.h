#pragma once
// Terminal tables and JSON reports of the planner: plan, explain, validate. Tables follow
// nccl-tests: a names line and a units line, '#' before every line that is not data,
// fixed-width right-aligned numbers, a summary footer.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "meshplan/plan_file.h"
#include "meshplan/reports.h"
#include "meshplan/search.h"
#include "meshplan/validation.h"

namespace meshplan::reports {

/// Header lines naming the framework, the model (with its exact parameter count), cluster and
/// batch.
std::string format_plan_header(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, int64_t num_gpus,
                               int64_t global_batch,
                               planner::Framework framework = planner::Framework::kMegatron);
/// The software options every layout was costed with and the search's placement and memory
/// headroom: one '#' line.
std::string format_plan_options(const planner::PlanOptions& options,
                                const planner::SearchSpace& space);
/// The options line of one plan (explain, simulate): its software options and its layout's
/// placement, nothing searched.
std::string format_plan_options(const planner::PlanOptions& options, planner::Placement placement);
/// Communication a step waits for: exposed tp collectives + pipeline transfers + exposed dp
/// gradient sync, seconds (the plan table's "exposed" column).
double exposed_communication_seconds(const planner::StepBreakdown& breakdown);
/// The ranked layouts: the table (with its footer) and the --json report
/// `{"model": {...shape, num_parameters}, "cluster", "num_gpus", "plans": [...]}`, best first;
/// each row and its record come from the same estimate. Columns m (micro-batches per pipeline
/// per step), bubble and exposed (communication) explain the ranking; the records carry them as
/// num_micro_batches, step_breakdown.bubble_seconds and exposed_comm_seconds. A layout
/// `options.framework` runs untested upstream (planner::framework_caveat) gets a "caveat" line
/// under its row and a "caveat" field in its record.
Report plan_report(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                   int64_t num_gpus, const planner::SearchResult& result,
                   const planner::PlanOptions& options);
/// Counts of rejected layouts per reason, with one example reason each.
std::string format_rejections(const planner::SearchResult& result);

/// What a hybrid-sharded layout (planner::hybrid_sharded) shards over, in its framework's words:
/// ZeRO-3 over the shard group with torchtitan's degrees (fsdp), or the distributed optimizer
/// over dp_shard ranks with Megatron's instance count (zero 1). Plan table and sweep notes.
std::string hybrid_sharding_note(const planner::Layout& layout);

/// One estimate as JSON: layout, step_time_s, mfu, model_tflops_per_gpu, tokens_per_s,
/// peak_memory_bytes, and the step, per-stage memory and per-collective breakdowns. A record of
/// `plan --json`, and the plan file's "prediction".
nlohmann::json estimate_json(const planner::PlanEstimate& estimate);

/// One plan of `plan --refine`: its analytic rank (from 1) and both step times.
struct RefinedPlan {
  size_t analytic_rank = 0;
  double simulated_step_time_s = 0;
  double analytic_step_time_s = 0;
  planner::Layout layout;
};
/// The re-ranked plans, best simulated first, as given.
std::string format_refined_table(const std::vector<RefinedPlan>& refined);

/// Per-stage memory breakdown, per-op times and per-collective bytes of one plan.
std::string format_explain(const planner::Plan& plan, const planner::PlanEstimate& estimate);

/// The predicted-against-published table and the --json report {runs, num_runs, num_predicted,
/// num_not_predicted, mean_abs_error_pct, max_abs_error_pct} (mean and max over the predicted
/// runs, null when none is), each run's row and record written together; a run not predicted
/// has "predicted_step_time_s": null and its reason in "error". The footer ends in OK or FAILED.
Report validation_report(const planner::ValidationReport& report);

/// `meshplan models` and `meshplan clusters`: one row per preset.
std::string format_model_presets();
std::string format_cluster_presets();

}  // namespace meshplan::reports
