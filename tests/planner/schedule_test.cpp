// Tests of the pipeline schedule generator (planner/schedule.cpp). Expected values come from
// the papers' closed forms (Narayanan et al. 2021 eqs. 1-2; Qi et al. 2023 Sec. 3; Korthikanti
// et al. 2022 Sec. 4.2.3), from hand-traced small cases, and from structural rules checked op by
// op (every micro-batch's work exactly once, on the right rank, in dependency order, every send
// matched by one receive on the right peer).

#include "meshplan/schedule.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "meshplan/errors.h"

namespace meshplan::planner {
namespace {

bool is_split(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1;
}

// One line per stage, e.g. "s0: F0 >a F1 >a <g B0 ...", for failure messages only; prints
// nothing itself. F/B/b/W = forward, backward, backward-input, backward-weight of micro-batch N
// (".c" suffix for chunk c when vpp > 1); >a/<a/>g/<g = send/recv activation/gradient.
std::string render(const PipelineSchedule& schedule) {
  std::string text;
  for (size_t stage = 0; stage < schedule.stages.size(); ++stage) {
    text += fmt::format("s{}:", stage);
    for (const PipelineOp& op : schedule.stages[stage]) {
      static const std::map<OpKind, std::string> kNames = {
          {OpKind::kForward, "F"},         {OpKind::kBackward, "B"},
          {OpKind::kBackwardInput, "b"},   {OpKind::kBackwardWeight, "W"},
          {OpKind::kSendActivation, ">a"}, {OpKind::kRecvActivation, "<a"},
          {OpKind::kSendGradient, ">g"},   {OpKind::kRecvGradient, "<g"}};
      text += fmt::format(" {}", kNames.at(op.kind));
      if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward ||
          op.kind == OpKind::kBackwardInput || op.kind == OpKind::kBackwardWeight) {
        text += std::to_string(op.micro_batch);
        if (schedule.vpp > 1) {
          text += fmt::format(".{}", op.chunk);
        }
      }
    }
    text += "\n";
  }
  return text;
}

// Only the compute ops of one stage, e.g. "F0 F1 b0 W0": to compare with published figures.
std::string compute_order(const PipelineSchedule& schedule, int64_t stage) {
  std::string text;
  for (const PipelineOp& op : schedule.stages[stage]) {
    const char* name = op.kind == OpKind::kForward          ? "F"
                       : op.kind == OpKind::kBackward       ? "B"
                       : op.kind == OpKind::kBackwardInput  ? "b"
                       : op.kind == OpKind::kBackwardWeight ? "W"
                                                            : nullptr;
    if (name != nullptr) {
      text += fmt::format("{}{}{}", text.empty() ? "" : " ", name, op.micro_batch);
    }
  }
  return text;
}

// Checks the structural rules of the brief and returns the first violation ("" if none).
// The rules are restated here from the definition, not taken from the generator:
// virtual stage v = chunk * pp + stage; activations flow v -> v + 1, gradients v + 1 -> v; a
// boundary b is the edge between virtual stages b and b + 1, on ranks b % pp and (b + 1) % pp.
std::string check_schedule(const PipelineSchedule& schedule) {
  const int64_t pp = schedule.pp;
  const int64_t vpp = schedule.vpp;
  const int64_t m = schedule.num_micro_batches;
  const int64_t num_virtual = pp * vpp;
  const bool split = is_split(schedule.kind);
  if (static_cast<int64_t>(schedule.stages.size()) != pp) {
    return "wrong number of stages";
  }
  // (kind, is_send, micro_batch, boundary) -> (stage, peer) of each transfer seen.
  std::map<std::tuple<bool, bool, int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>>
      transfers;
  for (int64_t stage = 0; stage < pp; ++stage) {
    const auto& ops = schedule.stages[stage];
    // (micro_batch, chunk) -> position of F, B (or b), W on this stage; -1 = not seen.
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> compute;
    auto slot = [&](const PipelineOp& op, int index) -> int64_t& {
      auto& positions = compute[{op.micro_batch, op.chunk}];
      positions.resize(3, -1);
      return positions[index];
    };
    for (int64_t i = 0; i < static_cast<int64_t>(ops.size()); ++i) {
      const PipelineOp& op = ops[i];
      const std::string where = fmt::format("stage {} op {}", stage, i);
      if (op.micro_batch < 0 || op.micro_batch >= m || op.chunk < 0 || op.chunk >= vpp) {
        return where + ": micro-batch or chunk out of range";
      }
      const int64_t v = op.chunk * pp + stage;
      int index = -1;
      switch (op.kind) {
        case OpKind::kForward:
          index = 0;
          break;
        case OpKind::kBackward:
          index = split ? -2 : 1;
          break;
        case OpKind::kBackwardInput:
          index = split ? 1 : -2;
          break;
        case OpKind::kBackwardWeight:
          index = split ? 2 : -2;
          break;
        default:
          break;
      }
      if (index == -2) {
        return where + ": backward kind does not fit the schedule";
      }
      if (index >= 0) {
        int64_t& position = slot(op, index);
        if (position != -1) {
          return where + ": compute op repeated";
        }
        position = i;
        continue;
      }
      if (pp == 1) {
        return where + ": transfer with pp == 1";
      }
      const bool activation =
          op.kind == OpKind::kSendActivation || op.kind == OpKind::kRecvActivation;
      const bool send = op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGradient;
      // Activation send at v crosses boundary v, its receive (at v + 1) boundary v; gradient
      // send at v crosses boundary v - 1, its receive (at v) boundary v.
      const int64_t boundary = (activation == send) ? v : v - 1;
      if (boundary < 0 || boundary >= num_virtual - 1) {
        return where + ": transfer beyond the first or last virtual stage";
      }
      const int64_t expected_peer = (boundary % pp == stage) ? (boundary + 1) % pp : boundary % pp;
      if (op.peer_stage != expected_peer) {
        return where + ": wrong peer stage";
      }
      // Order against the local compute op it belongs to: a forward's receive comes before it
      // and its send after; a backward's receive before it and its send after.
      const int64_t producer = slot(op, activation ? 0 : 1);
      if (send && producer == -1) {
        return where + ": send before the compute op that produces it";
      }
      if (!send && producer != -1) {
        return where + ": receive after the compute op that consumes it";
      }
      transfers[{activation, send, op.micro_batch, boundary}].push_back({stage, op.peer_stage});
    }
    // Every (micro-batch, chunk) has exactly one F, one B (and one W), in that order.
    if (static_cast<int64_t>(compute.size()) != m * vpp) {
      return fmt::format("stage {}: not every (micro-batch, chunk) computed", stage);
    }
    for (const auto& [key, positions] : compute) {
      const std::string what =
          fmt::format("stage {} micro-batch {} chunk {}", stage, key.first, key.second);
      if (positions[0] == -1 || positions[1] == -1 || (split && positions[2] == -1)) {
        return what + ": missing F, B or W";
      }
      if (!(positions[0] < positions[1]) || (split && !(positions[1] < positions[2]))) {
        return what + ": F, B, W out of order";
      }
    }
  }
  // Each boundary of each micro-batch carries one activation and one gradient: one send and one
  // receive each, on the two ranks either side of the boundary.
  const size_t expected = static_cast<size_t>(4 * m * (num_virtual - 1));
  if (transfers.size() != expected) {
    return "wrong number of distinct transfers";
  }
  for (const auto& [key, seen] : transfers) {
    if (seen.size() != 1) {
      return "transfer seen more than once";
    }
    const auto& [activation, send, micro_batch, boundary] = key;
    const int64_t sender = activation ? boundary % pp : (boundary + 1) % pp;
    if (seen[0].first != (send ? sender : (activation ? (boundary + 1) % pp : boundary % pp))) {
      return "transfer on the wrong rank";
    }
  }
  return "";
}

// Runs the checks on one combination and replays it; returns the makespan.
double check_and_replay(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t m, double f, double b,
                        double w, int64_t group = 0) {
  const PipelineSchedule schedule = generate_schedule(kind, pp, vpp, m, true, group);
  INFO(to_string(kind), " pp=", pp, " vpp=", vpp, " m=", m, " N=", group, "\n", render(schedule));
  CHECK(check_schedule(schedule) == "");
  double makespan = -1;
  CHECK_NOTHROW(makespan = replay_makespan(schedule, f, b, w));
  return makespan;
}

}  // namespace

