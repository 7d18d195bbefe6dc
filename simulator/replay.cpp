#include "replay.h"

#include <fmt/format.h>

#include <algorithm>

#include "event_queue.h"
#include "meshplan/errors.h"

namespace meshplan::simulator {
namespace {

struct FlowState {
  double remaining_alone_seconds = 0;  // work left, in seconds at full line rate
  double last_update_seconds = 0;
  double slowdown = 0;  // current 1 / rate; 0 before the flow has started
  uint32_t version = 0;
  bool active = false;
};

class Replay {
 public:
  explicit Replay(TaskGraph& graph)
      : graph_(graph),
        pending_(static_cast<size_t>(graph.num_tasks()), 0),
        stream_head_(static_cast<size_t>(graph.num_streams()), 0),
        stream_busy_(static_cast<size_t>(graph.num_streams()), 0),
        flows_(graph.flows().size()),
        link_load_(static_cast<size_t>(graph.num_links()), 0.0),
        link_active_(static_cast<size_t>(graph.num_links())) {
    stats_.released_by.assign(static_cast<size_t>(graph.num_tasks()), -1);
  }

  ReplayStats run() {
    const auto& g = graph_.graph();
    for (size_t task = 0; task < pending_.size(); ++task) {
      for (auto [edge, end] = boost::out_edges(task, g); edge != end; ++edge) {
        ++pending_[boost::target(*edge, g)];
      }
    }
    for (int32_t task = 0; task < graph_.num_tasks(); ++task) {
      if (pending_[task] == 0 && graph_.stream_of(task) < 0) {
        start(task, -1);
      }
    }
    for (int32_t stream = 0; stream < graph_.num_streams(); ++stream) {
      try_stream(stream, -1);
    }
    while (!queue_.finished()) {
      const Event event = queue_.proceed();
      ++stats_.num_events;
      const int32_t use = graph_.flow_of(event.task);
      if (use >= 0 && event.version != flows_[use].version) {
        continue;  // rescheduled since: its rate changed
      }
      finish(event.task);
    }
    if (num_finished_ != graph_.num_tasks()) {
      report_deadlock();
    }
    return std::move(stats_);
  }

 private:
  void start(int32_t task, int32_t released_by) {
    TaskRecord& record = graph_.task(task);
    record.start_seconds = queue_.current_time();
    stats_.released_by[task] = released_by;
    const int32_t use = graph_.flow_of(task);
    if (use >= 0 && record.alone_seconds > 0) {
      start_flow(task, use);
    } else {
      queue_.schedule(queue_.current_time() + record.alone_seconds, task);
    }
  }

  void finish(int32_t task) {
    graph_.task(task).end_seconds = queue_.current_time();
    ++num_finished_;
    const int32_t use = graph_.flow_of(task);
    if (use >= 0 && flows_[use].active) {
      end_flow(task, use);
    }
    const int32_t stream = graph_.stream_of(task);
    if (stream >= 0) {
      stream_busy_[stream] = 0;
      ++stream_head_[stream];
    }
    const auto& g = graph_.graph();
    for (auto [edge, end] = boost::out_edges(static_cast<size_t>(task), g); edge != end; ++edge) {
      const auto next = static_cast<int32_t>(boost::target(*edge, g));
      if (--pending_[next] == 0) {
        const int32_t next_stream = graph_.stream_of(next);
        if (next_stream < 0) {
          start(next, task);
        } else {
          try_stream(next_stream, task);
        }
      }
    }
    if (stream >= 0) {
      try_stream(stream, task);
    }
  }

  void try_stream(int32_t stream, int32_t released_by) {
    const std::vector<int32_t>& tasks = graph_.stream_tasks(stream);
    if (stream_busy_[stream] || stream_head_[stream] == tasks.size()) {
      return;
    }
    const int32_t head = tasks[stream_head_[stream]];
    if (pending_[head] == 0) {
      stream_busy_[stream] = 1;
      start(head, released_by);
    }
  }

  void start_flow(int32_t task, int32_t use) {
    FlowState& flow = flows_[use];
    flow.remaining_alone_seconds = graph_.task(task).alone_seconds;
    flow.last_update_seconds = queue_.current_time();
    flow.slowdown = 0;
    flow.active = true;
    const FlowUse& links = graph_.flows()[use];
    for (int i = 0; i < FlowUse::kMaxLinks; ++i) {
      if (links.links[i] >= 0) {
        link_load_[links.links[i]] += links.weights[i];
        link_active_[links.links[i]].push_back(task);
      }
    }
    refresh(links);
  }

  void end_flow(int32_t task, int32_t use) {
    flows_[use].active = false;
    const FlowUse& links = graph_.flows()[use];
    for (int i = 0; i < FlowUse::kMaxLinks; ++i) {
      if (links.links[i] >= 0) {
        link_load_[links.links[i]] -= links.weights[i];
        auto& active = link_active_[links.links[i]];
        active.erase(std::find(active.begin(), active.end(), task));
      }
    }
    refresh(links);
  }

  // Brings every flow over the links of `changed` up to now and reschedules those whose rate
  // changed.
  void refresh(const FlowUse& changed) {
    for (int32_t link : changed.links) {
      if (link < 0) {
        continue;
      }
      for (int32_t task : link_active_[link]) {
        update_flow(task);
      }
    }
  }

  void update_flow(int32_t task) {
    const int32_t use = graph_.flow_of(task);
    FlowState& flow = flows_[use];
    const double now = queue_.current_time();
    if (flow.slowdown > 0) {
      flow.remaining_alone_seconds = std::max(
          0.0, flow.remaining_alone_seconds - (now - flow.last_update_seconds) / flow.slowdown);
    }
    flow.last_update_seconds = now;
    double slowdown = 1.0;
    for (int32_t link : graph_.flows()[use].links) {
      if (link >= 0) {
        slowdown = std::max(slowdown, link_load_[link] / graph_.link_capacity(link));
      }
    }
    if (slowdown != flow.slowdown) {
      flow.slowdown = slowdown;
      queue_.schedule(now + flow.remaining_alone_seconds * slowdown, task, ++flow.version);
    }
  }

  [[noreturn]] void report_deadlock() const {
    for (int32_t stream = 0; stream < graph_.num_streams(); ++stream) {
      const auto& tasks = graph_.stream_tasks(stream);
      if (stream_head_[stream] < tasks.size()) {
        const TaskRecord& stuck = graph_.task(tasks[stream_head_[stream]]);
        throw RuntimeError(fmt::format(
            "simulate: deadlock: rank index {} {} stream waits at {} of micro-batch {} chunk {}",
            stuck.rank, to_string(stuck.stream), to_string(stuck.kind), stuck.micro_batch,
            stuck.chunk));
      }
    }
    throw RuntimeError("simulate: deadlock: a synchronisation task never started");
  }

  TaskGraph& graph_;
  EventQueue queue_;
  std::vector<int32_t> pending_;
  std::vector<size_t> stream_head_;
  std::vector<char> stream_busy_;
  std::vector<FlowState> flows_;
  std::vector<double> link_load_;                  // [link] summed weight of active flows
  std::vector<std::vector<int32_t>> link_active_;  // [link] active flows, in start order
  ReplayStats stats_;
  int32_t num_finished_ = 0;
};

}  // namespace

ReplayStats replay(TaskGraph& graph) {
  graph.finalize();
  return Replay(graph).run();
}

}  // namespace meshplan::simulator
