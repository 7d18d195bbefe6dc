#include "breakdown.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

namespace meshplan::simulator {

const char* critical_category(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward:
    case TaskKind::kBackward:
    case TaskKind::kBackwardInput:
    case TaskKind::kBackwardWeight:
      return "compute";
    case TaskKind::kOptimizerStep:
      return "optimizer";
    case TaskKind::kTpComm:
      return "tp comm";
    case TaskKind::kCpComm:
      return "cp comm";
    case TaskKind::kEpAllToAll:
      return "ep comm";
    case TaskKind::kPpTransfer:
      return "pp transfer";
    case TaskKind::kGradReduce:
    case TaskKind::kEmbeddingSync:
      return "dp comm";
    case TaskKind::kParamGather:
      return "param gather";
    case TaskKind::kRecvWait:
    case TaskKind::kJoin:
      return "";
  }
  return "";
}

namespace {

struct Edge {
  double time_seconds;
  int compute;        // +1 start, -1 end of a compute interval
  int communication;  // same for communication
  bool operator<(const Edge& other) const { return time_seconds < other.time_seconds; }
};

StageBreakdown rank_breakdown(std::vector<Edge>& edges, double pipeline_end, double step) {
  std::sort(edges.begin(), edges.end());
  StageBreakdown out;
  int compute = 0, communication = 0;
  double previous = 0;
  auto account = [&](double from, double to) {
    if (to <= from) {
      return;
    }
    if (compute > 0) {
      out.compute_seconds += to - from;
    } else if (communication > 0) {
      out.exposed_comm_seconds += to - from;
    } else {
      const double split = std::clamp(pipeline_end, from, to);
      out.bubble_seconds += split - from;
      out.idle_seconds += to - split;
    }
  };
  for (const Edge& edge : edges) {
    account(previous, edge.time_seconds);
    previous = std::max(previous, edge.time_seconds);
    compute += edge.compute;
    communication += edge.communication;
  }
  account(previous, step);
  return out;
}

}  // namespace

std::vector<StageBreakdown> stage_breakdown(const std::vector<SimulatedRank>& ranks,
                                            const std::vector<TaskRecord>& tasks, int64_t pp,
                                            double pipeline_end_seconds, double step_seconds) {
  std::vector<std::vector<Edge>> edges(ranks.size());
  auto add = [&](int32_t rank, const TaskRecord& task, bool is_compute_task) {
    if (task.end_seconds <= task.start_seconds) {
      return;
    }
    const int c = is_compute_task ? 1 : 0;
    edges[rank].push_back(Edge{task.start_seconds, c, 1 - c});
    edges[rank].push_back(Edge{task.end_seconds, -c, c - 1});
  };
  for (const TaskRecord& task : tasks) {
    if (is_compute(task.kind)) {
      add(task.rank, task, true);
    } else if (is_communication(task.kind)) {
      add(task.rank, task, false);
      if (task.kind == TaskKind::kPpTransfer && task.peer >= 0) {
        add(tasks[task.peer].rank, task, false);  // the receiver waits on it too
      }
    }
  }
  std::vector<StageBreakdown> stages(static_cast<size_t>(pp));
  for (int64_t s = 0; s < pp; ++s) {
    stages[s].stage = s;
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const StageBreakdown one = rank_breakdown(edges[rank], pipeline_end_seconds, step_seconds);
    StageBreakdown& sum = stages[ranks[rank].coords.pp_rank];
    sum.num_ranks += 1;
    sum.compute_seconds += one.compute_seconds;
    sum.exposed_comm_seconds += one.exposed_comm_seconds;
    sum.bubble_seconds += one.bubble_seconds;
    sum.idle_seconds += one.idle_seconds;
  }
  for (StageBreakdown& stage : stages) {
    const double n = static_cast<double>(std::max<int64_t>(stage.num_ranks, 1));
    stage.compute_seconds /= n;
    stage.exposed_comm_seconds /= n;
    stage.bubble_seconds /= n;
    stage.idle_seconds /= n;
  }
  return stages;
}

std::vector<CriticalSegment> critical_path(const std::vector<TaskRecord>& tasks,
                                           const std::vector<int32_t>& released_by) {
  if (tasks.empty()) {
    return {};
  }
  int32_t current = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(tasks.size()); ++i) {
    if (tasks[i].end_seconds > tasks[current].end_seconds) {
      current = i;
    }
  }
  std::vector<int32_t> path;
  for (; current >= 0; current = released_by[current]) {
    path.push_back(current);
  }
  std::reverse(path.begin(), path.end());
  std::vector<CriticalSegment> segments;
  // (rank, op index, kind) of ops already counted: an op cut into pieces (bucket boundaries) counts
  // once, in the first segment it appears in.
  std::set<std::tuple<int32_t, int32_t, TaskKind>> counted;
  for (int32_t id : path) {
    const TaskRecord& task = tasks[id];
    const char* category = critical_category(task.kind);
    if (*category == '\0') {
      continue;
    }
    const bool extend = !segments.empty() && segments.back().rank == task.rank &&
                        segments.back().category == category;
    if (!extend) {
      segments.push_back(CriticalSegment{task.rank, category, 0, task.start_seconds, 0});
    }
    CriticalSegment& segment = segments.back();
    segment.end_seconds = task.end_seconds;
    if (task.op_index < 0 || counted.emplace(task.rank, task.op_index, task.kind).second) {
      ++segment.num_ops;
    }
  }
  return segments;
}

}  // namespace meshplan::simulator
