// The pipeline schedule generator: per pipeline rank, the order of compute ops (F, B or B/W),
// then the point-to-point transfers around them. The compute order of each schedule is
// written as one small function; the transfers are added by one function for all of them.
//
// Virtual stages (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's interleaved assignment):
// chunk c of rank s holds virtual stage v = c * pp + s, so the forward successor of (pp-1, c)
// is (0, c + 1). Virtual stage 0 reads the data, virtual stage pp * vpp - 1 computes the loss.

#include "meshplan/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "meshplan/errors.h"

namespace meshplan::planner {
namespace {

using OpList = std::vector<PipelineOp>;

PipelineOp compute_op(OpKind kind, int64_t micro_batch, int64_t chunk) {
  PipelineOp op;
  op.kind = kind;
  op.micro_batch = micro_batch;
  op.chunk = chunk;
  return op;
}

// GPipe (Huang et al. 2019, Fig. 2c): all forwards, micro-batch 0..m-1, then all backwards in
// reverse micro-batch order m-1..0, as in the figure (and as autograd runs the backward of one
// concatenated batch): the last stage starts the backward of the micro-batch it just finished.
OpList gpipe_compute(int64_t num_micro_batches) {
  OpList ops;
  for (int64_t mb = 0; mb < num_micro_batches; ++mb) {
    ops.push_back(compute_op(OpKind::kForward, mb, 0));
  }
  for (int64_t mb = num_micro_batches - 1; mb >= 0; --mb) {
    ops.push_back(compute_op(OpKind::kBackward, mb, 0));
  }
  return ops;
}

// 1F1B / PipeDream-Flush (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4 top; Megatron-LM
// forward_backward_pipelining_without_interleaving): stage s runs min(pp - s - 1, m) warm-up
// forwards, then pairs (forward of micro-batch warmup + i, backward of micro-batch i), then the
// remaining backwards (cool-down).
OpList one_f_one_b_compute(int64_t pp, int64_t stage, int64_t num_micro_batches) {
  const int64_t num_warmup =
      warmup_forward_ops(ScheduleKind::kOneFOneB, pp, 1, num_micro_batches, stage);
  const int64_t num_steady = num_micro_batches - num_warmup;
  OpList ops;
  for (int64_t mb = 0; mb < num_warmup; ++mb) {
    ops.push_back(compute_op(OpKind::kForward, mb, 0));
  }
  for (int64_t i = 0; i < num_steady; ++i) {
    ops.push_back(compute_op(OpKind::kForward, num_warmup + i, 0));
    ops.push_back(compute_op(OpKind::kBackward, i, 0));
  }
  for (int64_t mb = num_steady; mb < num_micro_batches; ++mb) {
    ops.push_back(compute_op(OpKind::kBackward, mb, 0));
  }
  return ops;
}

// Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2, Fig. 4 bottom), in the order of
// Megatron-Core's forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/
// schedules.py, d98e8a64: get_schedule_table, get_model_chunk_id, get_pp_rank_microbatches).
// Micro-batches go through the chunks in groups of N = microbatch_group_size_per_vp_stage
// (default pp): the table lists, group by group, chunk 0 for the group's micro-batches, then
// chunk 1, ...; the last group takes every micro-batch left (get_schedule_table). The k-th
// forward of a rank runs table[k]; the k-th backward runs table[k]'s micro-batch on chunk
// vpp - 1 - table[k].chunk (get_model_chunk_id with forward=False; each chunk's backwards pop
// its inputs in forward order). Warm-up: (pp - s - 1) * 2 + (vpp - 1) * N forwards, capped at
// m * vpp; then (forward warmup + i, backward i) pairs; then the remaining backwards.
//
// With ep_overlap (overlap_moe_expert_parallel_comm; schedules.py d98e8a64 lines 966-970 and the
// steady loop's forward_backward_helper_wrapper(f_virtual_microbatch_id=forward_k,
// b_virtual_microbatch_id=k), which calls combined_1f1b_schedule_for_interleaved_pipelining):
// one more warm-up forward, so that a merged step's backward never needs its own forward, and
// each steady pair runs as one merged step (merged_chunk set on both ops). The warm-up forwards
// and cool-down backwards stay alone.
OpList interleaved_compute(int64_t pp, int64_t vpp, int64_t group, int64_t stage,
                           int64_t num_micro_batches, bool ep_overlap) {
  std::vector<std::pair<int64_t, int64_t>> table;  // (micro-batch, chunk) per virtual index
  for (int64_t first = 0; first < num_micro_batches; first += group) {
    const int64_t end = first + group >= num_micro_batches ? num_micro_batches : first + group;
    for (int64_t chunk = 0; chunk < vpp; ++chunk) {
      for (int64_t mb = first; mb < end; ++mb) {
        table.emplace_back(mb, chunk);
      }
    }
    if (end == num_micro_batches) {
      break;
    }
  }
  const int64_t num_total = num_micro_batches * vpp;
  const int64_t num_warmup = warmup_forward_ops(ScheduleKind::kInterleaved, pp, vpp,
                                                num_micro_batches, stage, group, ep_overlap);
  const int64_t num_steady = num_total - num_warmup;
  auto forward = [&](int64_t k) {
    return compute_op(OpKind::kForward, table[k].first, table[k].second);
  };
  auto backward = [&](int64_t k) {
    return compute_op(OpKind::kBackward, table[k].first, vpp - 1 - table[k].second);
  };
  OpList ops;
  for (int64_t k = 0; k < num_warmup; ++k) {
    ops.push_back(forward(k));
  }
  for (int64_t i = 0; i < num_steady; ++i) {
    PipelineOp f = forward(num_warmup + i);
    PipelineOp b = backward(i);
    if (ep_overlap) {
      f.merged_chunk = b.chunk;
      b.merged_chunk = f.chunk;
    }
    ops.push_back(f);
    ops.push_back(b);
  }
  for (int64_t k = num_steady; k < num_total; ++k) {
    ops.push_back(backward(k));
  }
  return ops;
}

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Sec. 2.1, Fig. 3 top): the 1F1B
// order of forwards and input-gradient passes B, with min(pp - s - 1, m) warm-up forwards on stage
// s, and the weight-gradient pass W of micro-batch j - s placed right after the B of micro-batch
// j; the s W's left over run after the last B. The W's start s micro-batches late so that every
// stage holds p micro-batches between F and W ("all workers maintain the same number of
// in-flight microbatches"), and they fill the cool-down bubble. Figure 3, p = 4, second stage
// (s = 1), micro-batches numbered from 1 as in the figure:
// F1 F2 F3 B1 F4 B2 W1 F5 B3 W2 ... F8 B6 W5 B7 W6 B8 W7 W8.
OpList zb_h1_compute(int64_t pp, int64_t stage, int64_t num_micro_batches) {
  const int64_t num_warmup =
      warmup_forward_ops(ScheduleKind::kZbH1, pp, 1, num_micro_batches, stage);
  const int64_t num_steady = num_micro_batches - num_warmup;
  OpList ops;
  auto backward_then_weight = [&](int64_t mb) {
    ops.push_back(compute_op(OpKind::kBackwardInput, mb, 0));
    if (mb - stage >= 0) {
      ops.push_back(compute_op(OpKind::kBackwardWeight, mb - stage, 0));
    }
  };
  for (int64_t mb = 0; mb < num_warmup; ++mb) {
    ops.push_back(compute_op(OpKind::kForward, mb, 0));
  }
  for (int64_t i = 0; i < num_steady; ++i) {
    ops.push_back(compute_op(OpKind::kForward, num_warmup + i, 0));
    backward_then_weight(i);
  }
  for (int64_t mb = num_steady; mb < num_micro_batches; ++mb) {
    backward_then_weight(mb);
  }
  for (int64_t mb = std::max<int64_t>(0, num_micro_batches - stage); mb < num_micro_batches; ++mb) {
    ops.push_back(compute_op(OpKind::kBackwardWeight, mb, 0));
  }
  return ops;
}

bool is_input_backward(OpKind kind) {
  return kind == OpKind::kBackward || kind == OpKind::kBackwardInput;
}

// Wraps one rank's compute order with its transfers: a receive right before the compute op
// that consumes it (the latest point, so no rank waits earlier than the data dependency
// forces), a send right after the compute op that produces it. A merged forward-backward pair
// (PipelineOp::merged_chunk) waits for both its inputs before it starts and sends both outputs
// after it ends (combined_1f1b.py: TransformerModelChunkSchedulePlan.run calls pre_forward and
// pre_backward, the receive waits, before the layers and post_forward and post_backward, the
// sends, after them; Megatron-LM d98e8a64 models/common/model_chunk_schedule_plan.py).
OpList add_transfers(const OpList& compute, int64_t pp, int64_t vpp, int64_t stage) {
  const int64_t num_virtual_stages = pp * vpp;
  const int64_t prev_stage = (stage + pp - 1) % pp;
  const int64_t next_stage = (stage + 1) % pp;
  OpList ops;
  ops.reserve(3 * compute.size());  // a receive before and a send after each compute op
  const auto receive = [&](const PipelineOp& op) {
    const int64_t virtual_stage = planner::virtual_stage(pp, stage, op.chunk);
    PipelineOp transfer = op;
    transfer.merged_chunk = -1;
    if (op.kind == OpKind::kForward && virtual_stage != 0) {
      transfer.kind = OpKind::kRecvActivation;
      transfer.peer_stage = prev_stage;
      ops.push_back(transfer);
    }
    if (is_input_backward(op.kind) && virtual_stage != num_virtual_stages - 1) {
      transfer.kind = OpKind::kRecvGradient;
      transfer.peer_stage = next_stage;
      ops.push_back(transfer);
    }
  };
  const auto send = [&](const PipelineOp& op) {
    const int64_t virtual_stage = planner::virtual_stage(pp, stage, op.chunk);
    PipelineOp transfer = op;
    transfer.merged_chunk = -1;
    if (op.kind == OpKind::kForward && virtual_stage != num_virtual_stages - 1) {
      transfer.kind = OpKind::kSendActivation;
      transfer.peer_stage = next_stage;
      ops.push_back(transfer);
    }
    if (is_input_backward(op.kind) && virtual_stage != 0) {
      transfer.kind = OpKind::kSendGradient;
      transfer.peer_stage = prev_stage;
      ops.push_back(transfer);
    }
  };
  for (size_t i = 0; i < compute.size(); ++i) {
    const PipelineOp& op = compute[i];
    if (op.kind == OpKind::kForward && op.merged_chunk >= 0 && i + 1 < compute.size()) {
      const PipelineOp& partner = compute[i + 1];
      receive(op);
      receive(partner);
      ops.push_back(op);
      ops.push_back(partner);
      send(op);
      send(partner);
      ++i;
      continue;
    }
    receive(op);
    ops.push_back(op);
    send(op);
  }
  return ops;
}

void validate(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
              int64_t microbatch_group) {
  if (pp < 1) {
    throw InputError(fmt::format("pp: must be at least 1 ({})", pp));
  }
  if (vpp < 1) {
    throw InputError(fmt::format("vpp: must be at least 1 ({})", vpp));
  }
  if (num_micro_batches < 1) {
    throw InputError(fmt::format("micro_batches: must be at least 1 ({})", num_micro_batches));
  }
  std::string reason;
  if (!check_schedule_shape(kind, pp, vpp, num_micro_batches, &reason, microbatch_group).empty()) {
    throw InputError(fmt::format("schedule: {}", reason));
  }
}

}  // namespace

