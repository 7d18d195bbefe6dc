#pragma once
// The task graph of one step: tasks are the vertices of a Boost.Graph adjacency_list, an edge
// u -> v says v starts after u ends. Each task also sits on one stream of its rank (run one at
// a time, in issue order) and may be a network flow through one or two NIC directions.

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "meshplan/simulator.h"

namespace meshplan::simulator {

/// A task whose bytes cross nodes: it shares the NIC directions it passes (egress of the
/// sender's node, ingress of the receiver's) with the other flows there. `weight` is the number
/// of real ranks it stands for on that node (the representative of a stage stands for all
/// ranks of that stage on its node).
struct NicUse {
  int32_t nics[2] = {-1, -1};
  double weight = 1;
};

class TaskGraph {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

  /// `nic_capacity`: flows one NIC direction carries at full speed (in rank units: the node's
  /// GPUs, each with its own line rate).
  TaskGraph(int32_t num_ranks, double nic_capacity);

  /// Room for `num_tasks` tasks and `num_edges` edges (an estimate; the graph still grows).
  void reserve(size_t num_tasks, size_t num_edges);
  /// Appends the task to the end of its stream (unless kNone). Returns its id.
  int32_t add_task(const TaskRecord& task);
  void add_edge(int32_t from, int32_t to);
  /// Builds the Boost graph from the edges added so far (in their order, so out-edges keep
  /// insertion order); later calls do nothing. No add_task / add_edge after it.
  void finalize();
  /// Marks `task` as a flow through `nic_a` (and `nic_b` unless -1).
  void set_nic_use(int32_t task, int32_t nic_a, int32_t nic_b, double weight);

  int32_t num_tasks() const { return static_cast<int32_t>(tasks_.size()); }
  int32_t num_streams() const { return static_cast<int32_t>(streams_.size()); }
  int32_t num_nics() const { return num_nics_; }
  double nic_capacity() const { return nic_capacity_; }
  int32_t stream_of(int32_t task) const;  // -1 for kNone
  const std::vector<int32_t>& stream_tasks(int32_t stream) const { return streams_[stream]; }
  /// -1 when the task uses no NIC, else an index into nic_uses().
  int32_t nic_use_of(int32_t task) const { return nic_use_index_[task]; }
  const std::vector<NicUse>& nic_uses() const { return nic_uses_; }

  TaskRecord& task(int32_t id) { return tasks_[id]; }
  const TaskRecord& task(int32_t id) const { return tasks_[id]; }
  std::vector<TaskRecord>& tasks() { return tasks_; }
  const Graph& graph() const { return *graph_; }  // after finalize()

 private:
  std::vector<TaskRecord> tasks_;
  std::vector<std::pair<size_t, size_t>> edges_;  // until finalize()
  std::unique_ptr<Graph> graph_;                  // by pointer: Boost graphs copy on assignment
  std::vector<std::vector<int32_t>> streams_;     // [rank * kNumStreamKinds + stream kind]
  std::vector<int32_t> nic_use_index_;            // [task]
  std::vector<NicUse> nic_uses_;
  int32_t num_nics_ = 0;
  double nic_capacity_ = 1;
};

}  // namespace meshplan::simulator
