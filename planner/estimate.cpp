// One layout's estimate: per-stage costs and memory, then the step time of its schedule.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "memory.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/schedule.h"
#include "meshplan/units.h"
#include "model_shape.h"
#include "optimizer_cost.h"

namespace meshplan::planner {

int64_t group_stride(const Layout& layout, CommGroup group) {
  // Ranks are tp-cp-(dp-pp | pp-dp), layout.h. The dp x cp gradient group (kDp, size
  // grad_group_size) is the contiguous run of cp * dp at stride tp under tp-dp-pp, the only
  // placement allowed with cp > 1 (check_cp_layout).
  const bool dp_before_pp = layout.placement == Placement::kTpDpPp;
  const int64_t tp_cp = layout.tp * layout.cp;
  switch (group) {
    case CommGroup::kTp:
      return 1;
    case CommGroup::kCp:
      return layout.tp;
    case CommGroup::kDp:
      return dp_before_pp ? layout.tp : tp_cp * layout.pp;
    // torchtitan's mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"]
    // (torchtitan/distributed/parallel_dims.py): a shard group is dp_shard * cp consecutive
    // members of the gradient group, its replicas dp_shard * cp members apart. Hybrid sharding
    // is fsdp only, whose placement is tp-dp-pp (check_framework).
    case CommGroup::kDpShard:
      return layout.tp;
    case CommGroup::kDpReplicate:
      return tp_cp * dp_shard_size(layout);
    case CommGroup::kPp:
      return dp_before_pp ? tp_cp * layout.dp : tp_cp;
    case CommGroup::kEmbedding:  // first and last stage
      return (dp_before_pp ? tp_cp * layout.dp : tp_cp) * std::max<int64_t>(layout.pp - 1, 1);
    // The expert grid etp-ep-edp over the stage's tp-cp-dp ranks (expert_parallel_ranks): ep
    // ranks etp apart, expert-dp ranks etp * ep apart. With etp = tp (the only etp allowed
    // under tp-pp-dp, check_layout "etp_placement") both are strides of the dp x cp group.
    case CommGroup::kEp:
      return dp_before_pp ? expert_tensor_parallel(layout) : group_stride(layout, CommGroup::kDp);
    case CommGroup::kExpertDp:
      return (dp_before_pp ? expert_tensor_parallel(layout)
                           : group_stride(layout, CommGroup::kDp)) *
             layout.ep;
  }
  return 1;
}

int64_t group_first_rank(const Layout& layout, CommGroup group, int64_t stage, int64_t tp_rank) {
  RankCoords coords;
  coords.tp_rank = group == CommGroup::kTp ? 0 : tp_rank;
  coords.pp_rank = group == CommGroup::kEmbedding ? 0 : stage;
  coords.dp_rank = 0;
  const int64_t rank = global_rank(layout, coords);
  if (group == CommGroup::kEp) {
    // expert_parallel_ranks(layout, rank).front() without the list (the search calls this per
    // layout): the rank's position in the stage is tp_rank, its ep rank (tp_rank / etp) % ep.
    const int64_t etp = expert_tensor_parallel(layout);
    return rank - tp_rank / etp % layout.ep * etp;
  }
  if (group == CommGroup::kExpertDp) {
    // The expert-dp group of the rank's (etp, ep) coordinate starts at its lowest member: its
    // position in the stage (tp_rank, as cp and dp ranks are 0) modulo etp * ep.
    return rank - tp_rank + tp_rank % (expert_tensor_parallel(layout) * layout.ep);
  }
  return rank;
}

double stage_collective_seconds(const models::ClusterConfig& cluster, const Layout& layout,
                                CollectiveKind kind, CommGroup group, int64_t stage,
                                int64_t message_bytes) {
  const int64_t group_size = group == CommGroup::kTp            ? layout.tp
                             : group == CommGroup::kDp          ? grad_group_size(layout)
                             : group == CommGroup::kDpShard     ? zero_shard_group_size(layout)
                             : group == CommGroup::kDpReplicate ? dp_replicate_size(layout)
                             : group == CommGroup::kCp          ? layout.cp
                             : group == CommGroup::kEp          ? layout.ep
                             : group == CommGroup::kExpertDp    ? expert_data_parallel(layout)
                                                                : 2;
  int64_t stride = group_stride(layout, group);
  if (group == CommGroup::kCp && kind == CollectiveKind::kSendRecv) {
    // A ring step waits for its slowest hop: the wrap-around from the last member to the
    // first crosses a node boundary exactly when any hop does.
    stride *= layout.cp - 1;
  }
  double seconds = 0;
  for (int64_t tp_rank : {int64_t{0}, layout.tp - 1}) {
    if (group != CommGroup::kPp) {
      seconds =
          std::max(seconds, collective_seconds(cluster, kind, message_bytes, group_size, stride,
                                               group_first_rank(layout, group, stage, tp_rank)));
      continue;
    }
    // A stage sends activations over boundary (s, s + 1) and gradients over (s - 1, s).
    for (int64_t boundary : {stage - 1, stage}) {
      if (boundary >= 0 && boundary + 1 < layout.pp) {
        seconds = std::max(seconds,
                           collective_seconds(cluster, kind, message_bytes, group_size, stride,
                                              group_first_rank(layout, group, boundary, tp_rank)));
      }
    }
  }
  return seconds;
}

bool pipeline_scatter_gather(const Layout& layout, const PlanOptions& options, bool gradient) {
  return options.scatter_gather_pipeline && (!gradient || options.pipeline_grad_scatter_gather) &&
         layout.tp > 1 && !layout.sequence_parallel;
}

int64_t pipeline_message_bytes(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout,
                               const PlanOptions& options, bool gradient) {
  const int64_t bytes =
      rank_micro_batch_tokens(model, layout) * model.hidden_size * element_bytes(cluster);
  const bool split = layout.sequence_parallel || pipeline_scatter_gather(layout, options, gradient);
  return split ? bytes / layout.tp : bytes;
}

double pipeline_transfer_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, int64_t stage, bool gradient) {
  if (layout.pp <= 1) {
    return 0.0;
  }
  const int64_t message = pipeline_message_bytes(model, cluster, layout, options, gradient);
  double seconds = stage_collective_seconds(cluster, layout, CollectiveKind::kSendRecv,
                                            CommGroup::kPp, stage, message);
  if (pipeline_scatter_gather(layout, options, gradient)) {
    seconds +=
        collective_seconds(cluster, CollectiveKind::kAllGather, message * layout.tp, layout.tp, 1);
  }
  return seconds;
}