TEST_CASE("schedule: 1f1b hand-traced replay, pp=2 m=2 f=1 b=2") {
  // Stage 0: F0 [0,1], F1 [1,2], B0 waits for stage 1's B0; stage 1: F0 [1,2], B0 [2,4],
  // F1 [4,5], B1 [5,7]; stage 0: B0 [4,6], B1 [7,9]. Makespan 9 = (m + p - 1)(f + b) = 3 * 3.
  const PipelineSchedule schedule = generate_schedule(ScheduleKind::kOneFOneB, 2, 1, 2);
  INFO(render(schedule));
  CHECK(render(schedule) ==
        "s0: F0 >a F1 >a <g B0 <g B1\n"
        "s1: <a F0 B0 >g <a F1 B1 >g\n");
  CHECK(replay_makespan(schedule, 1, 2, 0) == 9);
}

TEST_CASE("schedule: gpipe and 1f1b are valid and have the bubble of Narayanan et al. eq. 1") {
  // Narayanan et al. 2021 eq. 1: bubble time (p - 1)(t_f + t_b), so the makespan is
  // (m + p - 1)(t_f + t_b) for both GPipe and 1F1B; w is ignored by non-split schedules.
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    for (int64_t pp : {1, 2, 4, 8}) {
      for (int64_t m = 1; m <= 16; ++m) {
        CAPTURE(pp);
        CAPTURE(m);
        CHECK(check_and_replay(kind, pp, 1, m, 1, 1, 0) == 2 * (m + pp - 1));
        CHECK(check_and_replay(kind, pp, 1, m, 1, 2, 5) == 3 * (m + pp - 1));
      }
    }
  }
}

