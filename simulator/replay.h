#pragma once
// The discrete-event replay of a task graph.
//
// A task starts when every predecessor has ended, it is at the head of its stream and the
// stream is idle; it then runs for its alone_seconds. A task that is a flow instead progresses
// at rate 1 / max over its links of max(1, load / capacity), where load is the summed weight
// of the flows active on the link: concurrent flows share a link's bandwidth equally once they
// exceed it (processor sharing). Rates change only when a flow starts or ends; the flows
// affected then get a new completion event.

#include <cstdint>
#include <vector>

#include "task_graph.h"

namespace meshplan::simulator {

struct ReplayStats {
  int64_t num_events = 0;            // events taken from the queue (stale completions included)
  std::vector<int32_t> released_by;  // [task]: the task whose end let it start; -1 at time 0
};

/// Fills start_seconds and end_seconds of every task. Throws RuntimeError naming the rank
/// index and task if some task can never start (a deadlocked graph).
ReplayStats replay(TaskGraph& graph);

}  // namespace meshplan::simulator