namespace {

// Gradient reduction of one stage over dp, from its buckets (dp_buckets.h): all-reduce
// (ZeRO 0), reduce-scatter plus all-gather of the parameters (ZeRO 1, 2: Rajbhandari et al.
// 2020, Sec. 7.2.1), and for ZeRO 3 the per-micro-batch parameter all-gathers of forward and
// backward (ibid. Sec. 7.2.2).
struct DpTimes {
  double gradient_seconds = 0;              // reduction that may overlap the last backward
  double parameter_gather_seconds = 0;      // all-gather after the optimizer step
  double last_gradient_bucket_seconds = 0;  // ZeRO 0/1: the step's last call; 2-3: a chunk's
  int64_t num_units = 0;                    // ZeRO-3: all-gathers per chunk op, summed over chunks
  double num_micro_batches = 0;
  // FSDP's root unit (DpBuckets::chunk_root_param), per micro-batch summed over the chunks
  // (per step under zero3_gathers_once_per_step): its one all-gather and one reduce-scatter
  // (inside the two totals above).
  double root_gather_seconds = 0;
  double root_reduce_seconds = 0;
  // ZeRO-3's layer gathers per step, before the forwards and before the backwards (inside
  // parameter_gather_seconds; they differ under DeepSpeed, DpBuckets::chunk_param_backward).
  double forward_gather_seconds = 0;
  double backward_gather_seconds = 0;
  // ZeRO-2: per micro-batch, summed over the stage's chunks, how long each chunk op's
  // reduce-scatters run past the end of its backward (reduce_tail_seconds).
  double reduce_tail_seconds = 0;
  double expert_gradient_seconds = 0;  // inside gradient_seconds: once per step (ZeRO 1-2)
  // ZeRO 0/1 interleaved (megatron, fsdp, meshplan): how long the step's buckets run past the
  // stage's last backward, each chunk's released as that chunk's last backward ends in the
  // cool-down (drain_reduce_tail_seconds, carried_reduce_tail_seconds); < 0 where not used.
  double drain_reduce_tail_seconds = -1;
  // ZeRO 2: one chunk op's reduce-scatters, back to back (the stage's total chunk list).
  double chunk_reduce_seconds = 0;
  // ZeRO 1/2 with overlap_param_gather: how long the forwards wait for the parameter
  // all-gather (exposed_parameter_gather_seconds).
  double exposed_parameter_gather_seconds = 0;
};

// Bytes of every call of `buckets`.
double total_call_bytes(const std::vector<DpBucket>& buckets) {
  double bytes = 0;
  for (const DpBucket& bucket : buckets) {
    bytes += static_cast<double>(bucket.bytes * bucket.num_calls);
  }
  return bytes;
}

// How long one backward op's reduce-scatters run past its end, when each bucket is issued once
// the backward has produced its gradients (in list order, at an even rate over the bytes) and
// the calls run one after another on the data-parallel stream: at least the last bucket, which
// is complete only when the backward ends (Li et al. 2020, PyTorch DDP, Sec. 3.2.3). The
// simulator splits a gradient op at the same byte fractions (graph_builder.cpp split_op).
double reduce_tail_seconds(const std::vector<DpBucket>& buckets, double backward_seconds,
                           double stream_busy_until_s = 0) {
  const double total_bytes = total_call_bytes(buckets);
  if (total_bytes <= 0) {
    return std::max(0.0, stream_busy_until_s - backward_seconds);
  }
  double produced_bytes = 0;
  double stream_free_s = stream_busy_until_s;
  for (const DpBucket& bucket : buckets) {
    for (int64_t call = 0; call < bucket.num_calls; ++call) {
      produced_bytes += static_cast<double>(bucket.bytes);
      const double ready_s = backward_seconds * produced_bytes / total_bytes;
      stream_free_s = std::max(stream_free_s, ready_s) + bucket.seconds;
    }
  }
  return std::max(0.0, stream_free_s - backward_seconds);
}

// Megatron-Core's interleaved schedule ends with a cool-down of backward ops only, in groups of
// N = microbatch_group_size micro-batches per chunk, chunks in reverse order
// (schedules.py forward_backward_pipelining_with_interleaving, d98e8a64): chunk c's last
// backward is followed by c N more backward ops on the stage. Its DDP bucket (one per chunk;
// stage 0's chunk 0 in full buckets, DpBuckets::step_grad, listed in that order) is reduced as
// soon as that backward ends (Megatron's per-chunk grad sync, enabled for a chunk's last
// micro-batch). What the serial reduction runs past the stage's last backward, with b_op the
// stage's mean chunk backward; chunk 0's buckets fill during its last backward as
// reduce_tail_seconds does.
double drain_reduce_tail_seconds(const std::vector<DpBucket>& step_grad, const Layout& layout,
                                 double backward_op_seconds) {
  std::vector<DpBucket> calls;
  for (const DpBucket& bucket : step_grad) {
    for (int64_t k = 0; k < bucket.num_calls; ++k) {
      calls.push_back(bucket);
      calls.back().num_calls = 1;
    }
  }
  const auto other_chunks = static_cast<size_t>(layout.vpp - 1);
  if (calls.size() <= other_chunks) {
    return -1;  // not one bucket per chunk: the caller's bound applies
  }
  // Chunks vpp-1 .. 1, timed from the start of chunk 0's last backward, c N - 1 ops before it.
  const double group = static_cast<double>(microbatch_group_size(layout));
  double stream_free_s = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < other_chunks; ++i) {
    const double chunk = static_cast<double>(other_chunks - i);
    const double ready_s = -(chunk * group - 1.0) * backward_op_seconds;
    stream_free_s = std::max(stream_free_s, ready_s) + calls[i].seconds;
  }
  const std::vector<DpBucket> last_chunk(calls.begin() + static_cast<std::ptrdiff_t>(other_chunks),
                                         calls.end());
  return reduce_tail_seconds(last_chunk, backward_op_seconds, stream_free_s);
}

// ZeRO 2 under meshplan's executor: each gradient op's reduce-scatters join one stream and run
// beside the ops after it, none waiting for them (gradient_sync.cpp), so the stream falls
// behind where gradient ops come faster than it drains. They come at the pace the pipeline
// hands out gradients, `paced_op` apart (one forward and backward of the slowest stage, while
// the last stage alternates them), except for a run of `fast_ops` at the end, `fast_op` apart:
// the backwards the last stage runs after its last forward (its warm-up count,
// warmup_forward_ops: 0 under 1F1B, m under GPipe, (v - 1) N interleaved), one backward of the
// slowest stage apart, or under ZB-H1 the stage's own s leftover W passes, one W apart. A single
// queue with each op's calls joining at its end finishes at the max over ops k of (k's end + k's
// own tail past its end, `tail_op` (reduce_tail_seconds) + the later ops' calls back to back);
// within a run of ops at one period the max is at the run's first or last op. Returns how long
// it runs past the stage's last gradient op. Ignored: an interleaved stage's further waits at
// chunk switches, which give the stream more room (an upper bound).
double reduce_queue_tail_seconds(int64_t gradient_ops, int64_t fast_ops, double fast_op,
                                 double paced_op, double reduce_op, double tail_op) {
  const auto fast = static_cast<double>(std::min(fast_ops, gradient_ops));
  const auto paced = static_cast<double>(gradient_ops) - fast;
  double backlog = 0;  // beyond the last op's own tail
  if (fast >= 1) {
    backlog = std::max(backlog, (fast - 1.0) * (reduce_op - fast_op));
  }
  if (paced >= 1) {
    const double from_paced_end = fast * (reduce_op - fast_op);
    backlog = std::max(
        {backlog, from_paced_end, from_paced_end + (paced - 1.0) * (reduce_op - paced_op)});
  }
  return tail_op + backlog;
}