int64_t warmup_forward_ops(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                           int64_t stage, int64_t microbatch_group, bool ep_overlap) {
  switch (kind) {
    case ScheduleKind::kGpipe:
      return num_micro_batches;
    case ScheduleKind::kInterleaved: {
      const int64_t group = microbatch_group > 0 ? microbatch_group : pp;
      return std::min((pp - stage - 1) * 2 + (vpp - 1) * group + (ep_overlap ? 1 : 0),
                      num_micro_batches * vpp);
    }
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kZbH1:
      break;
  }
  return std::min(pp - stage - 1, num_micro_batches);
}

PipelineSchedule generate_schedule(ScheduleKind kind, int64_t pp, int64_t vpp,
                                   int64_t num_micro_batches, bool with_transfers,
                                   int64_t microbatch_group, bool ep_overlap) {
  validate(kind, pp, vpp, num_micro_batches, microbatch_group);
  ep_overlap = ep_overlap && kind == ScheduleKind::kInterleaved;
  PipelineSchedule schedule;
  schedule.kind = kind;
  schedule.pp = pp;
  schedule.vpp = vpp;
  schedule.num_micro_batches = num_micro_batches;
  schedule.microbatch_group = microbatch_group;
  schedule.ep_overlap = ep_overlap;
  for (int64_t stage = 0; stage < pp; ++stage) {
    OpList compute;
    switch (kind) {
      case ScheduleKind::kGpipe:
        compute = gpipe_compute(num_micro_batches);
        break;
      case ScheduleKind::kOneFOneB:
        compute = one_f_one_b_compute(pp, stage, num_micro_batches);
        break;
      case ScheduleKind::kInterleaved:
        compute = interleaved_compute(pp, vpp, microbatch_group > 0 ? microbatch_group : pp, stage,
                                      num_micro_batches, ep_overlap);
        break;
      case ScheduleKind::kZbH1:
        compute = zb_h1_compute(pp, stage, num_micro_batches);
        break;
    }
    schedule.stages.push_back(with_transfers ? add_transfers(compute, pp, vpp, stage)
                                             : std::move(compute));
  }
  return schedule;
}

