// meshplan sweep's terminal table and --json report: one row and one record per (cluster, GPU
// count), written together from the same point.

#include "meshplan/sweep_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "memory_json.h"
#include "meshplan/plan_file.h"
#include "meshplan/plan_report.h"
#include "sweep_points.h"

namespace meshplan::reports {

namespace {

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

constexpr const char* kNamesFormat =
    "#{:>13} {:>6} {:>6} {:>3} {:>3} {:>5} {:>3} {:>3} {:>5} {:>8} {:>5} {:>11} {:>9} {:>11} "
    "{:>12} {:>7} {:>6}\n";

// Appends `point` as a table row and a record of "points".
void add_point_row(const planner::SweepRequest& request, const planner::SweepPoint& point,
                   Report* report) {
  const planner::SweepCluster& cluster = request.clusters[point.cluster_index];
  nlohmann::json record = {{"cluster", cluster.label},
                           {"gpus", point.num_gpus},
                           {"global_batch", point.global_batch},
                           {"feasible", point.feasible},
                           {"price_per_gpu_hour", optional_json(cluster.price_per_gpu_hour)}};
  if (!point.feasible) {
    report->table += fmt::format(" {:>13} {:>6} {:>6}  no feasible plan: {}\n", cluster.label,
                                 point.num_gpus, point.global_batch, point.reason);
    record["reason"] = point.reason;
    for (const char* key : {"layout", "layout_text", "step_time_s", "mfu", "tokens_per_s",
                            "time_to_train_s", "gpu_hours", "cost", "scaling_efficiency",
                            "baseline_gpus", "peak_memory_bytes", "memory"}) {
      record[key] = nullptr;
    }
    record["pareto"] = false;
    report->json["points"].push_back(std::move(record));
    return;
  }
  const planner::PlanEstimate& e = point.best;
  const planner::Layout& l = e.layout;
  report->table += fmt::format(
      " {:>13} {:>6} {:>6} {:>3} {:>3} {:>5} {:>3} {:>3} {:>5} {:>8.3f} {:>5.1f} {:>11.0f} "
      "{:>9.2f} {:>11.0f} {:>12} {:>7.1f} {:>6}\n",
      cluster.label, point.num_gpus, point.global_batch, l.tp, l.pp, l.dp, l.vpp, l.micro_batch,
      l.num_micro_batches(), e.step_time_s, 100.0 * e.mfu, e.tokens_per_s,
      point.time_to_train_s / kSecondsPerDay, point.gpu_hours, cost_text(point),
      100.0 * point.scaling_efficiency, point.pareto ? "*" : "");
  if (planner::hybrid_sharded(l)) {  // not in the columns: said under the row, as plan does
    report->table +=
        fmt::format("#      {} x {}: {}\n", cluster.label, point.num_gpus, hybrid_sharding_note(l));
  }
  if (l.recompute_layers > 0) {  // the block method (--recompute-layers auto): not in the columns
    report->table += fmt::format(
        "#      {} x {}: full recompute of {} layers per chunk (Megatron --recompute-method block "
        "--recompute-num-layers {})\n",
        cluster.label, point.num_gpus, l.recompute_layers, l.recompute_layers);
  }
  if (l.recompute == planner::Recompute::kFull && l.recompute_group_layers > 1) {
    report->table += fmt::format(
        "#      {} x {}: full recompute in groups of {} layers (Megatron --recompute-method "
        "uniform "
        "--recompute-num-layers {})\n",
        cluster.label, point.num_gpus, l.recompute_group_layers, l.recompute_group_layers);
  }
  if (l.recompute == planner::Recompute::kSelective &&
      l.recompute_modules != planner::kRecomputeCoreAttn) {  // --recompute-modules auto's pick
    const std::vector<std::string> names = planner::recompute_module_names(l.recompute_modules);
    report->table +=
        fmt::format("#      {} x {}: selective recompute of {} (Megatron --recompute-modules {})\n",
                    cluster.label, point.num_gpus, fmt::join(names, ","), fmt::join(names, " "));
  }
  record["reason"] = nullptr;
  record["layout"] = planner::layout_to_json(l);
  record["layout_text"] = planner::describe(l);
  record["step_time_s"] = e.step_time_s;
  record["mfu"] = e.mfu;
  record["tokens_per_s"] = e.tokens_per_s;
  record["time_to_train_s"] = point.time_to_train_s;
  record["gpu_hours"] = point.gpu_hours;
  record["cost"] = optional_json(point.cost);
  record["scaling_efficiency"] = point.scaling_efficiency;
  record["baseline_gpus"] = point.baseline_gpus;
  record["pareto"] = point.pareto;
  record["peak_memory_bytes"] = e.peak_memory_bytes;
  record["memory"] = memory_json(peak_stage_memory(e));
  report->json["points"].push_back(std::move(record));
}

// '#' lines above the table: model, token budget, batch rule, each cluster's price and source.
std::string sweep_header(const planner::SweepRequest& request, int64_t fixed_batch) {
  const models::TransformerConfig& model = request.model;
  std::string out = fmt::format(
      "# sweep: model {} ({:.2f}B parameters), seq {}, token budget {:.4g} tokens, framework {}\n",
      model.name, static_cast<double>(models::count_parameters(model).total) / 1e9,
      model.seq_length, request.num_tokens, planner::to_string(request.options.framework));
  if (request.batch_scaling == planner::BatchScaling::kFixed) {
    out += fmt::format("# global batch {} sequences ({} tokens) held fixed at every GPU count{}\n",
                       fixed_batch, fixed_batch * model.seq_length,
                       request.global_batch > 0
                           ? " (--global-batch)"
                           : " (default: 2 per GPU at the smallest count, what plan picks "
                             "there)");
  } else {
    out += "# global batch grows with the GPU count: 2 sequences per GPU (--batch-scaling grow)\n";
  }
  out += format_plan_options(request.options, request.space_template);
  for (const planner::SweepCluster& c : request.clusters) {
    const std::string price =
        c.price_per_gpu_hour
            ? fmt::format("{:g} USD per GPU-hour from {}", *c.price_per_gpu_hour, c.price_source)
            : fmt::format("no price ({} is null; --price {}=USD_PER_GPU_HOUR gives one)",
                          c.price_source, c.label);
    out += fmt::format("# cluster {}: {} ({} per node), {}\n", c.label, c.cluster.gpu.name,
                       c.cluster.gpus_per_node, price);
  }
  return out + "#\n";
}

}  // namespace

const planner::MemoryBreakdown& peak_stage_memory(const planner::PlanEstimate& estimate) {
  return std::max_element(estimate.stages.begin(), estimate.stages.end(),
                          [](const planner::StageEstimate& a, const planner::StageEstimate& b) {
                            return a.memory.total_bytes() < b.memory.total_bytes();
                          })
      ->memory;
}

std::string cost_text(const planner::SweepPoint& point) {
  return point.cost ? fmt::format("{:.0f}", *point.cost) : "-";
}

std::string point_name(const planner::SweepRequest& request, const planner::SweepPoint& point) {
  return fmt::format("{} x {}", request.clusters[point.cluster_index].label, point.num_gpus);
}

Report sweep_report(const planner::SweepRequest& request, const planner::SweepResult& result) {
  const int64_t fixed_batch = request.global_batch > 0
                                  ? request.global_batch
                                  : planner::sweep_default_batch(request.gpu_counts);
  Report report;
  report.table = sweep_header(request, fixed_batch);
  report.table +=
      fmt::format(kNamesFormat, "cluster", "gpus", "batch", "tp", "pp", "dp", "vpp", "mb", "m",
                  "step", "mfu", "tokens/s", "time", "gpu-hours", "cost", "scaling", "pareto");
  report.table += fmt::format(kNamesFormat, "", "", "(seq)", "", "", "", "", "", "(mb)", "(s)",
                              "(%)", "(tok/s)", "(days)", "(GPU-h)", "(USD)", "(%)", "");
  nlohmann::json clusters = nlohmann::json::array();
  for (const planner::SweepCluster& c : request.clusters) {
    clusters.push_back({{"name", c.label},
                        {"gpu", c.cluster.gpu.name},
                        {"price_per_gpu_hour", optional_json(c.price_per_gpu_hour)},
                        {"price_source", c.price_source}});
  }
  report.json = {
      {"model", request.model.name},
      {"num_parameters", models::count_parameters(request.model).total},
      {"seq_length", request.model.seq_length},
      {"num_tokens", request.num_tokens},
      {"framework", planner::to_string(request.options.framework)},
      {"batch_scaling", request.batch_scaling == planner::BatchScaling::kFixed ? "fixed" : "grow"},
      {"global_batch", request.batch_scaling == planner::BatchScaling::kFixed
                           ? nlohmann::json(fixed_batch)
                           : nlohmann::json(nullptr)},
      {"clusters", clusters},
      {"points", nlohmann::json::array()}};
  std::string front;
  size_t num_feasible = 0;
  for (const planner::SweepPoint& point : result.points) {
    add_point_row(request, point, &report);
    num_feasible += point.feasible ? 1 : 0;
    if (point.pareto) {
      front += (front.empty() ? "" : ", ") + point_name(request, point);
    }
  }
  std::string unpriced;
  for (const planner::SweepCluster& c : request.clusters) {
    if (!c.price_per_gpu_hour) {
      unpriced += (unpriced.empty() ? "" : ", ") + c.label;
    }
  }
  report.table += fmt::format(
      "# {} points, {} with a feasible plan; scaling against each cluster's smallest count with a "
      "plan; Pareto front (time, cost): {}{}\n",
      result.points.size(), num_feasible, front.empty() ? "none" : front,
      unpriced.empty() ? "" : fmt::format("; no cost without a price: {}", unpriced));
  return report;
}

}  // namespace meshplan::reports