// Interleaved ZeRO 0/1 where each chunk's gradients are reduced as its last backward runs, in
// buckets that follow the stage's bytes, not its chunks: torchtitan's pipelining with DDP
// (stage.py backward_maybe_with_nosync syncs a chunk's last backward) and meshplan's executor
// (GradientSync::chunk_final_). The stage's buckets fill over its chunks' last backwards in op
// order, chunk vpp - 1's first, by their bytes (as simulate does, bucket_split.cpp
// split_carriers), chunk c's last backward ending c N ops before the stage's end (the
// interleaved cool-down, drain_reduce_tail_seconds), and run one after another. Returns how long
// they run past the stage's last backward; b_op the stage's mean chunk backward.
double carried_reduce_tail_seconds(const std::vector<DpBucket>& step_grad, const Layout& layout,
                                   double backward_op_seconds) {
  const double total_bytes = total_call_bytes(step_grad);
  if (total_bytes <= 0) {
    return 0.0;
  }
  const auto vpp = static_cast<double>(layout.vpp);
  const auto group = static_cast<double>(microbatch_group_size(layout));
  double produced_bytes = 0;
  double stream_free_s = -std::numeric_limits<double>::infinity();
  for (const DpBucket& bucket : step_grad) {
    for (int64_t call = 0; call < bucket.num_calls; ++call) {
      produced_bytes += static_cast<double>(bucket.bytes);
      // Where the bucket completes on the chunks' last backwards laid end to end, in b_op.
      const double position = vpp * produced_bytes / total_bytes;
      const double carrier = std::clamp(std::ceil(position) - 1.0, 0.0, vpp - 1.0);
      const double chunk = vpp - 1.0 - carrier;
      const double ready_s = -(chunk * group + 1.0 - (position - carrier)) * backward_op_seconds;
      stream_free_s = std::max(stream_free_s, ready_s) + bucket.seconds;
    }
  }
  return std::max(0.0, stream_free_s);
}

// ZeRO 1/2 with overlap_param_gather: the all-gather of the updated parameters runs from the
// step's start, bucket after bucket on one stream, and each bucket is needed as the forward that
// first reaches its bytes: the buckets laid over the chunks' first forwards in op order by their
// bytes (as simulate does, bucket_split.cpp split_carriers), chunk c's first forward starting
// after c N forward ops of the interleaved warm-up (schedules.py get_schedule_table: chunk 0 for
// the first group's N micro-batches, then chunk 1, ...; N at most m), one chunk forward f_op
// each. Megatron-Core (d98e8a64, align_param_gather, its default) dispatches chunks 0 and 1's
// all-gathers as the schedule starts and chunk c's as chunk c - 1's first forward starts
// (schedules.py param_sync_func), one NCCL stream, and waits for a bucket group in the forward
// pre-hook of its first parameter (param_and_grad_buffer.py finish_param_sync). The forwards wait
// the most the stream runs behind a need: max_k (end of bucket k - k's need), at least 0. The
// pipeline's fill, which starts a later stage's forwards later still, is left out (an upper
// bound).
double exposed_parameter_gather_seconds(const std::vector<DpBucket>& step_param,
                                        const Layout& layout, double forward_op_seconds) {
  const double total_bytes = total_call_bytes(step_param);
  if (total_bytes <= 0) {
    return 0.0;
  }
  const auto vpp = static_cast<double>(layout.vpp);
  const auto group =
      static_cast<double>(std::min(microbatch_group_size(layout), layout.num_micro_batches()));
  double needed_bytes = 0, stream_end_s = 0, exposed_s = 0;
  for (const DpBucket& bucket : step_param) {
    for (int64_t call = 0; call < bucket.num_calls; ++call) {
      const double position = vpp * needed_bytes / total_bytes;  // in chunk forwards
      const double chunk = std::min(std::floor(position), vpp - 1.0);
      const double need_s = (chunk * group + position - chunk) * forward_op_seconds;
      stream_end_s += bucket.seconds;
      exposed_s = std::max(exposed_s, stream_end_s - need_s);
      needed_bytes += static_cast<double>(bucket.bytes);
    }
  }
  return exposed_s;
}

// Whether every chunk of `stage` holds parameters (a layer, the embedding or the LM head). A
// chunk without any has no Megatron bucket, which would shift step_grad's chunk order, so
// drain_reduce_tail_seconds is not used there (exposed_dp_seconds keeps its bound).
bool every_chunk_has_parameters(const models::TransformerConfig& model, const Layout& layout,
                                int64_t stage) {
  for (int64_t c = 0; c < layout.vpp; ++c) {
    const int64_t v = virtual_stage(layout.pp, stage, c);
    if (chunk_layers(model, layout, stage, c).count() == 0 && v != 0 &&
        v != layout.pp * layout.vpp - 1) {
      return false;
    }
  }
  return true;
}

// Step totals: per-chunk calls run once per (micro-batch, chunk) op; ZeRO-3 gathers before
// both the forward and the backward.
DpTimes dp_times(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                 const Layout& layout, const PlanOptions& options, int64_t stage,
                 const std::vector<ChunkCost>& chunks) {
  const DpBuckets buckets = dp_buckets(model, cluster, layout, options, stage);
  const double chunk_ops = static_cast<double>(chunk_list_rounds(layout, options));
  DpTimes times;
  const double vpp = static_cast<double>(layout.vpp);
  times.root_gather_seconds = vpp * total_seconds(buckets.chunk_root_param);
  times.root_reduce_seconds = vpp * total_seconds(buckets.chunk_root_grad);
  times.gradient_seconds = total_seconds(buckets.step_grad) +
                           chunk_ops * total_seconds(buckets.chunk_grad) +
                           chunk_ops * total_seconds(buckets.chunk_root_grad);
  times.forward_gather_seconds = chunk_ops * total_seconds(buckets.chunk_param);
  times.backward_gather_seconds = chunk_ops * total_seconds(buckets.chunk_param_backward);
  times.parameter_gather_seconds = total_seconds(buckets.step_param) +
                                   times.forward_gather_seconds + times.backward_gather_seconds +
                                   chunk_ops * total_seconds(buckets.chunk_root_param);
  // Expert parameters: one gradient collective per step over the expert data parallel group.
  const DpBuckets experts = expert_dp_buckets(model, cluster, layout, options, stage);
  times.expert_gradient_seconds = total_seconds(experts.step_grad);
  times.gradient_seconds += times.expert_gradient_seconds;
  times.parameter_gather_seconds += total_seconds(experts.step_param);
  if (parameter_gather_overlapped(layout, options) && !chunks.empty() &&
      !(buckets.step_param.empty() && experts.step_param.empty())) {
    double forward_seconds = 0;
    for (const ChunkCost& chunk : chunks) {
      forward_seconds += chunk.forward_seconds();
    }
    const double forward_op = forward_seconds / static_cast<double>(chunks.size());
    if (experts.step_param.empty()) {
      times.exposed_parameter_gather_seconds =
          exposed_parameter_gather_seconds(buckets.step_param, layout, forward_op);
    } else {  // the expert parameters' calls after the others on the stream
      std::vector<DpBucket> gathers = buckets.step_param;
      gathers.insert(gathers.end(), experts.step_param.begin(), experts.step_param.end());
      times.exposed_parameter_gather_seconds =
          exposed_parameter_gather_seconds(gathers, layout, forward_op);
    }
  }
  if (!buckets.step_grad.empty()) {
    times.last_gradient_bucket_seconds = buckets.step_grad.back().seconds;
  } else if (!buckets.chunk_grad.empty()) {
    times.last_gradient_bucket_seconds = buckets.chunk_grad.back().seconds;
  }
  times.num_units = total_calls(buckets.chunk_param) * layout.vpp;
  if (layout.zero <= 1 && layout.vpp > 1 && options.overlap_grad_reduce && !chunks.empty()) {
    double backward_seconds = 0;
    for (const ChunkCost& chunk : chunks) {
      backward_seconds += chunk.backward_seconds();
    }
    const double backward_op = backward_seconds / static_cast<double>(chunks.size());
    if (options.framework == Framework::kMegatron &&
        every_chunk_has_parameters(model, layout, stage)) {
      times.drain_reduce_tail_seconds =
          drain_reduce_tail_seconds(buckets.step_grad, layout, backward_op);
    } else if (options.framework == Framework::kFsdp || options.framework == Framework::kMeshplan) {
      times.drain_reduce_tail_seconds =
          carried_reduce_tail_seconds(buckets.step_grad, layout, backward_op);
    }
  }
  if (layout.zero == 2) {
    // The gradient op: the backward, or under ZB-H1 its W pass.
    const bool split = layout.schedule == ScheduleKind::kZbH1;
    for (const ChunkCost& chunk : chunks) {
      times.reduce_tail_seconds +=
          reduce_tail_seconds(buckets.chunk_grad, split ? chunk.backward_weight_compute_seconds
                                                        : chunk.backward_seconds());
    }
    times.chunk_reduce_seconds = total_seconds(buckets.chunk_grad);
  }
  times.num_micro_batches = static_cast<double>(layout.num_micro_batches());
  return times;
}

