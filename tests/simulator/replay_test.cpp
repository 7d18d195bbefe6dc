// The replay engine on hand-built task graphs: stream order, dependencies, NIC sharing.
// Durations are multiples of 1/4 so every expected time is exact in binary floating point.

#include "replay.h"

#include <doctest/doctest.h>

#include "meshplan/errors.h"

namespace meshplan::simulator {
namespace {

int32_t add(TaskGraph& graph, int32_t rank, StreamKind stream, double seconds,
            TaskKind kind = TaskKind::kForward) {
  TaskRecord task;
  task.kind = kind;
  task.stream = stream;
  task.rank = rank;
  task.alone_seconds = seconds;
  return graph.add_task(task);
}

}  // namespace

TEST_CASE("replay: a stream runs its tasks one at a time, in issue order") {
  TaskGraph graph(2);
  const int32_t a = add(graph, 0, StreamKind::kCompute, 1.0);
  const int32_t b = add(graph, 0, StreamKind::kCompute, 0.5);
  const int32_t c = add(graph, 0, StreamKind::kDpComm, 0.25);  // another stream: concurrent
  const ReplayStats stats = replay(graph);
  CHECK(graph.task(a).start_seconds == 0.0);
  CHECK(graph.task(b).start_seconds == 1.0);  // after a (1.0)
  CHECK(graph.task(b).end_seconds == 1.5);    // 1.0 + 0.5
  CHECK(graph.task(c).end_seconds == 0.25);
  CHECK(stats.released_by[b] == a);
  CHECK(stats.released_by[a] == -1);
  CHECK(stats.num_events == 3);  // one completion per task, no NIC flows
}

TEST_CASE("replay: a dependency on another rank delays the head of a stream") {
  TaskGraph graph(2);
  const int32_t producer = add(graph, 0, StreamKind::kCompute, 2.0);
  const int32_t consumer = add(graph, 1, StreamKind::kCompute, 1.0);
  const int32_t behind = add(graph, 1, StreamKind::kCompute, 0.25);  // waits behind consumer
  graph.add_edge(producer, consumer);
  const ReplayStats stats = replay(graph);
  CHECK(graph.task(consumer).start_seconds == 2.0);
  CHECK(graph.task(behind).start_seconds == 3.0);  // 2.0 + 1.0
  CHECK(stats.released_by[consumer] == producer);
  CHECK(stats.released_by[behind] == consumer);
}

TEST_CASE("replay: two transfers through one NIC take twice as long") {
  // One NIC direction of capacity 1 (a node with one GPU): two flows of 0.75 s alone, started
  // together, share it equally and both end at 2 * 0.75 = 1.5 s.
  TaskGraph graph(2);
  const int32_t egress = graph.add_link(1.0);     // node 0
  const int32_t ingress_1 = graph.add_link(1.0);  // node 1
  const int32_t ingress_2 = graph.add_link(1.0);  // node 2
  const int32_t first = add(graph, 0, StreamKind::kPpForward, 0.75, TaskKind::kPpTransfer);
  const int32_t second = add(graph, 1, StreamKind::kPpForward, 0.75, TaskKind::kPpTransfer);
  graph.set_flow(first, {{egress, 1.0}, {ingress_1, 1.0}});
  graph.set_flow(second, {{egress, 1.0}, {ingress_2, 1.0}});
  replay(graph);
  CHECK(graph.task(first).end_seconds == 1.5);
  CHECK(graph.task(second).end_seconds == 1.5);
}

TEST_CASE("replay: flows within a NIC's capacity or on other NICs run at full speed") {
  // Capacity 2 (two GPUs, a line rate each): two flows of weight 1 fit.
  TaskGraph graph(2);
  const int32_t out = graph.add_link(2.0);
  const int32_t in = graph.add_link(2.0);
  const int32_t other_out = graph.add_link(2.0);  // another node
  const int32_t other_in = graph.add_link(2.0);
  const int32_t first = add(graph, 0, StreamKind::kPpForward, 0.75, TaskKind::kPpTransfer);
  const int32_t second = add(graph, 1, StreamKind::kPpForward, 0.75, TaskKind::kPpTransfer);
  const int32_t third = add(graph, 1, StreamKind::kDpComm, 0.75, TaskKind::kGradReduce);
  graph.set_flow(first, {{out, 1.0}, {in, 1.0}});
  graph.set_flow(second, {{out, 1.0}, {in, 1.0}});
  graph.set_flow(third, {{other_out, 2.0}, {other_in, 2.0}});  // exactly at capacity
  replay(graph);
  CHECK(graph.task(first).end_seconds == 0.75);
  CHECK(graph.task(second).end_seconds == 0.75);
  CHECK(graph.task(third).end_seconds == 0.75);
}

TEST_CASE("replay: a flow that joins later slows the running one from then on") {
  // A (1 s alone) starts at 0; B (1 s alone) starts at 0.5 behind a 0.5 s compute task.
  // 0..0.5: A alone, 0.5 s of its work done. 0.5..1.5: both at half rate; A finishes its last
  // 0.5 s of work at 1.5, B has done 0.5 s of work. 1.5..2.0: B alone, done at 2.0.
  TaskGraph graph(2);
  const int32_t link = graph.add_link(1.0);
  const int32_t a = add(graph, 0, StreamKind::kPpForward, 1.0, TaskKind::kPpTransfer);
  const int32_t before_b = add(graph, 1, StreamKind::kCompute, 0.5);
  const int32_t b = add(graph, 1, StreamKind::kPpForward, 1.0, TaskKind::kPpTransfer);
  graph.add_edge(before_b, b);
  graph.set_flow(a, {{link, 1.0}});
  graph.set_flow(b, {{link, 1.0}});
  const ReplayStats stats = replay(graph);
  CHECK(graph.task(a).end_seconds == 1.5);
  CHECK(graph.task(b).start_seconds == 0.5);
  CHECK(graph.task(b).end_seconds == 2.0);
  // Events taken from the queue: before_b at 0.5; A's first completion at 1.0 (stale: B
  // joined); A at 1.5; B at 2.0 (rescheduled when A left); B's 0.5 + 2 * 1.0 = 2.5 (stale): 5.
  CHECK(stats.num_events == 5);
}

TEST_CASE("replay: a weighted flow stands for several ranks of its node") {
  // Representative of 4 ranks (weight 4) on a node with 4 GPUs: load 4 of capacity 4, full
  // speed; a second weight-4 flow doubles the load, so both take 2 * 0.5 = 1.0 s.
  TaskGraph graph(1);
  const int32_t out = graph.add_link(4.0);
  const int32_t in = graph.add_link(4.0);
  const int32_t peer_in = graph.add_link(4.0);
  const int32_t pp = add(graph, 0, StreamKind::kPpForward, 0.5, TaskKind::kPpTransfer);
  const int32_t dp = add(graph, 0, StreamKind::kDpComm, 0.5, TaskKind::kGradReduce);
  graph.set_flow(pp, {{out, 4.0}, {peer_in, 4.0}});
  graph.set_flow(dp, {{out, 4.0}, {in, 4.0}});
  replay(graph);
  CHECK(graph.task(pp).end_seconds == 1.0);
  CHECK(graph.task(dp).end_seconds == 1.0);
}

TEST_CASE("replay: a flow is as slow as its most loaded link") {
  // A NIC direction of capacity 8 with weight 4 on it (half full) and an NVLink port of
  // capacity 1 shared with another flow: the NVLink port halves both, 2 * 0.5 = 1.0 s.
  TaskGraph graph(2);
  const int32_t nic = graph.add_link(8.0);
  const int32_t nvlink = graph.add_link(1.0);
  const int32_t both = add(graph, 0, StreamKind::kDpComm, 0.5, TaskKind::kGradReduce);
  const int32_t local = add(graph, 0, StreamKind::kDpGather, 0.5, TaskKind::kParamGather);
  graph.set_flow(both, {{nic, 4.0}, {nvlink, 1.0}});
  graph.set_flow(local, {{nvlink, 1.0}});
  replay(graph);
  CHECK(graph.task(both).end_seconds == 1.0);
  CHECK(graph.task(local).end_seconds == 1.0);
}

TEST_CASE("replay: a task that can never start is reported as a deadlock") {
  TaskGraph graph(1);
  const int32_t first = add(graph, 0, StreamKind::kCompute, 1.0);
  const int32_t second = add(graph, 0, StreamKind::kCompute, 1.0, TaskKind::kBackward);
  graph.add_edge(second, first);  // first waits for second, which waits behind first
  CHECK_THROWS_WITH_AS(replay(graph),
                       "simulate: deadlock: rank index 0 compute stream waits at forward of "
                       "micro-batch -1 chunk -1",
                       RuntimeError);
}

}  // namespace meshplan::simulator
