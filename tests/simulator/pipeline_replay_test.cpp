// Whole-step replays of the generator's op lists with hand-built durations. Expected values
// are the papers' closed forms (Narayanan et al. 2021, Sec. 2.2: bubble (p-1)/(m+p-1), and
// (p-1)/v chunk slots for interleaved) and sums worked out by hand in the comments.

#include <doctest/doctest.h>

#include "hand_built.h"
#include "meshplan/errors.h"
#include "meshplan/simulator.h"

namespace meshplan::simulator {

using planner::ScheduleKind;
using testing::uniform_input;

TEST_CASE("pipeline: gpipe and 1f1b bubble is (p-1)/(m+p-1) on every stage") {
  // p = 4, m = 8, f = 1, b = 2: makespan (m + p - 1)(f + b) = 11 * 3 = 33 s; every stage is
  // busy m (f + b) = 24 s and waits (p - 1)(f + b) = 9 s: 9 / 33 = 3 / 11 = (p-1)/(m+p-1).
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    CAPTURE(planner::to_string(kind));
    const SimulationResult result = simulate(uniform_input(kind, 4, 1, 8, 1.0, 2.0));
    CHECK(result.step_time_s == 33.0);
    CHECK(result.pipeline_end_seconds == 33.0);
    REQUIRE(result.stages.size() == 4);
    for (const StageBreakdown& stage : result.stages) {
      CAPTURE(stage.stage);
      CHECK(stage.compute_seconds == 24.0);
      CHECK(stage.bubble_seconds == 9.0);
      CHECK(stage.bubble_seconds / result.step_time_s == doctest::Approx(3.0 / 11.0).scale(0));
      CHECK(stage.exposed_comm_seconds == 0.0);
      CHECK(stage.idle_seconds == 0.0);
    }
  }
}

TEST_CASE("pipeline: interleaved bubble is (p-1)/v stage times") {
  // p = 4, v = 2, m = 8; a chunk takes f = 0.5, b = 1 (c = 1.5), so a stage's micro-batch takes
  // f + b = 3. Makespan (m v + p - 1) c = 19 * 1.5 = 28.5 s; busy m v c = 24 s; bubble
  // (p - 1) c = 4.5 s = (p - 1)(f + b) / v, the 1F1B bubble 9 s divided by v = 2.
  const SimulationResult result =
      simulate(uniform_input(ScheduleKind::kInterleaved, 4, 2, 8, 0.5, 1.0));
  CHECK(result.step_time_s == 28.5);
  for (const StageBreakdown& stage : result.stages) {
    CAPTURE(stage.stage);
    CHECK(stage.compute_seconds == 24.0);
    CHECK(stage.bubble_seconds == 4.5);
    CHECK(stage.bubble_seconds / result.step_time_s == doctest::Approx(3.0 / 19.0).scale(0));
  }
}

TEST_CASE("pipeline: zb-h1 bubble is (p-1)(F+B-W), a third of 1F1B's with equal F, B, W") {
  // Qi et al. 2023, Sec. 3.1: ZB-H1's bubble is (p - 1)(T_F + T_B - T_W) against 1F1B's
  // (p - 1)(T_F + T_B + T_W). p = 4, m = 8, F = B = W = 1: makespan m (F + B + W) +
  // (p - 1)(F + B - W) = 24 + 3 = 27 s, stage 0 waits 3 s; 1F1B (backward B + W = 2 s):
  // 24 + 3 * 3 = 33 s, bubble 9 s = 3 times ZB-H1's.
  const SimulationResult zb = simulate(uniform_input(ScheduleKind::kZbH1, 4, 1, 8, 1.0, 1.0, 1.0));
  const SimulationResult one_f_one_b =
      simulate(uniform_input(ScheduleKind::kOneFOneB, 4, 1, 8, 1.0, 2.0));
  CHECK(zb.step_time_s == 27.0);
  CHECK(one_f_one_b.step_time_s == 33.0);
  for (int64_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(zb.stages[s].compute_seconds == 24.0);
    CHECK(zb.stages[s].bubble_seconds == 3.0);
    CHECK(zb.stages[s].bubble_seconds * 3.0 == one_f_one_b.stages[s].bubble_seconds);
  }
  // Unequal: F = 1, B = 1.5, W = 0.5: 8 * 3 + 3 * (1 + 1.5 - 0.5) = 30 s.
  CHECK(simulate(uniform_input(ScheduleKind::kZbH1, 4, 1, 8, 1.0, 1.5, 0.5)).step_time_s == 30.0);
}