// One stage's per-micro-batch times, summed over its chunks (f_s, b_s, W_s, its tp part).
struct StageTimes {
  int64_t stage = 0;
  double forward = 0;
  double backward = 0;
  double weight = 0;            // W of split schedules (inside backward)
  double tp = 0;                // exposed tp communication (inside forward + backward)
  double flops = 0;             // executed per micro-batch on one rank
  double ep_overlap_saved = 0;  // per merged forward-backward (ChunkCost::ep_overlap_saved_seconds)
  DpTimes dp;
};

// Chunk costs already computed for one layout, keyed by what chunk_cost reads of the chunk:
// its layer count, its layers of each kind (kLayerKinds: MoE or dense, windowed or full) and
// those of each kind under recompute (Megatron's block method recomputes the first
// recompute_layers, whose kinds a window pattern varies from chunk to chunk), embedding and LM
// head, and for chunks with MoE layers the stage (where its all-to-all runs). Most chunks of a
// layout are alike, so each kind of chunk is costed once.
struct ChunkCostCache {
  using KindCounts = std::array<int64_t, 2 * kLayerKinds.size()>;
  struct Entry {
    int64_t num_layers, moe_stage;
    KindCounts kind_counts;
    bool has_embedding, has_lm_head;
    ChunkCost cost;
  };
  std::vector<Entry> entries;
};

// chunk_cost of chunk c on stage s, from `cache` when an alike chunk was costed.
ChunkCost cached_chunk_cost(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, int64_t s, int64_t c,
                            ChunkCostCache& cache) {
  const LayerRange range = chunk_layers(model, layout, s, c);
  const int64_t num_moe = range.num_moe(model);
  const int64_t v = virtual_stage(layout.pp, s, c);
  const bool embedding = v == 0;
  const bool head = v == layout.pp * layout.vpp - 1;
  const int64_t moe_stage = num_moe > 0 ? s : -1;
  ChunkCostCache::KindCounts kind_counts{};
  for (size_t k = 0; k < kLayerKinds.size(); ++k) {
    kind_counts[k] = range.num_of_kind(model, kLayerKinds[k]);
    kind_counts[kLayerKinds.size() + k] =
        layers_under_recompute(model, layout, options, range, kLayerKinds[k]);
  }
  for (const ChunkCostCache::Entry& e : cache.entries) {
    if (e.num_layers == range.count() && e.kind_counts == kind_counts && e.moe_stage == moe_stage &&
        e.has_embedding == embedding && e.has_lm_head == head) {
      return e.cost;
    }
  }
  const ChunkCost cost = chunk_cost(model, cluster, layout, options, s, c);
  cache.entries.push_back({range.count(), moe_stage, kind_counts, embedding, head, cost});
  return cost;
}

// Fills `stage` (chunk costs, memory, parameters, optimizer step, DP sync) for pipeline rank s
// and returns its times.
StageTimes estimate_stage(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options, int64_t s, StageEstimate& stage,
                          ChunkCostCache& cache) {
  StageTimes times;
  times.stage = s;
  stage.stage = s;
  for (int64_t c = 0; c < layout.vpp; ++c) {
    stage.chunks.push_back(cached_chunk_cost(model, cluster, layout, options, s, c, cache));
    const ChunkCost& chunk = stage.chunks.back();
    times.forward += chunk.forward_seconds();
    times.backward += chunk.backward_seconds();
    times.weight += chunk.backward_weight_compute_seconds;
    times.tp += chunk.forward_tp_comm_seconds + chunk.backward_tp_comm_seconds;
    times.flops += static_cast<double>(chunk.forward_flops + chunk.backward_flops);
    times.ep_overlap_saved += chunk.ep_overlap_saved_seconds;
  }
  const int64_t m = layout.num_micro_batches();
  const InFlight in_flight =
      peak_in_flight(layout.schedule, layout.pp, layout.vpp, m, s, layout.microbatch_group,
                     ep_overlap_schedule(layout, options));
  stage.peak_in_flight_micro_batches = in_flight.all_chunks;
  stage.memory = stage_memory(model, cluster, layout, options, s, in_flight);
  stage.num_parameters = stage_parameter_count(model, layout, s, options);
  const int64_t expert = stage_expert_parameter_count(model, layout, s, options);
  // The passes around Adam (optimizer_step_bytes): Megatron's under its DDP and distributed
  // optimizer (zero <= 1), PyTorch FSDP's clipping over fp32 shards; Megatron-FSDP (zero >= 2),
  // DeepSpeed and meshplan's executor: Adam alone (their passes are not sourced here).
  OptimizerPasses passes = OptimizerPasses::kAdamOnly;
  if (options.framework == Framework::kMegatron && layout.zero <= 1) {
    passes = OptimizerPasses::kMegatron;
  } else if (options.framework == Framework::kFsdp) {
    passes = OptimizerPasses::kFsdp;
  }
  stage.optimizer_step_seconds =
      optimizer_step_seconds(cluster,
                             zero_shard_count(layout, stage.num_parameters - expert) +
                                 zero_shard_count(expert_layout(layout), expert),
                             grad_reduce_element_bytes(cluster, layout, options),
                             stage.num_parameters, passes, options, layout.dp * layout.cp);
  times.dp = dp_times(model, cluster, layout, options, s, stage.chunks);
  stage.dp_grad_sync_seconds = times.dp.gradient_seconds + times.dp.parameter_gather_seconds;
  return times;
}