// A forward adds one chunk's activations; the backward that frees them removes one: kBackward,
// or for split schedules kBackwardInput (B). B frees the activations; W keeps only the linear
// layers' inputs and output gradients, which Qi et al. 2023 count separately as M_W < M_B
// (Table 1: M_B = sb(34h + 5as), M_W = 32sbh per layer) and whose peak for ZB-H1 they give as
// (p - i + 1) M_B + (i - 1) M_W on worker i (1-based), so B is the release point of M_B.
int64_t peak_in_flight_micro_batches(const PipelineSchedule& schedule, int64_t stage,
                                     int64_t chunk) {
  if (stage < 0 || stage >= static_cast<int64_t>(schedule.stages.size())) {
    throw InputError(fmt::format("stage: not a pipeline rank of this schedule, pp = {} ({})",
                                 schedule.stages.size(), stage));
  }
  int64_t in_flight = 0;
  int64_t peak = 0;
  for (const PipelineOp& op : schedule.stages[stage]) {
    if (chunk >= 0 && op.chunk != chunk) {
      continue;
    }
    if (op.kind == OpKind::kForward) {
      peak = std::max(peak, ++in_flight);
    } else if (is_input_backward(op.kind)) {
      --in_flight;
    }
  }
  return peak;
}

namespace {

// A transfer is matched by (activation or gradient, micro-batch, boundary), where boundary b
// is the edge between virtual stages b and b + 1.
using TransferKey = std::tuple<bool, int64_t, int64_t>;

TransferKey transfer_key(const PipelineOp& op, int64_t pp, int64_t stage) {
  const int64_t virtual_stage = planner::virtual_stage(pp, stage, op.chunk);
  switch (op.kind) {
    case OpKind::kSendActivation:
      return {true, op.micro_batch, virtual_stage};
    case OpKind::kRecvActivation:
      return {true, op.micro_batch, virtual_stage - 1};
    case OpKind::kSendGradient:
      return {false, op.micro_batch, virtual_stage - 1};
    default:  // kRecvGradient
      return {false, op.micro_batch, virtual_stage};
  }
}

}  // namespace