TEST_CASE("pipeline: exposed tp communication and the optimizer step add up") {
  // 1F1B, p = 2, m = 3: f = 1 + 0.25 tp, b = 2 + 0.5 tp per micro-batch, so F + B = 3.75 and
  // the pipeline takes (m + p - 1)(F + B) = 4 * 3.75 = 15 s; then the barrier and a 0.5 s
  // optimizer step on each stage: 15.5 s. Per stage: compute 3 * 3 + 0.5 = 9.5, exposed tp
  // 3 * 0.75 = 2.25, bubble (p - 1)(F + B) = 3.75; sum 15.5.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 3, 1.0, 2.0);
  for (StageCosts& stage : input.stages) {
    stage.chunks[0].forward_tp_comm_seconds = 0.25;
    stage.chunks[0].backward_tp_comm_seconds = 0.5;
    stage.optimizer_step_seconds = 0.5;
  }
  for (bool overlap : {false, true}) {
    CAPTURE(overlap);
    input.overlap_tp_comm = overlap;  // exposed seconds are exposed on either stream
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 15.5);
    CHECK(result.pipeline_end_seconds == 15.0);
    for (const StageBreakdown& stage : result.stages) {
      CHECK(stage.compute_seconds == 9.5);
      CHECK(stage.exposed_comm_seconds == 2.25);
      CHECK(stage.bubble_seconds == 3.75);
      CHECK(stage.idle_seconds == 0.0);
    }
  }
}

TEST_CASE(
    "pipeline: a late receive starts its transfer when the receiver reaches it; paired calls") {
  // 1F1B, p = 2, m = 2, F = 1, B = 2, each transfer 0.25 s. Stage 0: F0, send A0, F1, send A1,
  // receive G0, B0, receive G1, B1; stage 1: receive A0, F0, B0, send G0, receive A1, F1, B1,
  // send G1. Buffered: A1 moves at [2, 2.25] while stage 1 runs B0 [2.25, 4.25], so F1 starts
  // at 4.25; B1 [5.25, 7.25], G1 [7.25, 7.5], stage 0's B1 [7.5, 9.5]. Late receives
  // (late_receives: PyTorch pipelining, meshplan's executor): A1 moves only once stage 1 has
  // finished B0 and reached its receive, [4.25, 4.5]: F1 [4.5, 5.5], B1 [5.5, 7.5], G1
  // [7.5, 7.75], B1 on stage 0 [7.75, 9.75].
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 2, 1.0, 2.0);
  for (StageCosts& stage : input.stages) {
    stage.transfer_seconds = 0.25;
  }
  CHECK(simulate(input).step_time_s == 9.5);
  input.late_receives = true;
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    CHECK(simulate(input).step_time_s == 9.75);
  }
  // Stage 0's second forward starts when its first one ends: the send is buffered.
  const auto forward_start = [](const SimulationResult& result, int32_t micro_batch) {
    for (const TaskRecord& task : result.tasks) {
      if (task.kind == TaskKind::kForward && task.micro_batch == micro_batch &&
          result.ranks[task.rank].coords.pp_rank == 0) {
        return task.start_seconds;
      }
    }
    return -1.0;
  };
  input.all_ranks = false;
  CHECK(forward_start(simulate(input), 1) == 1.0);
  // Paired calls (paired_p2p, Megatron-Core's 1F1B): each run of transfer ops is one call,
  // waited for whole. Stage 0's {send A0} holds it until A0 has moved, [1, 1.25], so F1 starts
  // at 1.25. {send A1, receive G0} (posted at 2.25) and stage 1's {send G0, receive A1}
  // (posted at 4.25, after B0) move both at [4.25, 4.5]; stage 0's B0 [4.5, 6.5], stage 1's F1
  // [4.5, 5.5] and B1 [5.5, 7.5]; {send G1} [7.5, 7.75] against stage 0's {receive G1},
  // posted at 6.5: B1 [7.75, 9.75].
  input.late_receives = false;
  input.paired_p2p = true;
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    CHECK(simulate(input).step_time_s == 9.75);
  }
  input.all_ranks = false;
  CHECK(forward_start(simulate(input), 1) == 1.25);
}