// What the makespans read from the stages: sum and maxima of f_s + b_s and its split parts.
struct PipelineTimes {
  double sum_stage = 0, max_stage = 0, max_tp = 0;  // max_tp: of the slowest stage
  double max_forward = 0, max_backward = 0;         // max_s f_s, max_s b_s
  double max_forward_backward_minus_weight = 0;     // F + B - W of split schedules
  double max_forward_backward_input = 0, max_weight = 0;
};

PipelineTimes pipeline_times(const std::vector<StageTimes>& stages) {
  PipelineTimes p;
  for (const StageTimes& t : stages) {
    const double stage = t.forward + t.backward;
    p.sum_stage += stage;
    if (stage > p.max_stage) {
      p.max_stage = stage;
      p.max_tp = t.tp;
    }
    p.max_forward = std::max(p.max_forward, t.forward);
    p.max_backward = std::max(p.max_backward, t.backward);
    p.max_forward_backward_minus_weight =
        std::max(p.max_forward_backward_minus_weight, stage - 2.0 * t.weight);
    p.max_forward_backward_input = std::max(p.max_forward_backward_input, stage - t.weight);
    p.max_weight = std::max(p.max_weight, t.weight);
  }
  return p;
}

// Pipeline makespan of the layout's schedule (f_s + b_s: one micro-batch through stage s).
double pipeline_makespan(const Layout& layout, const PipelineTimes& p) {
  const double micro_batches = static_cast<double>(layout.num_micro_batches());
  const double pp = static_cast<double>(layout.pp);
  const double vpp = static_cast<double>(layout.vpp);
  switch (layout.schedule) {
    case ScheduleKind::kGpipe:
      // Two flow shops of m identical jobs (Huang et al. 2019, GPipe, Fig. 2c): the forwards
      // 0 -> p-1, then the backwards p-1 -> 0, released when the last stage's forwards end:
      // sum_s f_s + (m - 1) max_s f_s + sum_s b_s + (m - 1) max_s b_s. With the same stage
      // slowest in f and b it is the 1F1B form below; uneven stages can differ (an LM-head
      // stage slowest forward, a longer inner stage slowest backward).
      return p.sum_stage + (micro_batches - 1.0) * (p.max_forward + p.max_backward);
    case ScheduleKind::kOneFOneB:
      // Flow shop of identical jobs: fill and drain through every stage, then the slowest
      // stage paces the other m - 1; (m + p - 1)(f + b) for equal stages, so the bubble is
      // (p - 1)/(m + p - 1) (Narayanan et al. 2021, Sec. 2.2.1). Exact when the slowest stage
      // is the last; when an inner stage is slower, part of the later stages' fill and drain
      // overlaps its work and this is an upper bound (README "Agreement with the planner").
      return p.sum_stage + (micro_batches - 1.0) * p.max_stage;
    case ScheduleKind::kInterleaved:
      // Bubble shrinks by v: (m v + p - 1) chunk times (ibid. Sec. 2.2.2), for every
      // micro-batch group size N Megatron-Core accepts (layout.microbatch_group): N >= p, so a
      // chunk's input always arrives before its slot and the op lists' makespan does not
      // depend on N (schedule_test, "micro-batch groups N != pp keep the bubble").
      return (micro_batches * vpp + pp - 1.0) * p.max_stage / vpp;
    case ScheduleKind::kZbH1:
      // ZB-H1 fills the drain with deferred weight-gradient work: bubble (p - 1)(F + B - W)
      // instead of (p - 1)(F + B + W) (Qi et al. 2023, Sec. 3.1).
      // With m < p there is no steady state: F and B run through the pipeline and back, then
      // the last W, (m + p - 1)(F + B) + W; the larger of the two holds for every m.
      return std::max(
          micro_batches * p.max_stage + (pp - 1.0) * p.max_forward_backward_minus_weight,
          (micro_batches + pp - 1.0) * p.max_forward_backward_input + p.max_weight);
  }
  return 0.0;
}

// overlap_moe_expert_parallel_comm at pp > 1: Megatron-Core's interleaved schedule with the
// combined 1F1B (schedules.py forward_backward_pipelining_with_interleaving, combined_1f1b.py
// combined_1f1b_schedule_for_interleaved_pipelining, d98e8a64): the op lists of
// generate_schedule(ep_overlap) replayed (replay_makespan) with each rank's own chunk times, each
// merged pair shorter by ep_overlap_pair_saved_seconds of its forward and backward chunks (a
// merged pair's time depends on both chunks, so the closed form's one chunk time does not
// apply), against the plain interleaved lists replayed with the same times. The difference is
// the overlap's effect (the extra warm-up forward included), added to the closed form
// `interleaved` (pipeline_makespan), which stays the bound it is without the overlap.
// Returns the makespan; *saved: what the slowest stage's merged pairs save in all.
double ep_overlap_interleaved_makespan(const Layout& layout, const std::vector<StageTimes>& times,
                                       const std::vector<StageEstimate>& stages, double interleaved,
                                       double* saved) {
  size_t slowest = 0;
  for (size_t s = 1; s < times.size(); ++s) {  // the first maximum, as pipeline_times
    if (times[s].forward + times[s].backward > times[slowest].forward + times[slowest].backward) {
      slowest = s;
    }
  }
  std::vector<std::vector<double>> forward(stages.size()), backward(stages.size());
  std::vector<std::vector<std::vector<double>>> pair_saved(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    const std::vector<ChunkCost>& chunks = stages[s].chunks;
    pair_saved[s].assign(chunks.size(), std::vector<double>(chunks.size()));
    for (size_t f = 0; f < chunks.size(); ++f) {
      forward[s].push_back(chunks[f].forward_seconds());
      backward[s].push_back(chunks[f].backward_seconds());
      for (size_t b = 0; b < chunks.size(); ++b) {
        pair_saved[s][f][b] = ep_overlap_pair_saved_seconds(chunks[f], chunks[b]);
      }
    }
  }
  const PipelineSchedule schedule =
      generate_schedule(layout.schedule, layout.pp, layout.vpp, layout.num_micro_batches(), true,
                        layout.microbatch_group, true);
  *saved = 0;
  for (const PipelineOp& op : schedule.stages[slowest]) {
    if (op.kind == OpKind::kBackward && op.merged_chunk >= 0) {
      *saved +=
          pair_saved[slowest][static_cast<size_t>(op.merged_chunk)][static_cast<size_t>(op.chunk)];
    }
  }
  const PipelineSchedule plain =
      generate_schedule(layout.schedule, layout.pp, layout.vpp, layout.num_micro_batches(), true,
                        layout.microbatch_group, false);
  return interleaved + replay_makespan(schedule, forward, backward, pair_saved) -
         replay_makespan(plain, forward, backward, pair_saved);
}