TEST_CASE("schedule: peak in-flight micro-batches of gpipe and 1f1b") {
  for (int64_t pp : {1, 2, 4, 8}) {
    for (int64_t m = 1; m <= 16; ++m) {
      CAPTURE(pp);
      CAPTURE(m);
      const PipelineSchedule gpipe = generate_schedule(ScheduleKind::kGpipe, pp, 1, m);
      const PipelineSchedule one_f_one_b = generate_schedule(ScheduleKind::kOneFOneB, pp, 1, m);
      for (int64_t s = 0; s < pp; ++s) {
        // GPipe: all m forwards run before the first backward (Huang et al. 2019, Sec. 2.3).
        CHECK(peak_in_flight_micro_batches(gpipe, s) == m);
        // 1F1B: stage s keeps at most p - s micro-batches in flight (Narayanan et al. 2021,
        // Sec. 2.2.1: "at most p"; stage s has p - s - 1 warm-up forwards plus the steady one).
        CHECK(peak_in_flight_micro_batches(one_f_one_b, s) == std::min(pp - s, m));
      }
    }
  }
}

TEST_CASE("schedule: interleaved is valid and has the bubble of Narayanan et al. eq. 2") {
  // Narayanan et al. 2021 Sec. 2.2.2: with v chunks per stage a chunk's forward and backward take
  // t_f / v and t_b / v, and the bubble shrinks to (p - 1)(t_f + t_b) / v (eq. 2). With chunk
  // times 1 and 1 (t_f = t_b = v) the makespan is m (t_f + t_b) + (p - 1)(t_f + t_b) / v =
  // 2 m v + 2 (p - 1); with chunk times 1 and 2 (t_f = v, t_b = 2v) it is 3 m v + 3 (p - 1).
  for (int64_t pp : {2, 4, 8}) {
    for (int64_t vpp : {2, 3}) {
      for (int64_t m = pp; m <= 32; m += pp) {
        CAPTURE(pp);
        CAPTURE(vpp);
        CAPTURE(m);
        CHECK(check_and_replay(ScheduleKind::kInterleaved, pp, vpp, m, 1, 1, 0) ==
              2 * m * vpp + 2 * (pp - 1));
        CHECK(check_and_replay(ScheduleKind::kInterleaved, pp, vpp, m, 1, 2, 0) ==
              3 * m * vpp + 3 * (pp - 1));
      }
    }
  }
}

