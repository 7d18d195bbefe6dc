#pragma once
// The task graph of one step: tasks are the vertices of a Boost.Graph adjacency_list, an edge
// u -> v says v starts after u ends. Each task also sits on one stream of its rank (run one at
// a time, in issue order) and may be a flow through shared links (NIC or NVLink directions).

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "meshplan/simulator.h"

namespace meshplan::simulator {

/// A task that moves bytes over shared links (a node's NIC directions, a GPU's NVLink
/// directions): up to four links, each with the weight the flow puts on it, in the link's
/// capacity units (a stage's representative stands for all ranks of its stage on its node, so
/// it weighs that many on the node's NIC).
struct FlowUse {
  static constexpr int kMaxLinks = 4;
  int32_t links[kMaxLinks] = {-1, -1, -1, -1};
  double weights[kMaxLinks] = {0, 0, 0, 0};
};

class TaskGraph {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

  explicit TaskGraph(int32_t num_ranks);

  /// A shared link that carries `capacity` unit-weight flows at full speed (a node's NIC
  /// direction: its GPUs, a line rate each; a GPU's NVLink direction: 1). Returns its id.
  int32_t add_link(double capacity);

  /// Room for `num_tasks` tasks and `num_edges` edges (an estimate; the graph still grows).
  void reserve(size_t num_tasks, size_t num_edges);
  /// Appends the task to the end of its stream (unless kNone). Returns its id.
  int32_t add_task(const TaskRecord& task);
  void add_edge(int32_t from, int32_t to);
  /// Builds the Boost graph from the edges added so far (in their order, so out-edges keep
  /// insertion order); later calls do nothing. No add_task / add_edge after it.
  void finalize();
  /// Marks `task` as a flow over (link, weight) pairs (at most FlowUse::kMaxLinks).
  void set_flow(int32_t task, const std::vector<std::pair<int32_t, double>>& links);

  int32_t num_tasks() const { return static_cast<int32_t>(tasks_.size()); }
  int32_t num_streams() const { return static_cast<int32_t>(streams_.size()); }
  int32_t num_links() const { return static_cast<int32_t>(link_capacity_.size()); }
  double link_capacity(int32_t link) const { return link_capacity_[link]; }
  int32_t stream_of(int32_t task) const;  // -1 for kNone
  const std::vector<int32_t>& stream_tasks(int32_t stream) const { return streams_[stream]; }
  /// -1 when the task is no flow, else an index into flows().
  int32_t flow_of(int32_t task) const { return flow_index_[task]; }
  const std::vector<FlowUse>& flows() const { return flows_; }

  TaskRecord& task(int32_t id) { return tasks_[id]; }
  const TaskRecord& task(int32_t id) const { return tasks_[id]; }
  std::vector<TaskRecord>& tasks() { return tasks_; }
  const Graph& graph() const { return *graph_; }  // after finalize()

 private:
  std::vector<TaskRecord> tasks_;
  std::vector<std::pair<size_t, size_t>> edges_;  // until finalize()
  std::unique_ptr<Graph> graph_;                  // by pointer: Boost graphs copy on assignment
  std::vector<std::vector<int32_t>> streams_;     // [rank * kNumStreamKinds + stream kind]
  std::vector<int32_t> flow_index_;               // [task]
  std::vector<FlowUse> flows_;
  std::vector<double> link_capacity_;  // [link]
};

}  // namespace meshplan::simulator