// Megatron-Core's interleaved schedule with overlap_p2p_comm (schedules.py
// forward_backward_pipelining_with_interleaving and get_pp_rank_microbatches, NVIDIA/Megatron-LM
// d98e8a64): in the steady 1F1B phase each forward posts its activation send and the next
// receive (isend/irecv, batch_p2p_comm off) and waits for them only before the next forward, so
// they run under the backward between (pp_pre_forward/pp_post_forward), and the gradient
// transfers under the next forward: a slot exposes max(0, x - b_c) + max(0, x - f_c), chunk
// times f_c = f / v, b_c = b / v. The warm-up forwards and cool-down backwards wait for their
// transfers (overlap_p2p_comm_warmup_flush, default False): W = 2 (p - 1) + (v - 1) N on stage
// 0, N the micro-batch group, up to m v; the p - 1 fill and drain slots stay as without it.
double overlapped_transfer_seconds(const Layout& layout, const PipelineTimes& p, double transfer) {
  const double chunks = static_cast<double>(layout.num_micro_batches() * layout.vpp);
  const double warmup = std::min(
      chunks,
      static_cast<double>(2 * (layout.pp - 1) + (layout.vpp - 1) * microbatch_group_size(layout)));
  const double vpp = static_cast<double>(layout.vpp);
  const double steady_slot = std::max(0.0, transfer - p.max_backward / vpp) +
                             std::max(0.0, transfer - p.max_forward / vpp);
  return 2.0 * transfer * (static_cast<double>(layout.pp - 1) + warmup) +
         (chunks - warmup) * steady_slot;
}

// Stage-to-stage sends on the critical path: one activation and one gradient per slot of the
// schedule, (m v + p - 1) slots, each the collective inventory's send (s b h e, / t with
// sequence parallelism or scatter/gather, the latter plus the receiver's tp all-gather), over
// the slowest stage boundary. Megatron-LM pairs each send with the opposite receive in one
// batched call (p2p_communication.py send_forward_recv_backward: batch_isend_irecv), so a stage
// waits for two transfers per slot. DeepSpeed's pipeline engine issues four blocking single
// transfers per micro-batch on a middle stage, one after another on its compute stream
// (runtime/pipe/schedule.py TrainSchedule: RecvActivation, SendGrad before ForwardPass,
// SendActivation, RecvGrad before BackwardPass; runtime/pipe/p2p.py send/recv assert
// async_op == False: dist.send/recv, dist.broadcast in 2-rank groups in the DeeperSpeed
// eb7f5cff GPT-NeoX-20B trained with): four sends per slot once a stage has two neighbours,
// of which the two receives also all-gather under scatter/gather. Megatron-Core's interleaved
// schedule with overlap_p2p_comm: overlapped_transfer_seconds.
double exposed_transfer_seconds(const models::TransformerConfig& model,
                                const models::ClusterConfig& cluster, const Layout& layout,
                                const PlanOptions& options, const PipelineTimes& p) {
  if (layout.pp <= 1) {
    return 0.0;
  }
  // The gradient's transfer differs only when pipeline_grad_scatter_gather leaves it whole.
  double transfer = 0, gradient = 0;
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    transfer =
        std::max(transfer, pipeline_transfer_seconds(model, cluster, layout, options, stage));
    gradient =
        std::max(gradient, pipeline_transfer_seconds(model, cluster, layout, options, stage, true));
  }
  const double slots =
      static_cast<double>(layout.num_micro_batches()) * static_cast<double>(layout.vpp) +
      static_cast<double>(layout.pp) - 1.0;
  if (options.framework == Framework::kDeepSpeed && layout.pp > 2) {
    // Per slot two activation and two gradient transfers; only the receiving one of each
    // pair gathers.
    const auto gather = [&](bool of_gradient) {
      return pipeline_scatter_gather(layout, options, of_gradient)
                 ? collective_seconds(
                       cluster, CollectiveKind::kAllGather,
                       pipeline_message_bytes(model, cluster, layout, options, of_gradient) *
                           layout.tp,
                       layout.tp, 1)
                 : 0.0;
    };
    return slots * (2.0 * transfer + 2.0 * gradient - gather(false) - gather(true));
  }
  if (options.overlap_p2p_comm && layout.schedule == ScheduleKind::kInterleaved) {
    return overlapped_transfer_seconds(layout, p, transfer);
  }
  return slots * (transfer + gradient);
}

// ZeRO-3 forward gathers of `units` units in `passes` passes, `gather` each, beside a forward of
// `forward_seconds` over the units: each pass's first gather runs beside no compute, each other
// unit's beside the unit before it, one unit ahead (FSDP prefetch).
double forward_gathers_exposed(double units, double passes, double gather, double forward_seconds) {
  return passes * gather + (units - passes) * std::max(0.0, gather - forward_seconds / units);
}

// ZeRO-3 communication one micro-batch leaves exposed on a stage, unit (layer) by unit. FSDP
// prefetches one unit ahead: the forward issues unit i+1's all-gather as unit i computes
// (FSDP2 caps in-flight all-gathers at 2 units, `_max_num_inflight_all_gathers`); the backward
// issues unit i-1's all-gather (backward_prefetch) while unit i+1's reduce-scatter runs, both
// on the same NICs (DeepSpeed: stage3_prefetch_bucket_size, the same one-unit-ahead order).
// What cannot overlap: the first unit's all-gather of the forward and the last unit's
// reduce-scatter of the backward. Per unit: forward max(g, f_u), backward max(g + r, b_u)
// (Rajbhandari et al. 2020, Sec. 7.2.2; PyTorch FSDP notes, docs.pytorch.org, "FSDP
// prefetch"). Without overlap_grad_reduce nothing overlaps.
double zero3_exposed_per_micro_batch(const Layout& layout, const PlanOptions& options,
                                     const StageTimes& t) {
  const double units = std::max(1.0, static_cast<double>(t.dp.num_units));
  const double micro_batches = std::max(1.0, t.dp.num_micro_batches);
  // FSDP's root unit (DpBuckets::chunk_root_param) runs beside no compute: its gather is the
  // forward's first, before the first layer's (the embedding between them is a lookup), and
  // its reduce-scatter the backward's last, after the first layer's. Both are exposed.
  const double root = t.dp.root_gather_seconds + t.dp.root_reduce_seconds;
  // Per unit, the forward's gather and the backward's (DeepSpeed gathers less or more for the
  // backward than for the forward: DpBuckets::chunk_param_backward).
  const double gather = t.dp.forward_gather_seconds / micro_batches / units;
  const double backward_gather = t.dp.backward_gather_seconds / micro_batches / units;
  const double reduce_total = t.dp.gradient_seconds / micro_batches - t.dp.root_reduce_seconds;
  if (!options.overlap_grad_reduce) {
    return units * (gather + backward_gather) + reduce_total + root;
  }
  // Passes per micro-batch and direction: where every backward waits for its reduce-scatters
  // (backward_waits_for_reduce_scatter), each chunk op is a pass of its own, since each model
  // chunk is its own root (Megatron-FSDP: one MegatronFSDP per chunk, training.py
  // wrap_model_chunks_with_ddp; torchtitan: fully_shard per model part): its forward's first
  // gather waits for the op before it and its backward's last reduce-scatter is waited for.
  // meshplan's executor prefetches across ops: one pass a micro-batch.
  const double passes = backward_waits_for_reduce_scatter(options.framework)
                            ? std::min(units, static_cast<double>(layout.vpp))
                            : 1.0;
  // The backward's last reduce-scatter starts when its last gradient is ready and runs beside
  // no compute: FSDP's last unit, DeepSpeed's last reduce_bucket_size bucket (the remainder,
  // flushed after the backward: stage3.py independent_gradient_partition_epilogue), which is
  // the whole reduction when the stage's gradients fit one bucket. The others run beside the
  // remaining units' backward, an even share each.
  const double last_reduce =
      units > passes ? std::min(reduce_total / passes, t.dp.last_gradient_bucket_seconds)
                     : reduce_total / passes;
  const double overlapped_units = units - passes;
  const double reduce_per_unit =
      overlapped_units > 0.0 ? (reduce_total - passes * last_reduce) / overlapped_units : 0.0;
  const double backward_unit = t.backward / units;
  // The backward's first unit is still gathered from the forward (or beside the output layer),
  // except under Megatron-FSDP with pp > 1, where each backward pass gathers it beside no compute
  // (zero3_backward_gathers_start_a_pass).
  const double backward_first_gathers =
      zero3_backward_gathers_start_a_pass(layout, options) ? passes * backward_gather : 0.0;
  return root + forward_gathers_exposed(units, passes, gather, t.forward) + backward_first_gathers +
         overlapped_units * std::max(0.0, backward_gather + reduce_per_unit - backward_unit) +
         passes * last_reduce;
}