TEST_CASE("pipeline: transfers between stages delay the receiver") {
  // 1F1B, p = 2, m = 1, f = 1, b = 2, each send 0.25 s: F0 on stage 0 [0, 1], activation
  // [1, 1.25], F0 and B0 on stage 1 [1.25, 4.25], gradient [4.25, 4.5], B0 on stage 0
  // [4.5, 6.5]. Stage 0: compute 3, its own sends and the incoming gradient 0.25 + 0.25 =
  // 0.5 exposed, bubble 6.5 - 3.5 = 3.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 1, 1.0, 2.0);
  for (StageCosts& stage : input.stages) {
    stage.transfer_seconds = 0.25;
  }
  const SimulationResult result = simulate(input);
  CHECK(result.step_time_s == 6.5);
  CHECK(result.stages[0].compute_seconds == 3.0);
  CHECK(result.stages[0].exposed_comm_seconds == 0.5);
  CHECK(result.stages[0].bubble_seconds == 3.0);
  // Stage 1 receives the activation [1, 1.25] and sends the gradient [4.25, 4.5]; it waits
  // [0, 1] and [4.5, 6.5]: bubble 3.
  CHECK(result.stages[1].exposed_comm_seconds == 0.5);
  CHECK(result.stages[1].bubble_seconds == 3.0);
  // Critical path: stage 0 F, transfer, stage 1 F+B, transfer, stage 0 B.
  REQUIRE(result.critical_path.size() == 5);
  CHECK(result.critical_path[0].category == "compute");
  CHECK(result.critical_path[1].category == "pp transfer");
  CHECK(result.critical_path[2].rank == 1);
  CHECK(result.critical_path[2].num_ops == 2);
  CHECK(result.critical_path[2].end_seconds == 4.25);
  CHECK(result.critical_path[4].end_seconds == 6.5);
}

TEST_CASE("pipeline: blocking sends (DeepSpeed) hold the sender until they finish") {
  // 1F1B, p = 2, m = 2, f = 1, b = 2, each send 0.25 s. Buffered: stage 0 F0 [0, 1], F1 [1, 2]
  // (its sends [1, 1.25], [2, 2.25] run beside it); stage 1 F0 [1.25, 2.25], B0 [2.25, 4.25],
  // gradient [4.25, 4.5], F1 [4.25, 5.25], B1 [5.25, 7.25], gradient [7.25, 7.5]; stage 0 B0
  // [4.5, 6.5], B1 [7.5, 9.5]. Blocking: stage 0's F1 waits for its first send, [1.25, 2.25],
  // and stage 1's F1 for its gradient send, [4.5, 5.5], B1 [5.5, 7.5], gradient [7.5, 7.75];
  // stage 0 B1 [7.75, 9.75].
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 2, 1.0, 2.0);
  for (StageCosts& stage : input.stages) {
    stage.transfer_seconds = 0.25;
  }
  CHECK(simulate(input).step_time_s == 9.5);
  input.blocking_sends = true;
  CHECK(simulate(input).step_time_s == 9.75);
}

