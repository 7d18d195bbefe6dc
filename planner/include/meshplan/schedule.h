#pragma once
// The one pipeline schedule generator. The planner counts in-flight micro-batches and the
// bubble from these op lists, the simulator builds its task graph from them and the executor
// runs them. Nothing else decides the order of pipeline work.

#include <cstdint>
#include <string>
#include <vector>

#include "meshplan/layout.h"

namespace meshplan::planner {

/// kBackward is the whole backward of a chunk (input and weight gradients). Zero-bubble
/// schedules split it into kBackwardInput (B: gradient w.r.t. the chunk's input, sent upstream)
/// and kBackwardWeight (W: gradient w.r.t. the chunk's weights), Qi et al. 2023, Sec. 2.
enum class OpKind {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendActivation,  // to peer_stage, after a kForward of (micro_batch, chunk)
  kRecvActivation,  // from peer_stage, before a kForward of (micro_batch, chunk)
  kSendGradient,    // to peer_stage, after the backward (B) of (micro_batch, chunk)
  kRecvGradient,    // from peer_stage, before the backward (B) of (micro_batch, chunk)
};

/// One step of one pipeline rank's work. `chunk` is the model chunk on this rank (0..vpp-1);
/// chunk c on stage s holds virtual stage c * pp + s (Megatron-LM's interleaved assignment).
/// For transfers, (micro_batch, chunk) names the local chunk whose tensor is sent or received.
struct PipelineOp {
  OpKind kind = OpKind::kForward;
  int64_t micro_batch = 0;
  int64_t chunk = 0;
  int64_t peer_stage = -1;  // the other pipeline rank, for transfers only
  // overlap_moe_expert_parallel_comm at pp > 1 (Megatron-Core's combined 1F1B for interleaved
  // pipelining): a steady-state forward and the backward right after it in the list run as one
  // merged step; each names the other's chunk here (-1: not merged). Both receives precede the
  // forward, both sends follow the backward.
  int64_t merged_chunk = -1;
};

/// Ordered op lists, one per pipeline rank (stage). Semantics the lists are valid under:
/// sends are buffered (they never block), a receive blocks until its matching send was issued.
struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t num_micro_batches = 1;
  int64_t microbatch_group = 0;                 // interleaved: micro-batches per chunk group; 0: pp
  bool ep_overlap = false;                      // interleaved with merged forward-backward steps
  std::vector<std::vector<PipelineOp>> stages;  // [pp][ops]
};

/// Builds the op lists. Throws InputError (naming the field: "pp", "vpp", "micro_batches",
/// "schedule") when the combination is invalid (check_schedule_shape), e.g. interleaved with
/// num_micro_batches % pp != 0 under the default group size, or vpp > 1 with a schedule other
/// than interleaved. Never substitutes another schedule. Without transfers the lists hold the
/// compute ops alone, in the same order (for counting in-flight memory). `microbatch_group`:
/// the interleaved schedule's micro-batch group size N (Layout::microbatch_group), 0 for pp.
/// `ep_overlap` (interleaved only; ignored by the others): overlap_moe_expert_parallel_comm's
/// combined 1F1B (Megatron-Core schedules.py forward_backward_pipelining_with_interleaving and
/// get_pp_rank_microbatches, combined_1f1b.py, d98e8a64): one more warm-up forward, and every
/// steady-state pair (forward warm-up + i, backward i) merged (PipelineOp::merged_chunk).
PipelineSchedule generate_schedule(ScheduleKind kind, int64_t pp, int64_t vpp,
                                   int64_t num_micro_batches, bool with_transfers = true,
                                   int64_t microbatch_group = 0, bool ep_overlap = false);

/// Forward ops `stage` runs before its first backward (its warm-up), which is also how many
/// backward ops it runs after its last forward (its cool-down): GPipe m; 1F1B and ZB-H1
/// min(pp - s - 1, m); interleaved min(2 (pp - s - 1) + (vpp - 1) N, m vpp), N the micro-batch
/// group (`microbatch_group`, 0 for pp), with `ep_overlap` min(2 (pp - s - 1) + (vpp - 1) N + 1,
/// m vpp) (schedules.py get_pp_rank_microbatches: "one extra micro-batch forward step before the
/// 1f1b stages"). generate_schedule's op lists follow it.
int64_t warmup_forward_ops(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                           int64_t stage, int64_t microbatch_group = 0, bool ep_overlap = false);

/// Largest number of micro-batches (chunk-micro-batches for vpp > 1, counted in units of one
/// chunk's activations) whose forward activations `stage` holds at once: a forward adds one,
/// the op that releases them (kBackward, or kBackwardInput for split schedules) removes one.
/// For split schedules W still holds the linear layers' inputs, which Qi et al. 2023 (Table 1)
/// count separately as M_W < M_B; a ZB-H1 stage s holds up to s such W-pending micro-batches.
/// With `chunk` >= 0 only that model chunk's micro-batches are counted.
int64_t peak_in_flight_micro_batches(const PipelineSchedule& schedule, int64_t stage,
                                     int64_t chunk = -1);

/// Replays the lists with unit-free durations: every forward takes forward_time, every backward
/// (or B) backward_time, every W weight_time, transfers take no time. Returns the makespan.
/// A merged pair (PipelineOp::merged_chunk) takes forward_time + backward_time -
/// merged_saving[forward chunk][backward chunk] (absent or empty: 0), its backward charged the
/// difference. Throws RuntimeError if the lists deadlock under the semantics above.
double replay_makespan(const PipelineSchedule& schedule, double forward_time, double backward_time,
                       double weight_time,
                       const std::vector<std::vector<double>>& merged_saving = {});

/// The same replay with each rank's own chunk times, [stage][chunk] (kForward and kBackward
/// lists only: no B/W split), a merged pair taking forward + backward -
/// merged_saving[stage][forward chunk][backward chunk].
double replay_makespan(const PipelineSchedule& schedule,
                       const std::vector<std::vector<double>>& forward_time,
                       const std::vector<std::vector<double>>& backward_time,
                       const std::vector<std::vector<std::vector<double>>>& merged_saving);

std::string to_string(OpKind kind);

}  // namespace meshplan::planner