TEST_CASE("schedule: interleaved forward order follows Megatron-LM's schedule table") {
  // Megatron-LM get_schedule_table with microbatch_group_size_per_vp_stage = pp = 2, m = 4,
  // vpp = 2: micro-batches 0 1 | 0 1 | 2 3 | 2 3 on chunks 0 0 | 1 1 | 0 0 | 1 1. Stage 0 has
  // (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 warm-up forwards, stage 1 has 2; backwards run chunk 1
  // first (vpp - 1 - chunk) in the same micro-batch order.
  const PipelineSchedule schedule = generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4);
  std::vector<std::pair<int64_t, int64_t>> forwards;
  std::vector<std::pair<int64_t, int64_t>> backwards;
  for (const PipelineOp& op : schedule.stages[0]) {
    if (op.kind == OpKind::kForward) {
      forwards.push_back({op.micro_batch, op.chunk});
    } else if (op.kind == OpKind::kBackward) {
      backwards.push_back({op.micro_batch, op.chunk});
    }
  }
  const std::vector<std::pair<int64_t, int64_t>> expected_forwards = {
      {0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  const std::vector<std::pair<int64_t, int64_t>> expected_backwards = {
      {0, 1}, {1, 1}, {0, 0}, {1, 0}, {2, 1}, {3, 1}, {2, 0}, {3, 0}};
  CHECK(forwards == expected_forwards);
  CHECK(backwards == expected_backwards);
  // Stage 0 order: 4 warm-up forwards, then (F, B) pairs, then the cool-down backwards.
  CHECK(compute_order(schedule, 0) == "F0 F1 F0 F1 F2 B0 F3 B1 F2 B0 F3 B1 B2 B3 B2 B3");
}

TEST_CASE("schedule: interleaved micro-batch groups follow Megatron-Core's table, PP2 N3 M5 VP2") {
  // Megatron-Core model_parallel_config.py, microbatch_group_size_per_vp_stage, and the
  // schedules.py get_schedule_table comment: PP 2, VP 2, N 3, M 5 runs micro-batches
  // 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1 ("rank 0 | 0 1 2 0 1 2 3 4 3 4"). Warm-up
  // (get_pp_rank_microbatches): (2 - s - 1) * 2 + (2 - 1) * 3 = 5 on stage 0, 3 on stage 1.
  const PipelineSchedule schedule = generate_schedule(ScheduleKind::kInterleaved, 2, 2, 5, true, 3);
  CHECK(check_schedule(schedule) == "");
  const std::vector<std::pair<int64_t, int64_t>> expected_forwards = {
      {0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};
  for (int64_t stage = 0; stage < 2; ++stage) {
    CAPTURE(stage);
    std::vector<std::pair<int64_t, int64_t>> forwards, backwards;
    int64_t warmup = -1;
    for (const PipelineOp& op : schedule.stages[stage]) {
      if (op.kind == OpKind::kForward) {
        forwards.push_back({op.micro_batch, op.chunk});
      } else if (op.kind == OpKind::kBackward) {
        backwards.push_back({op.micro_batch, 1 - op.chunk});  // get_model_chunk_id(forward=False)
        if (warmup < 0) {
          warmup = static_cast<int64_t>(forwards.size()) - 1;  // the steady forward runs first
        }
      }
    }
    CHECK(forwards == expected_forwards);
    CHECK(backwards == expected_forwards);  // the same table, chunks reversed
    CHECK(warmup == (2 - stage - 1) * 2 + 3);
  }
}

TEST_CASE("schedule: micro-batch groups N != pp keep the bubble of Narayanan et al. eq. 2") {
  // Every N Megatron-Core accepts (pp <= N <= m, m % N = 0 or >= pp): the same makespans as
  // N = pp above, 2 m v + 2 (p - 1) with chunk times 1 and 1, 3 m v + 3 (p - 1) with 1 and 2.
  // A larger N delays a chunk's first micro-batch on stage 0 by N >= p slots, never past the
  // slot its input arrives in, and warms up (v - 1) N forwards: in-flight grows by (v - 1)(N - p)
  // chunk-micro-batches (get_pp_rank_microbatches), capped at m v.
  int64_t num_checked = 0;
  for (int64_t pp : {2, 3, 4}) {
    for (int64_t vpp : {2, 3}) {
      for (int64_t m = pp; m <= 20; ++m) {
        for (int64_t n = pp + 1; n <= m; ++n) {
          std::string reason;
          if (!check_schedule_shape(ScheduleKind::kInterleaved, pp, vpp, m, &reason, n).empty()) {
            continue;
          }
          CAPTURE(pp);
          CAPTURE(vpp);
          CAPTURE(m);
          CAPTURE(n);
          CHECK(check_and_replay(ScheduleKind::kInterleaved, pp, vpp, m, 1, 1, 0, n) ==
                2 * m * vpp + 2 * (pp - 1));
          CHECK(check_and_replay(ScheduleKind::kInterleaved, pp, vpp, m, 1, 2, 0, n) ==
                3 * m * vpp + 3 * (pp - 1));
          const PipelineSchedule schedule =
              generate_schedule(ScheduleKind::kInterleaved, pp, vpp, m, false, n);
          for (int64_t s = 0; s < pp; ++s) {
            CHECK(peak_in_flight_micro_batches(schedule, s) ==
                  std::min((pp - s - 1) * 2 + (vpp - 1) * n + 1, m * vpp));
          }
          ++num_checked;
        }
      }
    }
  }
  CHECK(num_checked > 100);
}

TEST_CASE("schedule: micro-batch group sizes Megatron-Core refuses") {
  // schedules.py forward_backward_pipelining_with_interleaving: N outside [PP, M] is a
  // ValueError; a last group of 0 < M % N < PP micro-batches a RuntimeError.
  std::string reason;
  CHECK(check_schedule_shape(ScheduleKind::kInterleaved, 4, 2, 8, &reason, 3) ==
        "microbatch_group");
  CHECK(reason == "micro-batch group size must lie in [pp, micro-batches] = [4, 8] (3)");
  CHECK(check_schedule_shape(ScheduleKind::kInterleaved, 4, 2, 8, &reason, 9) ==
        "microbatch_group");
  CHECK(check_schedule_shape(ScheduleKind::kInterleaved, 4, 2, 11, &reason, 5) ==
        "microbatch_group");
  CHECK(reason == "micro-batches % micro-batch group size must be 0 or at least pp 4 (11 % 5 = 1)");
  CHECK(
      check_schedule_shape(ScheduleKind::kInterleaved, 4, 2, 9, &reason, 5).empty());  // 9 % 5 = 4
  CHECK(check_schedule_shape(ScheduleKind::kInterleaved, 4, 2, 10, &reason, 5)
            .empty());  // 10 % 5 = 0
  CHECK(check_schedule_shape(ScheduleKind::kOneFOneB, 4, 1, 8, &reason, 4) == "microbatch_group");
  CHECK_THROWS_WITH_AS(generate_schedule(ScheduleKind::kInterleaved, 4, 2, 11, true, 5),
                       "schedule: micro-batches % micro-batch group size must be 0 or at least "
                       "pp 4 (11 % 5 = 1)",
                       InputError);
}

TEST_CASE("schedule: peak in-flight chunk-micro-batches of interleaved") {
  // Korthikanti et al. 2022 Sec. 4.2.3: with interleaving, the first stage stores activations of
  // L (1 + (p - 1) / (p v)) layers for one micro-batch each. One chunk holds L / (p v) layers, so
  // in chunk units that is p v (1 + (p - 1) / (p v)) = p v + p - 1 (when m v is at least that;
  // otherwise all m v chunk-micro-batches are held). Any stage s: Megatron-LM runs
  // (p - s - 1) * 2 + (v - 1) p warm-up forwards, all held before the first backward, and each
  // steady (F, B) pair adds one before releasing one: min(warm-up + 1, m v). For s = 0 this is
  // 2 (p - 1) + (v - 1) p + 1 = p v + p - 1, the Korthikanti figure above.
  for (int64_t pp : {2, 4, 8}) {
    for (int64_t vpp : {2, 3}) {
      for (int64_t m = pp; m <= 32; m += pp) {
        CAPTURE(pp);
        CAPTURE(vpp);
        CAPTURE(m);
        const PipelineSchedule schedule = generate_schedule(ScheduleKind::kInterleaved, pp, vpp, m);
        CHECK(peak_in_flight_micro_batches(schedule, 0) == std::min(pp * vpp + pp - 1, m * vpp));
        for (int64_t s = 0; s < pp; ++s) {
          CHECK(peak_in_flight_micro_batches(schedule, s) ==
                std::min((pp - s - 1) * 2 + (vpp - 1) * pp + 1, m * vpp));
        }
      }
    }
  }
}

TEST_CASE("schedule: zb-h1 matches Qi et al. 2023 Fig. 3 (top), p = 4, m = 8") {
  // The figure's rows, 0-based micro-batches, "b" = B pass, "W" = W pass. Device 1: F1..F4,
  // then B1 W1 F5 B2 W2 ...; device 2: F1 F2 F3, B1 F4 B2 W1 F5 ...; device 4: F1 B1 ... B4 W1.
  const PipelineSchedule schedule = generate_schedule(ScheduleKind::kZbH1, 4, 1, 8);
  INFO(render(schedule));
  CHECK(compute_order(schedule, 0) ==
        "F0 F1 F2 F3 b0 W0 F4 b1 W1 F5 b2 W2 F6 b3 W3 F7 b4 W4 b5 W5 b6 W6 b7 W7");
  CHECK(compute_order(schedule, 1) ==
        "F0 F1 F2 b0 F3 b1 W0 F4 b2 W1 F5 b3 W2 F6 b4 W3 F7 b5 W4 b6 W5 b7 W6 W7");
  CHECK(compute_order(schedule, 2) ==
        "F0 F1 b0 F2 b1 F3 b2 W0 F4 b3 W1 F5 b4 W2 F6 b5 W3 F7 b6 W4 b7 W5 W6 W7");
  CHECK(compute_order(schedule, 3) ==
        "F0 b0 F1 b1 F2 b2 F3 b3 W0 F4 b4 W1 F5 b5 W2 F6 b6 W3 F7 b7 W4 W5 W6 W7");
  // The figure spans 27 unit slots on device 1: 4 F, 3 idle, then 4 F + 8 B + 8 W.
  CHECK(replay_makespan(schedule, 1, 1, 1) == 27);
}

// Megatron-DeepSpeed's ZB-H1 with --enable-zbh1-exact-semantics, the order --emit
// megatron-deepspeed asks for, restated from microsoft/Megatron-DeepSpeed f4157bea
// megatron/core/pipeline_parallel/deepspeed_zbh1_schedule.py ZeroBubbleH1Pipeline.steps: on
// stage s, p - s - 1 warm-up forwards; then, while forwards remain, s steps of a forward and a
// backward-input pass (their W's queued); then steps of forward, B and one queued W; then B and
// one W while backwards remain; then the queued W's. WeightGradStore is a FIFO queue, so each W
// is the oldest pending micro-batch's. The first stage's BackwardPass runs B and W at once.
std::string megatron_deepspeed_zbh1_order(int64_t pp, int64_t stage, int64_t m) {
  int64_t forwards = 0, backwards = 0, weights = 0;
  std::string order;
  const auto add = [&](char kind, int64_t& counter) {
    order += fmt::format("{}{} ", kind, counter++);
  };
  for (int64_t i = 0; i < pp - stage - 1 && forwards < m; ++i) {
    add('F', forwards);
  }
  for (int64_t i = 0; i < stage && forwards < m; ++i) {
    add('F', forwards);
    add('b', backwards);
  }
  while (forwards < m) {
    add('F', forwards);
    add('b', backwards);
    add('W', weights);
  }
  while (backwards < m) {
    add('b', backwards);
    add('W', weights);
  }
  while (weights < m) {
    add('W', weights);
  }
  order.pop_back();
  return order;
}

TEST_CASE("schedule: Megatron-DeepSpeed's exact ZB-H1 order is meshplan's zb-h1") {
  for (int64_t pp : {2, 3, 4, 8}) {
    for (int64_t m = pp; m <= 3 * pp; ++m) {
      const PipelineSchedule schedule = generate_schedule(ScheduleKind::kZbH1, pp, 1, m);
      for (int64_t stage = 0; stage < pp; ++stage) {
        CAPTURE(pp);
        CAPTURE(m);
        CAPTURE(stage);
        CHECK(compute_order(schedule, stage) == megatron_deepspeed_zbh1_order(pp, stage, m));
      }
    }
  }
  // One case written out: p = 4, m = 8, stage 1 (Qi et al. Fig. 3's second row).
  CHECK(megatron_deepspeed_zbh1_order(4, 1, 8) ==
        "F0 F1 F2 b0 F3 b1 W0 F4 b2 W1 F5 b3 W2 F6 b4 W3 F7 b5 W4 b6 W5 b7 W6 W7");
}

TEST_CASE("schedule: zb-h1 bubble is Qi et al. 2023 Table 2's (p - 1)(T_F + T_B - T_W)") {
  // Table 2: 1F1B's bubble is (p - 1)(T_F + T_B + T_W), ZB-H1's (p - 1)(T_F + T_B - T_W); with
  // T_F = T_B = T_W = 1 that is (p - 1), a third of 1F1B's 3 (p - 1), and the makespan is
  // 3 m + (p - 1). The table assumes enough micro-batches to reach the steady 1F-1B-1W phase
  // (m >= p); for m < p only validity is asserted.
  for (int64_t pp : {1, 2, 4, 8}) {
    for (int64_t m = 1; m <= 16; ++m) {
      CAPTURE(pp);
      CAPTURE(m);
      const double makespan = check_and_replay(ScheduleKind::kZbH1, pp, 1, m, 1, 1, 1);
      if (m >= pp) {
        CHECK(makespan == 3 * m + (pp - 1));
        // 1F1B with the same work (its backward = B + W = 2) has bubble 3 (p - 1).
        const double one_f_one_b = check_and_replay(ScheduleKind::kOneFOneB, pp, 1, m, 1, 2, 0);
        CHECK(3 * (makespan - 3 * m) == one_f_one_b - 3 * m);
      }
    }
  }
}

TEST_CASE("schedule: zb-h1 in-flight counts") {
  for (int64_t pp : {1, 2, 4, 8}) {
    for (int64_t m = 1; m <= 16; ++m) {
      CAPTURE(pp);
      CAPTURE(m);
      const PipelineSchedule schedule = generate_schedule(ScheduleKind::kZbH1, pp, 1, m);
      for (int64_t s = 0; s < pp; ++s) {
        // Activations (released at B): the same as 1F1B, min(p - s, m) (Qi et al. 2023 Table 2:
        // peak activations memory p M_B, as 1F1B).
        CHECK(peak_in_flight_micro_batches(schedule, s) == std::min(pp - s, m));
        // Counted from F to W instead, every stage holds the same number, min(p, m): "all
        // workers maintain the same number of in-flight microbatches" (Sec. 2.1), i.e.
        // (p - s) M_B + s M_W on stage s (Sec. 2.3, 0-based).
        int64_t held = 0;
        int64_t peak = 0;
        for (const PipelineOp& op : schedule.stages[s]) {
          if (op.kind == OpKind::kForward) {
            peak = std::max(peak, ++held);
          } else if (op.kind == OpKind::kBackwardWeight) {
            --held;
          }
        }
        CHECK(peak == std::min(pp, m));
      }
    }
  }
}

TEST_CASE("schedule: rejects invalid combinations with the field named") {
  auto message = [](ScheduleKind kind, int64_t pp, int64_t vpp, int64_t m) -> std::string {
    try {
      generate_schedule(kind, pp, vpp, m);
    } catch (const InputError& error) {
      return error.what();
    }
    return "no error";
  };
  CHECK(message(ScheduleKind::kOneFOneB, 0, 1, 4) == "pp: must be at least 1 (0)");
  CHECK(message(ScheduleKind::kOneFOneB, 2, 0, 4) == "vpp: must be at least 1 (0)");
  CHECK(message(ScheduleKind::kOneFOneB, 2, 1, 0) == "micro_batches: must be at least 1 (0)");
  CHECK(message(ScheduleKind::kOneFOneB, 2, 2, 4) ==
        "schedule: vpp > 1 needs the interleaved schedule (vpp 2, 1f1b)");
  CHECK(message(ScheduleKind::kGpipe, 2, 3, 4) ==
        "schedule: vpp > 1 needs the interleaved schedule (vpp 3, gpipe)");
  CHECK(message(ScheduleKind::kZbH1, 2, 2, 4) ==
        "schedule: vpp > 1 needs the interleaved schedule (vpp 2, zb-h1)");
  CHECK(message(ScheduleKind::kInterleaved, 4, 1, 8) ==
        "schedule: interleaved schedule needs pp >= 2 and vpp >= 2 (pp 4, vpp 1)");
  CHECK(message(ScheduleKind::kInterleaved, 1, 2, 8) ==
        "schedule: interleaved schedule needs pp >= 2 and vpp >= 2 (pp 1, vpp 2)");
  CHECK(message(ScheduleKind::kInterleaved, 4, 2, 6) ==
        "schedule: interleaved schedule needs micro-batches divisible by pp (6 % 4)");
  // m < pp is legal for 1f1b and zb-h1 (fewer warm-ups), not for interleaved (6 % 8 != 0).
  CHECK(message(ScheduleKind::kOneFOneB, 8, 1, 3) == "no error");
  CHECK(message(ScheduleKind::kInterleaved, 8, 2, 6) ==
        "schedule: interleaved schedule needs micro-batches divisible by pp (6 % 8)");
}

TEST_CASE("schedule: replay detects a deadlock and names the waiting stage") {
  // Stage 0 waits for a gradient before its first forward; stage 1 waits for that forward's
  // activation: neither can move.
  PipelineSchedule schedule;
  schedule.pp = 2;
  schedule.num_micro_batches = 1;
  auto op = [](OpKind kind, int64_t peer) {
    PipelineOp result;
    result.kind = kind;
    result.peer_stage = peer;
    return result;
  };
  schedule.stages = {{op(OpKind::kRecvGradient, 1), op(OpKind::kForward, -1),
                      op(OpKind::kSendActivation, 1), op(OpKind::kBackward, -1)},
                     {op(OpKind::kRecvActivation, 0), op(OpKind::kForward, -1),
                      op(OpKind::kBackward, -1), op(OpKind::kSendGradient, 0)}};
  std::string message = "no error";
  try {
    replay_makespan(schedule, 1, 1, 0);
  } catch (const RuntimeError& error) {
    message = error.what();
  }
  CHECK(message ==
        "schedule deadlock: stage 0 waits for recv-gradient of micro-batch 0 chunk 0 from stage 1");
}

TEST_CASE("schedule: replay rejects a send that is never received or sent twice") {
  // 1F1B, pp = 2, m = 1: stage 0 = F0 >a <g B0, stage 1 = <a F0 B0 >g. Dropping stage 1's
  // receive leaves stage 0's activation send (boundary 0-1) unmatched; doubling stage 0's send
  // issues the same transfer twice.
  PipelineSchedule dropped = generate_schedule(ScheduleKind::kOneFOneB, 2, 1, 1);
  PipelineSchedule doubled = dropped;
  REQUIRE(dropped.stages[1][0].kind == OpKind::kRecvActivation);
  dropped.stages[1].erase(dropped.stages[1].begin());
  REQUIRE(doubled.stages[0][1].kind == OpKind::kSendActivation);
  doubled.stages[0].insert(doubled.stages[0].begin() + 1, doubled.stages[0][1]);
  auto message = [](const PipelineSchedule& schedule) -> std::string {
    try {
      replay_makespan(schedule, 1, 1, 0);
    } catch (const RuntimeError& error) {
      return error.what();
    }
    return "no error";
  };
  CHECK(message(dropped) ==
        "schedule: stage 0: send-activation of micro-batch 0 across virtual stages 0-1 is never "
        "received");
  CHECK(message(doubled) ==
        "schedule: stage 0: send-activation of micro-batch 0 chunk 0 sent twice");
}

TEST_CASE("schedule: to_string of every op kind") {
  CHECK(to_string(OpKind::kForward) == "forward");
  CHECK(to_string(OpKind::kBackward) == "backward");
  CHECK(to_string(OpKind::kBackwardInput) == "backward-input");
  CHECK(to_string(OpKind::kBackwardWeight) == "backward-weight");
  CHECK(to_string(OpKind::kSendActivation) == "send-activation");
  CHECK(to_string(OpKind::kRecvActivation) == "recv-activation");
  CHECK(to_string(OpKind::kSendGradient) == "send-gradient");
  CHECK(to_string(OpKind::kRecvGradient) == "recv-gradient");
}

}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("without transfers: the same compute ops in the same order") {
  // The compute-only lists (used to count in-flight memory) are the full lists with every
  // send and receive removed, for every schedule.
  const auto is_transfer = [](const PipelineOp& op) {
    return op.kind == OpKind::kSendActivation || op.kind == OpKind::kRecvActivation ||
           op.kind == OpKind::kSendGradient || op.kind == OpKind::kRecvGradient;
  };
  for (const auto& [kind, vpp] : {std::pair{ScheduleKind::kGpipe, 1},
                                  {ScheduleKind::kOneFOneB, 1},
                                  {ScheduleKind::kInterleaved, 2},
                                  {ScheduleKind::kZbH1, 1}}) {
    const PipelineSchedule full = generate_schedule(kind, 4, vpp, 8);
    const PipelineSchedule compute = generate_schedule(kind, 4, vpp, 8, false);
    REQUIRE(compute.stages.size() == full.stages.size());
    for (size_t s = 0; s < full.stages.size(); ++s) {
      std::vector<PipelineOp> expected;
      for (const PipelineOp& op : full.stages[s]) {
        if (!is_transfer(op)) {
          expected.push_back(op);
        }
      }
      REQUIRE(compute.stages[s].size() == expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        CHECK(compute.stages[s][i].kind == expected[i].kind);
        CHECK(compute.stages[s][i].micro_batch == expected[i].micro_batch);
        CHECK(compute.stages[s][i].chunk == expected[i].chunk);
      }
    }
  }
}

}  // namespace
}  // namespace meshplan::planner