TEST_CASE("pipeline: gradient buckets overlap the rest of the last backward") {
  // pp = 1, dp = 2 on one node (no NIC), m = 1: F [0, 1], B [1, 3]. Two equal buckets of
  // 0.5 s: the first is complete halfway through B (2.0) and reduces [2, 2.5]; the second at
  // 3.0 and reduces [3, 3.5]; optimizer 0.25: step 3.75, exposed comm 0.5 (3.0 .. 3.5).
  // Without overlap both run after B: 3 + 0.5 + 0.5 + 0.25 = 4.25, exposed 1.0.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 1, 1.0, 2.0);
  input.layout.dp = 2;
  input.stages[0].grad_buckets = {Bucket{100, 0.5}, Bucket{100, 0.5}};
  input.stages[0].optimizer_step_seconds = 0.25;
  SUBCASE("overlapped") {
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 3.75);
    CHECK(result.stages[0].exposed_comm_seconds == 0.5);
    CHECK(result.stages[0].compute_seconds == 3.25);
  }
  SUBCASE("after the backward") {
    input.overlap_grad_reduce = false;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 4.25);
    CHECK(result.stages[0].exposed_comm_seconds == 1.0);
  }
  SUBCASE("all ranks: both dp replicas, joined per bucket") {
    input.all_ranks = true;
    const SimulationResult result = simulate(input);
    CHECK(result.ranks.size() == 2);
    CHECK(result.step_time_s == 3.75);
    CHECK(result.stages[0].num_ranks == 2);
  }
}

TEST_CASE("pipeline: ZeRO parameter gather before the first forward needs it") {
  // pp = 1, dp = 2, m = 1, f = 1, b = 2; two equal parameter buckets of 0.25 s gathered at the
  // step's start: bucket 0 [0, 0.25] gates the first half of F, which runs [0.25, 0.75];
  // bucket 1 [0.25, 0.5] is ready before the second half [0.75, 1.25]; B [1.25, 3.25].
  // Without overlap the gather runs after the optimizer (0.25): 3 + 0.25 + 0.5 = 3.75.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 1, 1.0, 2.0);
  input.layout.dp = 2;
  input.stages[0].param_buckets = {Bucket{100, 0.25}, Bucket{100, 0.25}};
  input.stages[0].optimizer_step_seconds = 0.25;
  SUBCASE("overlapped with the forward") {
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 3.5);  // 3.25 + optimizer 0.25
    CHECK(result.stages[0].exposed_comm_seconds == 0.25);
  }
  SUBCASE("after the optimizer") {
    input.overlap_param_gather = false;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 3.75);
  }
}

// pp = 1, dp = 2 on one node, m = 1, F = 1, B = 2, ZeRO 3 over a chunk of two equal layers:
// gathers of 0.25 s and reduce-scatters of 0.5 s per layer.
namespace {

SimulationInput zero3_two_layer_input() {
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 1, 1.0, 2.0);
  input.layout.dp = 2;
  input.layout.zero = 3;
  input.stages[0].chunk_param_buckets = {Bucket{100, 0.25}, Bucket{100, 0.25}};
  input.stages[0].chunk_grad_buckets = {Bucket{100, 0.5}, Bucket{100, 0.5}};
  return input;
}

}  // namespace