namespace {

// The replay of replay_makespan; `seconds(stage, op)` is a compute op's duration.
double replay_with(const PipelineSchedule& schedule,
                   const std::function<double(int64_t, const PipelineOp&)>& seconds) {
  const int64_t pp = static_cast<int64_t>(schedule.stages.size());
  if (pp != schedule.pp) {
    throw RuntimeError(
        fmt::format("schedule: {} op lists for pp = {}", schedule.stages.size(), schedule.pp));
  }
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0.0);
  std::map<TransferKey, double> sent;  // issue time of each send not yet received
  size_t remaining = 0;
  for (const OpList& ops : schedule.stages) {
    remaining += ops.size();
  }
  while (remaining > 0) {
    bool progress = false;
    for (int64_t stage = 0; stage < pp; ++stage) {
      const OpList& ops = schedule.stages[stage];
      for (; next[stage] < ops.size(); ++next[stage], --remaining, progress = true) {
        const PipelineOp& op = ops[next[stage]];
        if (op.kind == OpKind::kRecvActivation || op.kind == OpKind::kRecvGradient) {
          auto it = sent.find(transfer_key(op, schedule.pp, stage));
          if (it == sent.end()) {
            break;
          }
          clock[stage] = std::max(clock[stage], it->second);
          sent.erase(it);
        } else if (op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGradient) {
          if (!sent.emplace(transfer_key(op, schedule.pp, stage), clock[stage]).second) {
            throw RuntimeError(
                fmt::format("schedule: stage {}: {} of micro-batch {} chunk {} sent twice", stage,
                            to_string(op.kind), op.micro_batch, op.chunk));
          }
        } else {
          clock[stage] += seconds(stage, op);
        }
      }
    }
    if (!progress) {
      for (int64_t stage = 0; stage < pp; ++stage) {
        if (next[stage] < schedule.stages[stage].size()) {
          const PipelineOp& op = schedule.stages[stage][next[stage]];
          throw RuntimeError(fmt::format(
              "schedule deadlock: stage {} waits for {} of micro-batch {} chunk {} from stage {}",
              stage, to_string(op.kind), op.micro_batch, op.chunk, op.peer_stage));
        }
      }
    }
  }
  if (!sent.empty()) {
    const auto& [activation, micro_batch, boundary] = sent.begin()->first;
    throw RuntimeError(fmt::format(
        "schedule: stage {}: {} of micro-batch {} across virtual stages {}-{} is never received",
        activation ? boundary % schedule.pp : (boundary + 1) % schedule.pp,
        activation ? "send-activation" : "send-gradient", micro_batch, boundary, boundary + 1));
  }
  return pp == 0 ? 0.0 : *std::max_element(clock.begin(), clock.end());
}

}  // namespace

