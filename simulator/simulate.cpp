// simulate(): build the task graph, replay it, and account for where the time went.

#include <algorithm>

#include "breakdown.h"
#include "graph_builder.h"
#include "meshplan/simulator.h"
#include "replay.h"

namespace meshplan::simulator {

std::string to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward:
      return "forward";
    case TaskKind::kBackward:
      return "backward";
    case TaskKind::kBackwardInput:
      return "backward-input";
    case TaskKind::kBackwardWeight:
      return "backward-weight";
    case TaskKind::kOptimizerStep:
      return "optimizer-step";
    case TaskKind::kTpComm:
      return "tp-comm";
    case TaskKind::kPpTransfer:
      return "pp-transfer";
    case TaskKind::kRecvWait:
      return "recv-wait";
    case TaskKind::kGradReduce:
      return "grad-reduce";
    case TaskKind::kEmbeddingSync:
      return "embedding-sync";
    case TaskKind::kParamGather:
      return "param-gather";
    case TaskKind::kJoin:
      return "join";
    case TaskKind::kCpComm:
      return "cp-comm";
    case TaskKind::kEpAllToAll:
      return "ep-all-to-all";
  }
  return "?";
}

std::string to_string(StreamKind kind) {
  switch (kind) {
    case StreamKind::kCompute:
      return "compute";
    case StreamKind::kTpComm:
      return "tp-comm";
    case StreamKind::kPpForward:
      return "pp-send-next";
    case StreamKind::kPpBackward:
      return "pp-send-prev";
    case StreamKind::kDpComm:
      return "dp-comm";
    case StreamKind::kDpGather:
      return "dp-gather";
    case StreamKind::kNone:
      return "none";
  }
  return "?";
}

bool is_compute(TaskKind kind) {
  return kind == TaskKind::kForward || kind == TaskKind::kBackward ||
         kind == TaskKind::kBackwardInput || kind == TaskKind::kBackwardWeight ||
         kind == TaskKind::kOptimizerStep;
}

bool is_communication(TaskKind kind) {
  return kind == TaskKind::kTpComm || kind == TaskKind::kCpComm || kind == TaskKind::kEpAllToAll ||
         kind == TaskKind::kPpTransfer || kind == TaskKind::kGradReduce ||
         kind == TaskKind::kEmbeddingSync || kind == TaskKind::kParamGather;
}

std::vector<TaskSpan> task_spans(const SimulationResult& result) {
  std::vector<TaskSpan> spans;
  const auto& tasks = result.tasks;
  for (int32_t i = 0; i < static_cast<int32_t>(tasks.size()); ++i) {
    const TaskRecord& task = tasks[i];
    if (task.kind == TaskKind::kJoin ||
        (task.kind == TaskKind::kRecvWait && task.end_seconds <= task.start_seconds)) {
      continue;
    }
    // Pieces of one op are issued one after another on the compute stream.
    if (!spans.empty() && task.op_index >= 0) {
      TaskSpan& last = spans.back();
      const TaskRecord& previous = tasks[last.last_task];
      if (last.last_task == i - 1 && previous.rank == task.rank &&
          previous.op_index == task.op_index && previous.kind == task.kind) {
        last.last_task = i;
        last.end_seconds = task.end_seconds;
        continue;
      }
    }
    spans.push_back(TaskSpan{i, i, task.start_seconds, task.end_seconds});
  }
  return spans;
}

std::string transfer_model_name(const SimulationInput& input) {
  if (input.paired_p2p) {
    return "paired calls (each send with the opposite receive, waited for whole)";
  }
  if (input.blocking_sends) {
    return "blocking sends";
  }
  if (input.late_receives) {
    return "late receives (a transfer starts when its receiver reaches it)";
  }
  return "buffered sends (a transfer starts when it is sent)";
}

SimulationResult simulate(const SimulationInput& input) {
  BuiltGraph built = build_task_graph(input);
  const ReplayStats stats = replay(*built.graph);
  SimulationResult result;
  result.layout = input.layout;
  result.options.all_ranks = input.all_ranks;
  result.num_events = stats.num_events;
  if (input.layout.pp > 1) {
    result.transfer_model = transfer_model_name(input);
  }
  result.ranks = std::move(built.ranks);
  result.tasks = std::move(built.graph->tasks());
  for (const TaskRecord& task : result.tasks) {
    result.step_time_s = std::max(result.step_time_s, task.end_seconds);
    if (task.op_index >= 0) {  // from an op list: compute, its tp comm, transfers
      result.pipeline_end_seconds = std::max(result.pipeline_end_seconds, task.end_seconds);
    }
  }
  result.stages = stage_breakdown(result.ranks, result.tasks, input.layout.pp,
                                  result.pipeline_end_seconds, result.step_time_s);
  result.critical_path = critical_path(result.tasks, stats.released_by);
  return result;
}

}  // namespace meshplan::simulator