TEST_CASE("pipeline: ZeRO-3 gathers each layer before F and B, reduces after B") {
  // pp = 1, dp = 2 on one node, m = 1, F = 1, B = 2; a chunk of two equal layers: gathers of
  // 0.25 s and reduce-scatters of 0.5 s per layer. Gather stream: F's layers [0, 0.25],
  // [0.25, 0.5], then B's [0.5, 0.75], [0.75, 1.0]. F: layer 0 waits for its gather,
  // [0.25, 0.75], layer 1 [0.75, 1.25]. B: [1.25, 2.25] (its reduce [2.25, 2.75]), [2.25, 3.25]
  // (reduce [3.25, 3.75]). Step 3.75 s; exposed: [0, 0.25] and [3.25, 3.75] = 0.75 s.
  SimulationInput input = zero3_two_layer_input();
  SUBCASE("one representative") {
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 3.75);
    CHECK(result.stages[0].compute_seconds == 3.0);
    CHECK(result.stages[0].exposed_comm_seconds == 0.75);
  }
  SUBCASE("all ranks") {
    input.all_ranks = true;
    CHECK(simulate(input).step_time_s == 3.75);
  }
  SUBCASE("without overlap: no prefetch, reduce after the whole backward") {
    // B's gathers wait for F to end: [1.25, 1.5], [1.5, 1.75]; B's layers [1.5, 2.5],
    // [2.5, 3.5]; both reduce-scatters after B: [3.5, 4], [4, 4.5].
    input.overlap_grad_reduce = false;
    CHECK(simulate(input).step_time_s == 4.5);
  }
  SUBCASE("a backward gather list of its own (DeepSpeed's coordinator)") {
    // One 2 s call before B instead of the two layers' 0.25 s: the gather stream runs F's
    // [0, 0.25], [0.25, 0.5], then B's [0.5, 2.5]; F ends at 1.25 as above, B waits for its
    // gather: [2.5, 3.5] and [3.5, 4.5] (B is cut by its reduce-scatters only), reduces
    // [3.5, 4], [4.5, 5].
    input.stages[0].chunk_param_backward_buckets = std::vector<Bucket>{Bucket{200, 2.0}};
    CHECK(simulate(input).step_time_s == 5.0);
    // None before B: B starts as F ends, as in the first case (its gathers were hidden there).
    input.stages[0].chunk_param_backward_buckets = std::vector<Bucket>{};
    CHECK(simulate(input).step_time_s == 3.75);
  }
  SUBCASE("gradients reduced both once per step and per op are rejected") {
    input.stages[0].grad_buckets = {Bucket{100, 0.5}};
    CHECK_THROWS_WITH_AS(simulate(input),
                         "simulate: stages[0]: gradients reduced both once per step and per op",
                         InputError);
  }
  SUBCASE("parameters gathered both once per step and per op are rejected") {
    input.stages[0].param_buckets = {Bucket{100, 0.5}};
    CHECK_THROWS_WITH_AS(simulate(input),
                         "simulate: stages[0]: parameters gathered both once per step and per op",
                         InputError);
  }
}

TEST_CASE("pipeline: a ZeRO-3 op runs its tp communication layer by layer") {
  // The two-layer case with gathers of 0.75 s and 0.5 s of exposed tp communication in F (a
  // quarter per layer after its 0.5 s of compute). Gather stream: F's layers [0, 0.75],
  // [0.75, 1.5], B's [1.5, 2.25], [2.25, 3]. F: layer 0 [0.75, 1.25], its tp [1.25, 1.5],
  // layer 1 (gathered at 1.5) [1.5, 2], tp [2, 2.25]. B (gathered by then): [2.25, 3.25],
  // RS [3.25, 3.75]; [3.25, 4.25], RS [4.25, 4.75]: 4.75 s. Were F's tp communication all
  // after its compute, layer 1 would still start at 1.5 and F end at 2.5: 5 s. The gather of
  // layer 1 hides behind layer 0's compute and tp communication, as in the planner's per-unit
  // max(g, f_u), f_u with its tp share (estimate.cpp zero3_exposed_per_micro_batch).
  SimulationInput input = zero3_two_layer_input();
  input.stages[0].chunk_param_buckets = {Bucket{100, 0.75}, Bucket{100, 0.75}};
  input.stages[0].chunks[0].forward_tp_comm_seconds = 0.5;
  const SimulationResult representative = simulate(input);
  CHECK(representative.step_time_s == 4.75);
  CHECK(representative.stages[0].compute_seconds == 3.0);
  input.all_ranks = true;
  CHECK(simulate(input).step_time_s == 4.75);
}

