#include "event_queue.h"

#include <fmt/format.h>

#include <stdexcept>

namespace meshplan::simulator {

// The time checks stay on in release builds (they cost one comparison): a violation is a bug
// in the replay, reported as std::logic_error, never a wrong step time.
void EventQueue::schedule(double time_seconds, int32_t task, uint32_t version) {
  if (!(time_seconds >= now_seconds_)) {
    throw std::logic_error(fmt::format("event queue: task {} scheduled at {} s, before now ({} s)",
                                       task, time_seconds, now_seconds_));
  }
  heap_.push(Event{time_seconds, next_sequence_++, task, version});
}

Event EventQueue::proceed() {
  if (heap_.empty()) {
    throw std::logic_error("event queue: proceed on an empty queue");
  }
  const Event event = heap_.top();
  heap_.pop();
  if (!(event.time_seconds >= now_seconds_)) {
    throw std::logic_error("event queue: time went backwards");
  }
  now_seconds_ = event.time_seconds;
  return event;
}

}  // namespace meshplan::simulator
