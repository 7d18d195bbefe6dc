#pragma once
// meshplan sweep's outputs: the terminal table with its --json record, and the offline HTML
// report (inline SVG charts, no script, no network fetch).

#include <string>

#include "meshplan/reports.h"
#include "meshplan/sweep.h"

namespace meshplan::reports {

/// The table (names and units lines, one row per point, a point without a plan as a row of
/// '-' with its reason, a footer naming the Pareto front) and the --json report
/// `{"model", "seq_length", "num_tokens", "batch_scaling", "global_batch", "clusters": [{name,
/// price_per_gpu_hour, price_source}], "points": [{"cluster", "gpus", "global_batch", "feasible",
/// "reason", "layout", "layout_text", "step_time_s", "mfu", "tokens_per_s", "time_to_train_s",
/// "gpu_hours", "cost", "price_per_gpu_hour", "scaling_efficiency", "baseline_gpus", "pareto",
/// "peak_memory_bytes", "memory"}]}`; each row and its record are written from the same point.
Report sweep_report(const planner::SweepRequest& request, const planner::SweepResult& result);

/// A self-contained HTML page: time to train against GPUs per cluster (log-log), cost against
/// time with the Pareto front marked, per-GPU memory of each chosen plan as stacked bars
/// (weights, gradients, optimizer, activations, reserve; the stage with the highest peak), and
/// the table of points with their layouts. Charts have ids chart-time, chart-cost and
/// chart-memory.
std::string sweep_html(const planner::SweepRequest& request, const planner::SweepResult& result);

}  // namespace meshplan::reports