// ZeRO-3 under torchtitan's pipelining (zero3_gathers_once_per_step), one step of a stage:
// each chunk gathers its units once, in its first forward, one unit ahead (FSDP2's prefetch:
// the first unit's gather exposed, then max(0, g - f_u) per unit, f_u of that first forward),
// with its root unit first, and reduce-scatters all of them after its last backward, which the
// root's final callback waits for: every reduce-scatter exposed (stage.py
// backward_maybe_with_nosync, run_post_backward).
double zero3_exposed_once_per_step(const Layout& layout, const PlanOptions& options,
                                   const StageTimes& t) {
  const double units = std::max(1.0, static_cast<double>(t.dp.num_units));
  const double gather = t.dp.forward_gather_seconds / units;
  if (!options.overlap_grad_reduce) {
    return t.dp.root_gather_seconds + t.dp.forward_gather_seconds + t.dp.gradient_seconds;
  }
  const double passes = std::min(units, static_cast<double>(layout.vpp));
  return t.dp.root_gather_seconds + forward_gathers_exposed(units, passes, gather, t.forward) +
         t.dp.gradient_seconds;
}

// Exposed DP communication of one stage whose last backward ends `slack` before stage 0's.
// Data-parallel reduction of stage s starts after its last backward. Stage s finishes its
// last backward sum_{j<s} b_j before stage 0 does (the drain runs back to stage 0), and with
// overlap_grad_reduce it also hides behind its own last micro-batch's backward (bucketed
// reduction, Li et al. 2020, PyTorch DDP, Sec. 3.2.3). The ZeRO-1/2 parameter all-gather
// runs from the step's start with overlap_param_gather (exposed_parameter_gather_seconds).
// ZeRO-3 gathers and reduces every micro-batch, unit by unit (zero3_exposed_per_micro_batch).
double exposed_dp_seconds(const Layout& layout, const PlanOptions& options, const StageTimes& t,
                          const PipelineTimes& p, double slack) {
  const double micro_batches = static_cast<double>(layout.num_micro_batches());
  const DpTimes& dp = t.dp;
  const double gather = parameter_gather_overlapped(layout, options)
                            ? dp.exposed_parameter_gather_seconds
                            : dp.parameter_gather_seconds;
  if (layout.zero == 3) {
    if (zero3_gathers_once_per_step(layout, options)) {
      return zero3_exposed_once_per_step(layout, options, t);
    }
    return micro_batches * zero3_exposed_per_micro_batch(layout, options, t);
  }
  if (layout.zero == 2) {
    // Each micro-batch's reduce-scatters run beside that micro-batch's backward.
    if (!options.overlap_grad_reduce) {
      return dp.gradient_seconds + gather;
    }
    if (backward_waits_for_reduce_scatter(options.framework)) {
      // Every backward op ends by waiting for its reduce-scatters, so the part they run past it
      // is exposed, every micro-batch and chunk: Megatron-FSDP optim_grads reduce-scatters after
      // every backward (megatron_fsdp.py, d98e8a64, lines 761-767: grad_reduce_every_bprop) and
      // each model chunk's root post-backward waits for it (lines 879-901; training.py
      // wrap_model_chunks_with_ddp, one MegatronFSDP per chunk); DeepSpeed's ZeRO 2 synchronizes
      // in independent_gradient_partition_epilogue after every backward (stage_1_and_2.py,
      // v0.16.5; its pipeline engine refuses ZeRO 2 with pp > 1).
      // Expert gradients reduce once per step in one call per stage (expert_dp_buckets),
      // complete only when the stage's last backward ends: exposed whole, after the dense ones.
      return micro_batches * dp.reduce_tail_seconds + dp.expert_gradient_seconds + gather;
    }
    // meshplan's executor reduce-scatters per chunk op and lets the next ops run beside it; the
    // stream's queue past the last gradient op is exposed.
    const double vpp = static_cast<double>(layout.vpp);
    const int64_t m = layout.num_micro_batches();
    const bool split = layout.schedule == ScheduleKind::kZbH1;
    const double queue_tail = reduce_queue_tail_seconds(
        m * layout.vpp,
        split ? std::min(t.stage, m)
              : warmup_forward_ops(layout.schedule, layout.pp, layout.vpp, m, layout.pp - 1,
                                   layout.microbatch_group),
        split ? t.weight / vpp : p.max_backward / vpp, p.max_stage / vpp, dp.chunk_reduce_seconds,
        dp.reduce_tail_seconds / vpp);
    return queue_tail + dp.expert_gradient_seconds + gather;  // experts as above
  }
  // The last bucket's gradients are complete only when the backward ends, so it cannot hide
  // behind it (DDP, Li et al. 2020, Sec. 3.2.3: a bucket is reduced once all its gradients
  // are ready); under megatron that is a whole chunk's bucket on every stage but the first.
  // The expert gradients' one call (expert_dp_buckets) is complete only when the last backward
  // is: it follows the dense buckets, exposed whole.
  const double dense_seconds = dp.gradient_seconds - dp.expert_gradient_seconds;
  double own = options.overlap_grad_reduce
                   ? std::max(dense_seconds - t.backward, dp.last_gradient_bucket_seconds) +
                         dp.expert_gradient_seconds
                   : dp.gradient_seconds;
  if (dp.drain_reduce_tail_seconds >= 0) {
    // Interleaved: the chunks' buckets reduce through the cool-down.
    own = dp.drain_reduce_tail_seconds + dp.expert_gradient_seconds;
  }
  return std::max(0.0, own - slack) + gather;
}

