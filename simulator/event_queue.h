#pragma once
// Time-ordered event queue of the replay, as in ns-3's scheduler (src/core/model/scheduler.h):
// events are ordered by the pair (time, sequence number), so events at the same time run in
// the order they were scheduled and every run is deterministic. schedule and proceed are
// O(log n) (binary heap); time never goes backwards (checked, std::logic_error).

#include <cstdint>
#include <queue>
#include <vector>

namespace meshplan::simulator {

struct Event {
  double time_seconds = 0;
  uint64_t sequence = 0;  // order of schedule() calls, breaks ties
  int32_t task = -1;
  uint32_t version = 0;  // lets the replay ignore a completion that was rescheduled
};

class EventQueue {
 public:
  double current_time() const { return now_seconds_; }
  bool finished() const { return heap_.empty(); }
  /// Precondition: time_seconds >= current_time().
  void schedule(double time_seconds, int32_t task, uint32_t version = 0);
  /// Removes the earliest event and advances the clock to it. Precondition: !finished().
  Event proceed();
  uint64_t num_scheduled() const { return next_sequence_; }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      if (a.time_seconds != b.time_seconds) {
        return a.time_seconds > b.time_seconds;
      }
      return a.sequence > b.sequence;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  double now_seconds_ = 0;
  uint64_t next_sequence_ = 0;
};

}  // namespace meshplan::simulator
