// The event queue orders by (time, sequence number), as ns-3's scheduler does.

#include "event_queue.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

namespace meshplan::simulator {

TEST_CASE("event queue: earliest time first, whatever the order of scheduling") {
  EventQueue queue;
  queue.schedule(3.0, 30);
  queue.schedule(1.0, 10);
  queue.schedule(2.0, 20);
  std::vector<int32_t> order;
  while (!queue.finished()) {
    order.push_back(queue.proceed().task);
  }
  CHECK(order == std::vector<int32_t>{10, 20, 30});
  CHECK(queue.current_time() == 3.0);  // the clock stops at the last event
}

TEST_CASE("event queue: ties at one time run in the order they were scheduled") {
  EventQueue queue;
  for (int32_t task : {5, 3, 9, 1}) {
    queue.schedule(1.5, task);
  }
  queue.schedule(0.5, 7);  // earlier time goes first even though scheduled last
  std::vector<int32_t> order;
  std::vector<uint64_t> sequences;
  while (!queue.finished()) {
    const Event event = queue.proceed();
    order.push_back(event.task);
    sequences.push_back(event.sequence);
  }
  CHECK(order == std::vector<int32_t>{7, 5, 3, 9, 1});
  // sequence numbers count schedule() calls from 0: task 7 was the fifth call.
  CHECK(sequences == std::vector<uint64_t>{4, 0, 1, 2, 3});
}

TEST_CASE("event queue: an event scheduled during the run at the current time runs next") {
  EventQueue queue;
  queue.schedule(1.0, 1);
  queue.schedule(2.0, 2);
  CHECK(queue.proceed().task == 1);
  queue.schedule(1.0, 3);  // now = 1.0: allowed, and it precedes the event at 2.0
  CHECK(queue.proceed().task == 3);
  CHECK(queue.proceed().task == 2);
}

TEST_CASE("event queue: time never goes backwards") {
  EventQueue queue;
  queue.schedule(2.0, 1);
  queue.proceed();
  CHECK_THROWS_AS(queue.schedule(1.0, 2), std::logic_error);
  CHECK_THROWS_AS(queue.proceed(), std::logic_error);  // empty
}

}  // namespace meshplan::simulator