// MFU, HFU, TFLOP/s per GPU and tokens/s of a costed step.
void fill_rates(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                double hardware_flops_per_replica, PlanEstimate& estimate) {
  const Layout& layout = estimate.layout;
  const double gpus = static_cast<double>(layout.num_gpus());
  estimate.model_flops_per_step = model_flops_per_step(model, layout.global_batch);
  estimate.hardware_flops_per_step =
      hardware_flops_per_replica * static_cast<double>(layout.tp * layout.cp * layout.dp);
  const double peak = peak_flops_per_second(cluster);
  estimate.mfu = estimate.model_flops_per_step / (estimate.step_time_s * gpus * peak);
  estimate.hfu = estimate.hardware_flops_per_step / (estimate.step_time_s * gpus * peak);
  estimate.model_tflops_per_gpu =
      estimate.model_flops_per_step / (estimate.step_time_s * gpus) / 1e12;
  estimate.tokens_per_s =
      static_cast<double>(layout.global_batch * model.seq_length) / estimate.step_time_s;
}

// Sets peak_memory_bytes; rejects ("memory") a layout whose largest stage exceeds the HBM.
void check_memory(const models::ClusterConfig& cluster, PlanEstimate& estimate) {
  int64_t worst_stage = 0;
  for (const StageEstimate& stage : estimate.stages) {
    if (stage.memory.total_bytes() > estimate.peak_memory_bytes) {
      estimate.peak_memory_bytes = stage.memory.total_bytes();
      worst_stage = stage.stage;
    }
  }
  if (estimate.peak_memory_bytes > cluster.gpu.hbm_bytes) {
    estimate.rejection_code = "memory";
    estimate.rejection_reason = fmt::format(
        "peak memory {:.1f} GiB on stage {} exceeds {:.1f} GiB of GPU memory",
        static_cast<double>(estimate.peak_memory_bytes) / static_cast<double>(kBytesPerGiB),
        worst_stage,
        static_cast<double>(cluster.gpu.hbm_bytes) / static_cast<double>(kBytesPerGiB));
    return;
  }
  estimate.feasible = true;
}

}  // namespace

PlanEstimate estimate_plan_internal(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool with_collectives) {
  check_precision(cluster, options);
  check_overlap_p2p_options(options);
  check_norm_kernel_model(model, options);
  check_attention_sinks_kernel(model, options);
  check_mtp_options(model, options);
  PlanEstimate estimate;
  estimate.layout = layout;
  Validity validity =
      check_layout(model, cluster, layout.num_gpus(), layout, options.allow_tp_across_nodes);
  if (validity.ok()) {
    validity = check_cp_options(model, layout, options);
  }
  if (validity.ok()) {
    validity = check_recompute_options(model, layout, options);
  }
  if (validity.ok()) {
    validity = check_fp8_param_gather(model, layout, options);
  }
  if (validity.ok()) {
    validity = check_moe_a2a_overlap(model, layout, options);
  }
  if (validity.ok()) {
    validity = check_grad_reduce_dtype(layout, options);
  }
  if (validity.ok()) {
    validity = check_moe_dispatcher(model, layout, options);
  }
  if (!validity.ok()) {
    estimate.rejection_code = validity.code;
    estimate.rejection_reason = validity.reason;
    return estimate;
  }
  const double micro_batches = static_cast<double>(layout.num_micro_batches());
  estimate.stages.resize(static_cast<size_t>(layout.pp));
  std::vector<StageTimes> times;  // [pp]
  double hardware_flops_per_replica = 0;
  ChunkCostCache cache;
  for (int64_t s = 0; s < layout.pp; ++s) {
    times.push_back(estimate_stage(model, cluster, layout, options, s,
                                   estimate.stages[static_cast<size_t>(s)], cache));
    hardware_flops_per_replica += times.back().flops * micro_batches;
  }
  const PipelineTimes pipeline_parts = pipeline_times(times);
  // overlap_moe_expert_parallel_comm (pp 1, check_moe_a2a_overlap): Megatron-Core's
  // combined_1f1b_schedule_for_no_pipelining runs the first forward alone, then m - 1 merged
  // pairs (backward i beside forward i + 1), then the last backward alone (schedules.py
  // forward_backward_no_pipelining, d98e8a64): m - 1 merges each save ep_overlap_saved.
  // At pp > 1 (interleaved only, check_moe_a2a_overlap): ep_overlap_interleaved_makespan.
  double ep_overlap_saved =
      layout.pp == 1 ? (micro_batches - 1.0) * times.front().ep_overlap_saved : 0.0;
  const double pipeline = ep_overlap_schedule(layout, options)
                              ? ep_overlap_interleaved_makespan(
                                    layout, times, estimate.stages,
                                    pipeline_makespan(layout, pipeline_parts), &ep_overlap_saved)
                              : pipeline_makespan(layout, pipeline_parts) - ep_overlap_saved;
  StepBreakdown& breakdown = estimate.breakdown;
  breakdown.pipeline_compute_seconds = micro_batches * pipeline_parts.max_stage - ep_overlap_saved;
  breakdown.tp_comm_exposed_seconds = micro_batches * pipeline_parts.max_tp;
  breakdown.bubble_seconds = pipeline - breakdown.pipeline_compute_seconds;
  breakdown.pp_transfer_seconds =
      exposed_transfer_seconds(model, cluster, layout, options, pipeline_parts);
  double slack = 0;  // how much earlier than stage 0 this stage's last backward ends
  for (size_t s = 0; s < times.size(); ++s) {
    breakdown.dp_comm_exposed_seconds =
        std::max(breakdown.dp_comm_exposed_seconds,
                 exposed_dp_seconds(layout, options, times[s], pipeline_parts, slack));
    breakdown.optimizer_seconds =
        std::max(breakdown.optimizer_seconds, estimate.stages[s].optimizer_step_seconds);
    slack += times[s].backward;
  }
  if (embedding_gradient_all_reduced(model, layout)) {
    // Megatron-LM all-reduces the tied embedding's gradient between first and last stage (and,
    // with MTP, the last stage's embedding copy's).
    const int64_t bytes = padded_vocab_size(model, layout.tp, options) / layout.tp *
                          model.hidden_size * element_bytes(cluster);
    breakdown.dp_comm_exposed_seconds += stage_collective_seconds(
        cluster, layout, CollectiveKind::kAllReduce, CommGroup::kEmbedding, 0, bytes);
  }
  estimate.step_time_s = pipeline + breakdown.pp_transfer_seconds +
                         breakdown.dp_comm_exposed_seconds + breakdown.optimizer_seconds;
  fill_rates(model, cluster, hardware_flops_per_replica, estimate);
  if (with_collectives) {
    estimate.collectives = collective_inventory(model, cluster, layout, options);
  }
  check_memory(cluster, estimate);
  return estimate;
}

PlanEstimate estimate_plan(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const Layout& layout,
                           const PlanOptions& options) {
  return estimate_plan_internal(model, cluster, layout, options, true);
}

}  // namespace meshplan::planner