TEST_CASE("pipeline: FSDP's root unit is gathered before F only and reduced after the layers") {
  // The case above plus a root unit (StageCosts::chunk_root_param_buckets): gather 0.5 s,
  // reduce-scatter 0.5 s. Gather stream: root [0, 0.5], F's layers [0.5, 0.75], [0.75, 1],
  // B's layers (no root) [1, 1.25], [1.25, 1.5]. F's first half needs the root and layer 0:
  // [0.75, 1.25], second half [1.25, 1.75]. B: [1.75, 2.75] (its reduce [2.75, 3.25]),
  // [2.75, 3.75] (reduce [3.75, 4.25]), then the root's reduce [4.25, 4.75]. Step 4.75 s: the
  // ZeRO-3 case's 3.75 s plus the root's gather and reduce-scatter, as the planner's
  // zero3_exposed_per_micro_batch charges them.
  SimulationInput input = zero3_two_layer_input();
  input.stages[0].chunk_root_param_buckets = {Bucket{400, 0.5}};
  input.stages[0].chunk_root_grad_buckets = {Bucket{400, 0.5}};
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 4.75);
    CHECK(result.stages[0].compute_seconds == 3.0);
    CHECK(result.stages[0].exposed_comm_seconds == 1.75);
  }
  SUBCASE("the root alone: no layer buckets") {
    // Root gather [0, 0.5], F [0.5, 1.5], B [1.5, 3.5], root reduce [3.5, 4].
    input.all_ranks = false;
    input.stages[0].chunk_param_buckets.clear();
    input.stages[0].chunk_grad_buckets.clear();
    CHECK(simulate(input).step_time_s == 4.0);
  }
  SUBCASE("the root with a once-a-step gather as well: rejected") {
    input.all_ranks = false;
    input.stages[0].chunk_param_buckets.clear();
    input.stages[0].param_buckets = {Bucket{100, 0.5}};
    CHECK_THROWS_AS(simulate(input), InputError);
  }
}

TEST_CASE("pipeline: a gather and a reduce-scatter on one GPU share its NVLink") {
  // pp = 1, dp = 2 on one node, 1F1B, m = 2, F = 0.5, B = 2; ZeRO-3 with one bucket: gather
  // 0.5 s before each F and B (prefetched one op ahead), reduce-scatter 1 s after each B.
  // G(F0) [0, 0.5], F0 [0.5, 1], G(B0) [0.5, 1], B0 [1, 3], G(F1) [1, 1.5], F1 [3, 3.5].
  // At 3 both RS(B0) and G(B1) start on the GPU's NVLink: half rate each, G(B1) ends at
  // 3 + 2 * 0.5 = 4, RS(B0) at 4.5. B1 [4, 6], RS(B1) [6, 7]: 7 s (6.5 s if they did not share).
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 2, 0.5, 2.0);
  input.layout.dp = 2;
  input.layout.zero = 3;
  input.stages[0].chunk_param_buckets = {Bucket{100, 0.5}};
  input.stages[0].chunk_grad_buckets = {Bucket{100, 1.0}};
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    CHECK(simulate(input).step_time_s == 7.0);
  }
  // Without overlap gathers wait for the previous op and the next op for the reduce-scatter:
  // G(F0) [0, 0.5], F0 [0.5, 1], G(B0) [1, 1.5], B0 [1.5, 3.5]; RS(B0) and G(F1) from 3.5
  // share the NVLink: G(F1) ends 4.5, RS(B0) 5; F1 [5, 5.5], G(B1) [5.5, 6], B1 [6, 8],
  // RS(B1) [8, 9].
  input.overlap_grad_reduce = false;
  CHECK(simulate(input).step_time_s == 9.0);
}

