// meshplan simulate's terminal table (nccl-tests layout: names line, units line, '#' before
// every line that is not data, a summary footer) and its --json record. Each StageRow and
// PathRow is written to both in the same place.

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "meshplan/plan_file.h"
#include "meshplan/plan_report.h"
#include "meshplan/reports.h"

namespace meshplan::reports {
namespace {

using simulator::SimulationResult;

struct StageRow {
  int64_t stage = 0;
  int64_t num_ranks = 0;
  double seconds[4] = {};  // compute, exposed comm, bubble, idle
  double percent[4] = {};  // of the step time
};

constexpr const char* kColumns[4] = {"compute", "exposed comm", "bubble", "idle"};
constexpr const char* kJsonKeys[4] = {"compute", "exposed_comm", "bubble", "idle"};

std::vector<StageRow> stage_rows(const SimulationResult& result) {
  std::vector<StageRow> rows;
  for (const simulator::StageBreakdown& stage : result.stages) {
    StageRow row;
    row.stage = stage.stage;
    row.num_ranks = stage.num_ranks;
    const double values[4] = {stage.compute_seconds, stage.exposed_comm_seconds,
                              stage.bubble_seconds, stage.idle_seconds};
    for (int i = 0; i < 4; ++i) {
      row.seconds[i] = values[i];
      row.percent[i] = result.step_time_s > 0 ? 100.0 * values[i] / result.step_time_s : 0.0;
    }
    rows.push_back(row);
  }
  return rows;
}

// The critical path by (stage, category), in order of first appearance.
struct PathRow {
  int64_t stage = 0;
  std::string category;
  int64_t num_ops = 0;
  double seconds = 0;
  double percent = 0;  // of the step time
};

std::vector<PathRow> path_rows(const SimulationResult& result) {
  std::vector<PathRow> rows;
  std::map<std::pair<int64_t, std::string>, size_t> index;
  for (const simulator::CriticalSegment& segment : result.critical_path) {
    const int64_t stage = result.ranks[segment.rank].coords.pp_rank;
    auto [it, inserted] = index.emplace(std::make_pair(stage, segment.category), rows.size());
    if (inserted) {
      rows.push_back(PathRow{stage, segment.category, 0, 0, 0});
    }
    PathRow& row = rows[it->second];
    row.num_ops += segment.num_ops;
    row.seconds += segment.end_seconds - segment.start_seconds;
  }
  for (PathRow& row : rows) {
    row.percent = result.step_time_s > 0 ? 100.0 * row.seconds / result.step_time_s : 0.0;
  }
  return rows;
}

// Decimals for seconds so that the step time shows about 5 significant digits.
int seconds_decimals(double step_seconds) {
  if (step_seconds >= 100) {
    return 2;
  }
  if (step_seconds >= 1) {
    return 4;
  }
  if (step_seconds >= 0.01) {
    return 6;
  }
  return 9;
}

constexpr size_t kPathRowsShown = 10;

// Whether path row i is among the kPathRowsShown largest (ties: the earlier row).
std::vector<bool> shown_path_rows(const std::vector<PathRow>& path) {
  std::vector<size_t> order(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return path[a].seconds > path[b].seconds; });
  std::vector<bool> shown(path.size(), false);
  for (size_t i = 0; i < std::min(order.size(), kPathRowsShown); ++i) {
    shown[order[i]] = true;
  }
  return shown;
}

// The table's opening lines (what was simulated) and the stage table's two header lines.
std::string table_header(const SimulationResult& result) {
  std::string out = fmt::format("# meshplan simulate: {} on {}, {} GPUs\n", result.model_name,
                                result.cluster_name, result.layout.num_gpus());
  out += fmt::format("# layout: {}\n", planner::describe(result.layout));
  if (result.plan_options) {
    out += format_plan_options(*result.plan_options, result.layout.placement);
  }
  out += fmt::format("# simulated ranks: {} ({}), {} tasks, {} events{}\n", result.ranks.size(),
                     result.options.all_ranks ? "every rank" : "one per pipeline stage",
                     result.tasks.size(), result.num_events,
                     result.options.zero_communication ? ", communication costs zero" : "");
  if (!result.transfer_model.empty()) {
    out += fmt::format("# pipeline transfers: {}\n", result.transfer_model);
  }
  if (!result.planner_rejection.empty()) {
    out += fmt::format("# note: the planner rejects this plan: {}\n", result.planner_rejection);
  }
  out += "#\n";
  out += fmt::format("# {:>5} {:>6}", "stage", "ranks");
  for (const char* column : kColumns) {
    out += fmt::format("  {:>19}", column);
  }
  out += fmt::format("\n# {:>5} {:>6}", "", "");
  for (int i = 0; i < 4; ++i) {
    out += fmt::format("  {:>11} {:>7}", "(s)", "(%)");
  }
  return out + "\n";
}

// The JSON record's fields that describe the run as a whole.
nlohmann::json json_header(const SimulationResult& result) {
  nlohmann::json json;
  json["format"] = "meshplan simulation";
  json["format_version"] = 1;
  json["model"] = result.model_name;
  json["cluster"] = result.cluster_name;
  json["num_gpus"] = result.layout.num_gpus();
  json["layout"] = planner::layout_to_json(result.layout);
  json["all_ranks"] = result.options.all_ranks;
  json["zero_communication"] = result.options.zero_communication;
  json["bucket_bytes"] = result.options.bucket_bytes;
  json["step_time_s"] = result.step_time_s;
  json["analytic_step_time_s"] = result.analytic_step_time_s;
  json["pipeline_end_s"] = result.pipeline_end_seconds;
  json["planner_rejection"] = result.planner_rejection;
  json["pipeline_transfers"] = result.transfer_model;
  json["num_ranks_simulated"] = result.ranks.size();
  json["num_tasks"] = result.tasks.size();
  json["num_events"] = result.num_events;
  return json;
}

// Appends one stage's table row and its JSON record.
void add_stage_row(const StageRow& row, int decimals, Report* report) {
  nlohmann::json stage;
  stage["stage"] = row.stage;
  stage["num_ranks"] = row.num_ranks;
  report->table += fmt::format("  {:>5} {:>6}", row.stage, row.num_ranks);
  for (int i = 0; i < 4; ++i) {
    report->table += fmt::format("  {:>11.{}f} {:>7.2f}", row.seconds[i], decimals, row.percent[i]);
    stage[std::string(kJsonKeys[i]) + "_s"] = row.seconds[i];
    stage[std::string(kJsonKeys[i]) + "_percent"] = row.percent[i];
  }
  report->table += "\n";
  report->json["stages"].push_back(stage);
}

// Appends the critical path: every row to the JSON record, the largest ones to the table.
void add_path_rows(const std::vector<PathRow>& path, int decimals, Report* report) {
  const std::vector<bool> shown = shown_path_rows(path);
  report->table +=
      "#\n# critical path (time on it by stage and kind; the largest rows, in order of first "
      "appearance):\n";
  report->table +=
      fmt::format("# {:>5}  {:<14} {:>7} {:>11} {:>7}\n", "stage", "kind", "ops", "time", "share");
  report->table += fmt::format("# {:>5}  {:<14} {:>7} {:>11} {:>7}\n", "", "", "", "(s)", "(%)");
  report->json["critical_path"] = nlohmann::json::array();
  double hidden_seconds = 0;
  size_t num_hidden = 0;
  for (size_t i = 0; i < path.size(); ++i) {
    const PathRow& row = path[i];
    report->json["critical_path"].push_back({{"stage", row.stage},
                                             {"kind", row.category},
                                             {"num_ops", row.num_ops},
                                             {"time_s", row.seconds},
                                             {"percent", row.percent}});
    if (shown[i]) {
      report->table += fmt::format("# {:>5}  {:<14} {:>7} {:>11.{}f} {:>7.2f}\n", row.stage,
                                   row.category, row.num_ops, row.seconds, decimals, row.percent);
    } else {
      hidden_seconds += row.seconds;
      ++num_hidden;
    }
  }
  if (num_hidden > 0) {
    report->table +=
        fmt::format("# ... {} more rows, {:.{}f} s\n", num_hidden, hidden_seconds, decimals);
  }
}

}  // namespace

Report simulation_report(const SimulationResult& result) {
  const int d = seconds_decimals(result.step_time_s);
  Report report{table_header(result), json_header(result)};
  report.json["stages"] = nlohmann::json::array();
  for (const StageRow& row : stage_rows(result)) {
    add_stage_row(row, d, &report);
  }
  add_path_rows(path_rows(result), d, &report);
  report.table += "#\n";
  report.table += fmt::format("# step time (simulated): {:.{}f} s\n", result.step_time_s, d);
  if (result.analytic_step_time_s > 0) {
    report.table += fmt::format(
        "# step time (analytic): {:.{}f} s  (simulated - analytic: {:+.2f}%)\n",
        result.analytic_step_time_s, d,
        100.0 * (result.step_time_s - result.analytic_step_time_s) / result.analytic_step_time_s);
  }
  return report;
}

}  // namespace meshplan::reports
