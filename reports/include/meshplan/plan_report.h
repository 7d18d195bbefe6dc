#pragma once
// Terminal tables and JSON reports of the planner: plan, explain, validate. Tables follow
// nccl-tests: a names line and a units line, '#' before every line that is not data,
// fixed-width right-aligned numbers, a summary footer.

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "meshplan/validation.h"

namespace meshplan::reports {

/// Header line naming the model (with its exact parameter count), cluster and batch.
std::string format_plan_header(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, int64_t num_gpus,
                               int64_t global_batch);
/// The ranked layouts.
std::string format_plan_table(const planner::SearchResult& result);
/// Counts of rejected layouts per reason, with one example reason each.
std::string format_rejections(const planner::SearchResult& result);
/// `{"model": {...shape, num_parameters}, "cluster", "num_gpus", "plans": [...]}` best first.
nlohmann::json plan_report_json(const models::TransformerConfig& model,
                                const models::ClusterConfig& cluster, int64_t num_gpus,
                                const planner::SearchResult& result);

/// Per-stage memory breakdown, per-op times and per-collective bytes of one plan.
std::string format_explain(const planner::Plan& plan, const planner::PlanEstimate& estimate);

std::string format_validation_table(const planner::ValidationReport& report);

}  // namespace meshplan::reports
