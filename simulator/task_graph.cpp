#include "task_graph.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace meshplan::simulator {

TaskGraph::TaskGraph(int32_t num_ranks)
    : streams_(static_cast<size_t>(num_ranks) * kNumStreamKinds) {}

int32_t TaskGraph::add_link(double capacity) {
  link_capacity_.push_back(capacity);
  return static_cast<int32_t>(link_capacity_.size()) - 1;
}

void TaskGraph::reserve(size_t num_tasks, size_t num_edges) {
  tasks_.reserve(num_tasks);
  flow_index_.reserve(num_tasks);
  edges_.reserve(num_edges);
}

int32_t TaskGraph::add_task(const TaskRecord& task) {
  if (graph_ != nullptr) {
    throw std::logic_error("task graph: add_task after finalize");
  }
  if (tasks_.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw std::length_error("task graph: more than 2^31 tasks");
  }
  const auto id = static_cast<int32_t>(tasks_.size());
  tasks_.push_back(task);
  flow_index_.push_back(-1);
  const int32_t stream = stream_of(id);
  if (stream >= 0) {
    streams_[static_cast<size_t>(stream)].push_back(id);
  }
  return id;
}

void TaskGraph::add_edge(int32_t from, int32_t to) {
  if (graph_ != nullptr) {
    throw std::logic_error("task graph: add_edge after finalize");
  }
  edges_.emplace_back(static_cast<size_t>(from), static_cast<size_t>(to));
}

void TaskGraph::finalize() {
  if (graph_ != nullptr) {
    return;
  }
  // One allocation per vertex instead of regrowing the vertex array task by task.
  graph_ = std::make_unique<Graph>(edges_.begin(), edges_.end(), tasks_.size());
  edges_.clear();
  edges_.shrink_to_fit();
}

void TaskGraph::set_flow(int32_t task, const std::vector<std::pair<int32_t, double>>& links) {
  if (links.size() > static_cast<size_t>(FlowUse::kMaxLinks)) {
    throw std::logic_error("task graph: a flow over more than FlowUse::kMaxLinks links");
  }
  FlowUse flow;
  for (size_t i = 0; i < links.size(); ++i) {
    flow.links[i] = links[i].first;
    flow.weights[i] = links[i].second;
  }
  flow_index_[task] = static_cast<int32_t>(flows_.size());
  flows_.push_back(flow);
}

int32_t TaskGraph::stream_of(int32_t task) const {
  const TaskRecord& record = tasks_[task];
  if (record.stream == StreamKind::kNone) {
    return -1;
  }
  return record.rank * kNumStreamKinds + static_cast<int32_t>(record.stream);
}

}  // namespace meshplan::simulator
