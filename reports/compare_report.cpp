// meshplan compare (compare.h): the planner's estimate beside a measured run, row by row.

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "meshplan/compare.h"
#include "meshplan/errors.h"

namespace meshplan::reports {

namespace {

using CollectiveKey = std::tuple<int64_t, planner::CollectiveKind, planner::CommGroup>;

std::optional<double> measured_bytes(const MeasuredRun& run, int64_t stage) {
  const auto it = run.peak_memory_bytes.find(stage);
  if (it == run.peak_memory_bytes.end()) {
    return std::nullopt;
  }
  return static_cast<double>(it->second);
}

// Step, per-stage compute and memory rows. Memory: the allocator's peak against the planner's
// weights + gradients + optimizer + activations (its reserved bytes, CUDA context and
// communication buffers, are outside any allocator).
void add_step_rows(const planner::PlanEstimate& estimate, const planner::Layout& layout,
                   const MeasuredRun& run, std::vector<CompareRow>& rows) {
  rows.push_back({"step time", -1, "s", estimate.step_time_s, run.step_time_s});
  for (const planner::StageEstimate& stage : estimate.stages) {
    double compute_seconds = 0;
    for (const planner::ChunkCost& chunk : stage.chunks) {
      compute_seconds += chunk.forward_compute_seconds + chunk.backward_input_compute_seconds +
                         chunk.backward_weight_compute_seconds;
    }
    rows.push_back({"compute", stage.stage, "s",
                    compute_seconds * static_cast<double>(layout.num_micro_batches()),
                    std::nullopt});
  }
  const planner::StepBreakdown& b = estimate.breakdown;
  rows.push_back({"exposed comm", -1, "s",
                  b.tp_comm_exposed_seconds + b.pp_transfer_seconds + b.dp_comm_exposed_seconds,
                  std::nullopt});
  rows.push_back({"bubble", -1, "s", b.bubble_seconds, std::nullopt});
  for (const planner::StageEstimate& stage : estimate.stages) {
    rows.push_back({"peak memory", stage.stage, "B",
                    static_cast<double>(stage.memory.total_bytes() - stage.memory.reserved_bytes),
                    measured_bytes(run, stage.stage)});
  }
}

// Bytes and calls per (stage, kind, group): the planner's inventory summed as execute does.
void add_collective_rows(const planner::PlanEstimate& estimate, const MeasuredRun& run,
                         std::vector<CompareRow>& rows) {
  std::map<CollectiveKey, std::pair<int64_t, int64_t>> predicted;  // (bytes, calls)
  for (const planner::CollectiveTraffic& c : estimate.collectives) {
    auto& [bytes, calls] = predicted[{c.stage, c.kind, c.group}];
    bytes += c.total_message_bytes();
    calls += c.calls_per_step;
  }
  std::map<CollectiveKey, const MeasuredCollective*> measured;
  for (const MeasuredCollective& c : run.collectives) {
    const auto it = predicted.find({c.stage, c.kind, c.group});
    const auto [bytes, calls] =
        it == predicted.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
    if (c.predicted_bytes && (*c.predicted_bytes != bytes || *c.predicted_calls != calls)) {
      throw InputError(fmt::format(
          "the measured run: collectives: stage {} {} {}: it predicted {} B in {} calls, this "
          "plan {} B in {} calls (an execute --json of another plan)",
          c.stage, planner::to_string(c.group), planner::to_string(c.kind), *c.predicted_bytes,
          *c.predicted_calls, bytes, calls));
    }
    measured[{c.stage, c.kind, c.group}] = &c;
    predicted.try_emplace({c.stage, c.kind, c.group}, 0, 0);
  }
  for (const auto& [key, value] : predicted) {
    const auto& [stage, kind, group] = key;
    const std::string name = planner::to_string(group) + " " + planner::to_string(kind);
    const auto it = measured.find(key);
    const bool has = it != measured.end();
    // A run that measures collectives and has none of this kind measured zero of it.
    const bool measures = !run.collectives.empty();
    rows.push_back({name, stage, "B", static_cast<double>(value.first),
                    has ? std::optional<double>(static_cast<double>(it->second->message_bytes))
                        : (measures ? std::optional<double>(0) : std::nullopt)});
    rows.push_back({name, stage, "calls", static_cast<double>(value.second),
                    has ? std::optional<double>(static_cast<double>(it->second->calls))
                        : (measures ? std::optional<double>(0) : std::nullopt)});
  }
}

std::string verdict(const Comparison& c) {
  if (!c.step_time_error_pct) {
    return "no step time measured";
  }
  const bool time_ok = std::abs(*c.step_time_error_pct) <= kStepTimeGoalPct;
  const bool memory_ok =
      !c.peak_memory_error_pct || std::abs(*c.peak_memory_error_pct) <= kMemoryGoalPct;
  std::string line =
      fmt::format("step time {:+.1f}% (goal {:.0f}%)", *c.step_time_error_pct, kStepTimeGoalPct);
  line += c.peak_memory_error_pct ? fmt::format(", peak memory {:+.1f}% (goal {:.0f}%)",
                                                *c.peak_memory_error_pct, kMemoryGoalPct)
                                  : ", peak memory not measured";
  return line + ((time_ok && memory_ok) ? ": prediction within goals" : ": prediction OFF");
}

// The one writer of a row: its table line and its JSON record.
void write_row(const CompareRow& row, std::string* line, nlohmann::json* record) {
  const std::optional<double> error = row.error_pct();
  if (line != nullptr) {
    const std::string stage = row.stage < 0 ? "all" : std::to_string(row.stage);
    const bool integral = row.unit != "s";
    const std::string predicted =
        integral ? fmt::format("{:.0f}", row.predicted) : fmt::format("{:.6f}", row.predicted);
    const std::string measured = !row.measured ? "-"
                                 : integral    ? fmt::format("{:.0f}", *row.measured)
                                               : fmt::format("{:.6f}", *row.measured);
    *line += fmt::format("{:>26} {:>6} {:>6} {:>16} {:>16} {:>9}\n", row.component, stage, row.unit,
                         predicted, measured, error ? fmt::format("{:+.2f}", *error) : "-");
  }
  if (record != nullptr) {
    *record = {{"component", row.component},
               {"stage", row.stage < 0 ? nlohmann::json(nullptr) : nlohmann::json(row.stage)},
               {"unit", row.unit},
               {"predicted", row.predicted},
               {"measured", row.measured ? nlohmann::json(*row.measured) : nlohmann::json()},
               {"error_pct", error ? nlohmann::json(*error) : nlohmann::json()}};
  }
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json();
}

}  // namespace

std::optional<double> CompareRow::error_pct() const {
  if (!measured || *measured == 0) {
    return (measured && predicted == 0) ? std::optional<double>(0) : std::nullopt;
  }
  return 100.0 * (predicted - *measured) / *measured;
}

Comparison compare_plan(const planner::Plan& plan, const MeasuredRun& measured) {
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  Comparison comparison;
  add_step_rows(estimate, plan.layout, measured, comparison.rows);
  add_collective_rows(estimate, measured, comparison.rows);
  for (const CompareRow& row : comparison.rows) {
    const std::optional<double> error = row.error_pct();
    if (row.component == "step time") {
      comparison.step_time_error_pct = error;
    } else if (row.component == "peak memory" && error &&
               (!comparison.peak_memory_error_pct ||
                std::abs(*error) > std::abs(*comparison.peak_memory_error_pct))) {
      comparison.peak_memory_error_pct = error;
    }
  }
  comparison.verdict = verdict(comparison);
  return comparison;
}

Report compare_report(const Comparison& comparison, const std::string& plan_source,
                      const std::string& measured_source, const MeasuredRun& measured) {
  Report report;
  std::string& t = report.table;
  t += fmt::format("# meshplan compare {} {} ({}, memory = {})\n", plan_source, measured_source,
                   measured.format, measured.memory_kind);
  const size_t logged = measured.step_times_s.size();
  const bool warm_up_left_out = static_cast<size_t>(measured.steps_averaged) < logged;
  t += fmt::format("# step time measured: mean of {} of {} logged step(s){}\n#\n",
                   measured.steps_averaged, logged,
                   warm_up_left_out ? ", warm-up left out" : " (none left out as warm-up)");
  t += fmt::format("#{:>25} {:>6} {:>6} {:>16} {:>16} {:>9}\n", "component", "stage", "unit",
                   "predicted", "measured", "error");
  t += fmt::format("#{:>25} {:>6} {:>6} {:>16} {:>16} {:>9}\n", "", "", "", "", "", "(%)");
  nlohmann::json rows = nlohmann::json::array();
  for (const CompareRow& row : comparison.rows) {
    write_row(row, &t, &rows.emplace_back());
  }
  t += fmt::format("#\n# verdict: {}\n", comparison.verdict);
  report.json = {{"format", "meshplan compare"},
                 {"plan", plan_source},
                 {"measured", measured_source},
                 {"measured_format", measured.format},
                 {"rows", rows},
                 {"step_time_error_pct", optional_json(comparison.step_time_error_pct)},
                 {"peak_memory_error_pct", optional_json(comparison.peak_memory_error_pct)},
                 {"verdict", comparison.verdict}};
  return report;
}

}  // namespace meshplan::reports
