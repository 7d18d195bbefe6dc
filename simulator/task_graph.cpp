#include "task_graph.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace meshplan::simulator {

TaskGraph::TaskGraph(int32_t num_ranks, double nic_capacity)
    : streams_(static_cast<size_t>(num_ranks) * kNumStreamKinds), nic_capacity_(nic_capacity) {}

void TaskGraph::reserve(size_t num_tasks, size_t num_edges) {
  tasks_.reserve(num_tasks);
  nic_use_index_.reserve(num_tasks);
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
  nic_use_index_.push_back(-1);
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

void TaskGraph::set_nic_use(int32_t task, int32_t nic_a, int32_t nic_b, double weight) {
  NicUse use;
  use.nics[0] = nic_a;
  use.nics[1] = nic_b;
  use.weight = weight;
  num_nics_ = std::max({num_nics_, nic_a + 1, nic_b + 1});
  nic_use_index_[task] = static_cast<int32_t>(nic_uses_.size());
  nic_uses_.push_back(use);
}

int32_t TaskGraph::stream_of(int32_t task) const {
  const TaskRecord& record = tasks_[task];
  if (record.stream == StreamKind::kNone) {
    return -1;
  }
  return record.rank * kNumStreamKinds + static_cast<int32_t>(record.stream);
}

}  // namespace meshplan::simulator
