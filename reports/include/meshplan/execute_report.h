#pragma once
// meshplan execute's output: the step table, the closing tables (memory and collectives beside
// the planner's prediction) in nccl-tests' layout (a names line, a units line, '#' before every
// line that is not data, fixed-width right-aligned columns, a summary footer), the checkpoint
// lines, and the --json report. Each record kind has one writer that produces its table row
// and its JSON record from the same values.

#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/executor.h"

namespace meshplan::reports {

/// The run's description (plan source, model, cluster, layout) and the step table's two header
/// lines (names, then units), every line starting with '#'.
std::string execute_header(const planner::Plan& plan, const std::string& plan_source);

/// One data row of the step table (step, loss in nats, step time in s, tokens/s).
std::string execute_step_row(const executor::StepRecord& step);

/// "# checkpoint: wrote step N to DIR/step_<N>" or "# checkpoint: resumed step N from
/// DIR/step_<N> (CRC-32C verified)".
std::string execute_checkpoint_line(const executor::CheckpointEvent& event);

/// The memory and collective tables and the footer (loss, average step time, how many
/// (stage, kind, group) entries match the planner in calls and bytes: OK or MISMATCH).
std::string execute_summary(const executor::ExecuteReport& report);

/// {"steps": [{"step", "loss", "step_time_s", "tokens_per_s"}], "peak_memory_bytes": [{"stage",
/// "measured", "predicted", "predicted_tensor_bytes", "peak_rss_bytes"}], "collectives":
/// [{"stage", "kind", "group", "measured_calls", "predicted_calls", "measured_bytes",
/// "predicted_bytes"}]}
nlohmann::json execute_json(const executor::ExecuteReport& report);

}  // namespace meshplan::reports