double replay_makespan(const PipelineSchedule& schedule, double forward_time, double backward_time,
                       double weight_time, const std::vector<std::vector<double>>& merged_saving) {
  return replay_with(schedule, [&](int64_t, const PipelineOp& op) {
    if (op.kind == OpKind::kForward) {
      return forward_time;
    }
    if (op.kind == OpKind::kBackwardWeight) {
      return weight_time;
    }
    // kBackward (whole backward: weight_time is not added) or kBackwardInput. A merged pair's
    // forward ran just before, with no wait between (add_transfers).
    return op.merged_chunk >= 0 && !merged_saving.empty()
               ? backward_time - merged_saving.at(static_cast<size_t>(op.merged_chunk))
                                     .at(static_cast<size_t>(op.chunk))
               : backward_time;
  });
}

double replay_makespan(const PipelineSchedule& schedule,
                       const std::vector<std::vector<double>>& forward_time,
                       const std::vector<std::vector<double>>& backward_time,
                       const std::vector<std::vector<std::vector<double>>>& merged_saving) {
  return replay_with(schedule, [&](int64_t stage, const PipelineOp& op) {
    const auto s = static_cast<size_t>(stage);
    const auto c = static_cast<size_t>(op.chunk);
    if (op.kind == OpKind::kForward) {
      return forward_time.at(s).at(c);
    }
    if (op.kind != OpKind::kBackward) {
      throw RuntimeError("schedule: per-chunk replay of a split backward");
    }
    return op.merged_chunk >= 0
               ? backward_time.at(s).at(c) -
                     merged_saving.at(s).at(static_cast<size_t>(op.merged_chunk)).at(c)
               : backward_time.at(s).at(c);
  });
}

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kBackwardInput:
      return "backward-input";
    case OpKind::kBackwardWeight:
      return "backward-weight";
    case OpKind::kSendActivation:
      return "send-activation";
    case OpKind::kRecvActivation:
      return "recv-activation";
    case OpKind::kSendGradient:
      return "send-gradient";
    case OpKind::kRecvGradient:
      return "recv-gradient";
  }
  return "?";
}

}  // namespace meshplan::planner
