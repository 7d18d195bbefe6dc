#pragma once
// meshplan compare: the planner's prediction for a plan beside what a run of it measured, per
// component (step time, per-stage compute, exposed communication, bubble, peak memory per stage,
// bytes and calls per collective), with the error in percent and a one-line verdict. The run is
// meshplan execute's --json, a Megatron-LM training log, a torchtitan log or a DeepSpeed log.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/plan_file.h"
#include "meshplan/reports.h"

namespace meshplan::reports {

/// One collective kind of one stage, per rank, for one step.
struct MeasuredCollective {
  int64_t stage = 0;
  planner::CollectiveKind kind = planner::CollectiveKind::kAllReduce;
  planner::CommGroup group = planner::CommGroup::kTp;
  int64_t calls = 0;
  int64_t message_bytes = 0;  // nccl-tests sizes summed over the calls
  // What execute's own planner inventory predicted for this entry (its --json); compare_plan
  // refuses a report whose predictions are not the plan's: it was another plan's run.
  std::optional<int64_t> predicted_calls, predicted_bytes;
};

/// What a run measured. Memory is what the framework's allocator held at its peak (PyTorch
/// max_memory_allocated, torchtitan max_reserved, the CPU executor's live tensors), per stage,
/// max over the stage's ranks that reported.
struct MeasuredRun {
  std::string format;  // "meshplan execute", "megatron-lm log", "torchtitan log", "deepspeed log"
  std::vector<double> step_times_s;  // every logged step (or logging interval's mean), in order
  double step_time_s = 0;            // mean of step_times_s, warm-up left out (see parse_*)
  int64_t steps_averaged = 0;        // how many of step_times_s that mean is over
  std::map<int64_t, int64_t> peak_memory_bytes;  // stage -> bytes
  std::string memory_kind;                       // "allocated", "reserved", "live tensors"
  std::vector<MeasuredCollective> collectives;   // meshplan execute only
};

/// Reads `path`: JSON starting with '{' is meshplan execute's --json; otherwise a text log,
/// Megatron-LM when it has "elapsed time per iteration (ms)" lines, torchtitan when it has
/// "step: N ... memory: X GiB ... tps: T" lines, DeepSpeed when it has "iter time (s):" or
/// "SamplesPerSec=" lines. Ranks in Megatron-LM memory lines map to stages by the plan's layout.
/// Throws InputError "<path>: ..." (one line, naming the line number or field) when the file is
/// none of these or malformed.
/// A log of one framework is refused beside a plan costed for another (a Megatron-LM log goes
/// with megatron and deepspeed plans, Megatron-DeepSpeed printing the same lines; torchtitan's
/// with fsdp; DeepSpeed's with deepspeed; execute's --json with any).
MeasuredRun read_measured_run(const std::string& path, const planner::Plan& plan);

/// Parsers behind read_measured_run, on the file's text; `source` names it in errors.
MeasuredRun parse_execute_json(const std::string& text, const std::string& source);
MeasuredRun parse_megatron_log(const std::string& text, const std::string& source,
                               const planner::Plan& plan);
MeasuredRun parse_torchtitan_log(const std::string& text, const std::string& source,
                                 const planner::Plan& plan);
/// DeepSpeed's rank-0 lines: the pipeline engine's "steps: N loss: L ... iter time (s): T
/// samples/sec: S" (step time T; T x S must be the plan's global batch), else ThroughputTimer's
/// "epoch=E/micro_step=M/global_step=G, ... CurrSamplesPerSec=C, ... MaxMemAllocated=XGB"
/// (DeepSpeed >= 0.8.0: step time = global batch / C; M / G must be the plan's accumulation
/// steps); memory from MaxMemAllocated= and see_memory_usage's "Max_MA X GB" (GiB), rank 0 (or a
/// "[rankR]:" prefix). Older ThroughputTimer lines are refused by name.
MeasuredRun parse_deepspeed_log(const std::string& text, const std::string& source,
                                const planner::Plan& plan);

/// One compared quantity; measured is empty where the source does not measure it.
struct CompareRow {
  std::string component;  // "step time", "compute", "exposed comm", "bubble", "peak memory", ...
  int64_t stage = -1;     // -1: the whole step
  std::string unit;       // "s", "B", "calls"
  double predicted = 0;
  std::optional<double> measured;
  /// 100 * (predicted - measured) / measured; empty without a measurement or when it is 0.
  std::optional<double> error_pct() const;
};

/// Step time within this many percent and peak memory within kMemoryGoalPct count as a
/// prediction that holds (issue 14's goals: step time within 15%, memory within 10%).
inline constexpr double kStepTimeGoalPct = 15;
inline constexpr double kMemoryGoalPct = 10;

struct Comparison {
  std::vector<CompareRow> rows;
  std::optional<double> step_time_error_pct;
  std::optional<double> peak_memory_error_pct;  // the stage with the largest |error|
  std::string verdict;                          // one line
};

/// Recomputes the planner's estimate of `plan` and lines it up with `measured`.
Comparison compare_plan(const planner::Plan& plan, const MeasuredRun& measured);

/// The table (nccl-tests layout: names and units lines, '#' before every non-data line, the
/// verdict in the footer) and the --json record {"format": "meshplan compare", "plan",
/// "measured", "measured_format", "rows": [{"component", "stage", "unit", "predicted",
/// "measured", "error_pct"}], "step_time_error_pct", "peak_memory_error_pct", "verdict"}, each
/// row and record written by one function.
Report compare_report(const Comparison& comparison, const std::string& plan_source,
                      const std::string& measured_source, const MeasuredRun& measured);

}  // namespace meshplan::reports