TEST_CASE("pipeline: ZeRO-2/3 pass boundaries (Megatron-FSDP, FSDP, DeepSpeed)") {
  // The case above with sharded_pass_boundaries: G(F0) [0, 0.5], F0 [0.5, 1], G(B0) [0.5, 1]
  // (prefetched within the pass), B0 [1, 3], RS(B0) [3, 4] alone. F1 waits for it, and so does
  // G(F1): [4, 4.5], F1 [4.5, 5]; G(B1) [4.5, 5], B1 [5, 7], RS(B1) [7, 8]. Step 8 s, the
  // planner's closed form: m (F + B) + m (first gather + last reduce-scatter) = 5 + 2 x 1.5.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 2, 0.5, 2.0);
  input.layout.dp = 2;
  input.layout.zero = 3;
  input.sharded_pass_boundaries = true;
  input.stages[0].chunk_param_buckets = {Bucket{100, 0.5}};
  input.stages[0].chunk_grad_buckets = {Bucket{100, 1.0}};
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 8.0);
    CHECK(result.stages[0].compute_seconds == 5.0);
  }
  // ZeRO-2 (no gathers): the next op waits for the reduce-scatter as well. F0 [0, 0.5], B0
  // [0.5, 2.5], RS(B0) [2.5, 3.5], F1 [3.5, 4], B1 [4, 6], RS(B1) [6, 7]: 7 s, the planner's
  // m (F + B) + m x the reduce-scatter's tail past B (estimate.cpp reduce_tail_seconds).
  input.layout.zero = 2;
  input.stages[0].chunk_param_buckets.clear();
  CHECK(simulate(input).step_time_s == 7.0);
  // Without the boundaries (meshplan's executor) its reduce-scatters run beside the next op:
  // RS(B0) [2.5, 3.5] beside F1 [2.5, 3] and B1 [3, 5], RS(B1) [5, 6].
  input.sharded_pass_boundaries = false;
  CHECK(simulate(input).step_time_s == 6.0);
}

TEST_CASE("pipeline: a backward's last bucket is complete when its tp communication is") {
  // ZeRO 2 with pass boundaries, pp 1, m 2, F 0.5, B 2 of compute plus 0.5 s of exposed tp
  // communication (placed after the compute, the op being one piece; it stands for collectives
  // spread through the layers), one reduce-scatter of 1 s. The bucket is complete when the op is:
  // F0 [0, 0.5], B0 [0.5, 2.5], tp [2.5, 3], RS(B0) [3, 4], F1 [4, 4.5], B1 [4.5, 6.5], tp [6.5,
  // 7], RS(B1) [7, 8]: 8 s, the planner's m (F + B + tp) + m x the tail. Were it complete with the
  // compute, the reduce-scatters would hide 0.5 s each behind the tp communication (7 s).
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 2, 0.5, 2.0);
  input.layout.dp = 2;
  input.layout.zero = 2;
  input.sharded_pass_boundaries = true;
  input.stages[0].chunks[0].backward_tp_comm_seconds = 0.5;
  input.stages[0].chunk_grad_buckets = {Bucket{100, 1.0}};
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    CHECK(simulate(input).step_time_s == 8.0);
  }
  // Without the boundaries: RS(B0) [3, 4] beside F1 [3, 3.5] and B1 [3.5, 5.5], tp [5.5, 6],
  // RS(B1) [6, 7].
  input.all_ranks = false;
  input.sharded_pass_boundaries = false;
  CHECK(simulate(input).step_time_s == 7.0);
  // ZeRO 1, one DDP bucket for the step: ready when B1's tp ends, RS [6, 7].
  input.layout.zero = 1;
  input.stages[0].chunk_grad_buckets.clear();
  input.stages[0].grad_buckets = {Bucket{100, 1.0}};
  CHECK(simulate(input).step_time_s == 7.0);
}

