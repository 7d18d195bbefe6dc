#pragma once
// Where each rank's step time goes, and the critical path, from a finished replay.

#include <cstdint>
#include <vector>

#include "meshplan/simulator.h"

namespace meshplan::simulator {

/// Per stage, the mean over its simulated ranks of: compute running; communication running
/// (own tasks, and transfers arriving for it) with no compute; neither, before
/// `pipeline_end_seconds` (bubble) and after it up to `step_seconds` (idle). The four add up
/// to step_seconds for every rank.
std::vector<StageBreakdown> stage_breakdown(const std::vector<SimulatedRank>& ranks,
                                            const std::vector<TaskRecord>& tasks, int64_t pp,
                                            double pipeline_end_seconds, double step_seconds);

/// Walks back from the last task to end, each time to the task whose end let it start, and
/// merges consecutive tasks of one rank and category. Zero-length waits and joins are skipped.
std::vector<CriticalSegment> critical_path(const std::vector<TaskRecord>& tasks,
                                           const std::vector<int32_t>& released_by);

/// "compute", "optimizer", "tp comm", "pp transfer", "dp comm", "param gather"; "" for waits
/// and joins.
const char* critical_category(TaskKind kind);

}  // namespace meshplan::simulator