TEST_CASE("pipeline: ZeRO-3 gathered once per step (torchtitan's pipelining)") {
  // The case above (pp 1, m 2, F 0.5, B 2, gather 0.5, reduce-scatter 1) with the chunk lists
  // run once per step: G(F0) [0, 0.5], F0 [0.5, 1], B0 [1, 3] without a gather, F1 [3, 3.5]
  // without one, B1 [3.5, 5.5], RS(B1) [5.5, 6.5] after it. 6.5 s, the planner's closed form
  // m (F + B) + g + r (estimate.cpp zero3_exposed_once_per_step).
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 1, 1, 2, 0.5, 2.0);
  input.layout.dp = 2;
  input.layout.zero = 3;
  input.sharded_pass_boundaries = true;
  input.zero3_gathers_once_per_step = true;
  input.stages[0].chunk_param_buckets = {Bucket{100, 0.5}};
  input.stages[0].chunk_param_backward_buckets = std::vector<Bucket>{};
  input.stages[0].chunk_grad_buckets = {Bucket{100, 1.0}};
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 6.5);
    CHECK(result.stages[0].compute_seconds == 5.0);
  }
}

TEST_CASE("pipeline: a DP bucket and a pipeline send through one NIC share it") {
  // tp = 1, pp = 2, dp = 2, one GPU per node (tp-dp-pp ranks 0, 1 | 2, 3 on nodes 0..3),
  // 1F1B, m = 1, f = 1, b = 2, sends 1 s, one gradient bucket of 1 s on each stage. Stage 1
  // ends B at 1 + 1 + 1 + 2 = 5; then its gradient send to stage 0 and its bucket all-reduce
  // leave node 2 together: 2 * 1 s = 2 s each, until 7. Stage 0 runs B [7, 9], reduces alone
  // [9, 10]; optimizer 1: 11. Without sharing it would be 10.
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 1, 1.0, 2.0);
  input.layout.dp = 2;
  input.gpus_per_node = 1;
  for (StageCosts& stage : input.stages) {
    stage.transfer_seconds = 1.0;
    stage.grad_buckets = {Bucket{100, 1.0}};
    stage.optimizer_step_seconds = 1.0;
  }
  for (bool all_ranks : {false, true}) {
    CAPTURE(all_ranks);
    input.all_ranks = all_ranks;
    const SimulationResult result = simulate(input);
    CHECK(result.step_time_s == 11.0);
  }
}

TEST_CASE("pipeline: same input, same result") {
  SimulationInput input = uniform_input(ScheduleKind::kInterleaved, 4, 2, 8, 0.3, 0.7);
  for (StageCosts& stage : input.stages) {
    stage.transfer_seconds = 0.01;
  }
  const SimulationResult a = simulate(input);
  const SimulationResult b = simulate(input);
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    CHECK(a.tasks[i].start_seconds == b.tasks[i].start_seconds);
    CHECK(a.tasks[i].end_seconds == b.tasks[i].end_seconds);
  }
  CHECK(a.num_events == b.num_events);
}

TEST_CASE("pipeline: inconsistent inputs are rejected with the field") {
  SimulationInput input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 2, 1.0, 2.0);
  input.stages.pop_back();
  CHECK_THROWS_WITH_AS(simulate(input), "simulate: stages: expected one per pipeline stage, 2 (1)",
                       InputError);
  input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 2, 1.0, 2.0);
  input.layout.pp = 4;
  CHECK_THROWS_WITH_AS(simulate(input),
                       "simulate: schedule: built for pp = 2, layout has pp = 4 (2)", InputError);
  input = uniform_input(ScheduleKind::kOneFOneB, 2, 1, 2, 1.0, 2.0);
  auto& ops = input.schedule.stages[0];
  for (auto it = ops.begin(); it != ops.end(); ++it) {
    if (it->kind == planner::OpKind::kSendActivation) {
      ops.erase(it);  // the first activation of stage 0 never leaves
      break;
    }
  }
  CHECK_THROWS_WITH_AS(
      simulate(input),
      "simulate: schedule: stage 1 receives micro-batch 0 chunk 0 that is never sent",
      RuntimeError);
}

}  // namespace meshplan::simulator
