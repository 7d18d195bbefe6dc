// One layout's estimate: per-stage costs and memory, then the step time of its schedule.

#include <fmt/format.h>

#include <algorithm>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "memory.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/units.h"
#include "model_shape.h"

namespace meshplan::planner {

int64_t group_stride(const Layout& layout, CommGroup group) {
  const bool dp_before_pp = layout.placement == Placement::kTpDpPp;
  switch (group) {
    case CommGroup::kTp:
      return 1;
    case CommGroup::kDp:
      return dp_before_pp ? layout.tp : layout.tp * layout.pp;
    case CommGroup::kPp:
      return dp_before_pp ? layout.tp * layout.dp : layout.tp;
    case CommGroup::kEmbedding:  // first and last stage
      return (dp_before_pp ? layout.tp * layout.dp : layout.tp) *
             std::max<int64_t>(layout.pp - 1, 1);
  }
  return 1;
}

int64_t group_first_rank(const Layout& layout, CommGroup group, int64_t stage, int64_t tp_rank) {
  RankCoords coords;
  coords.tp_rank = group == CommGroup::kTp ? 0 : tp_rank;
  coords.pp_rank = group == CommGroup::kEmbedding ? 0 : stage;
  coords.dp_rank = 0;
  return global_rank(layout, coords);
}

double stage_collective_seconds(const models::ClusterConfig& cluster, const Layout& layout,
                                CollectiveKind kind, CommGroup group, int64_t stage,
                                int64_t message_bytes) {
  const int64_t group_size = group == CommGroup::kTp   ? layout.tp
                             : group == CommGroup::kDp ? layout.dp
                                                       : 2;
  const int64_t stride = group_stride(layout, group);
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

bool pipeline_scatter_gather(const Layout& layout, const PlanOptions& options) {
  return options.scatter_gather_pipeline && layout.tp > 1 && !layout.sequence_parallel;
}

int64_t pipeline_message_bytes(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout,
                               const PlanOptions& options) {
  const int64_t bytes =
      layout.micro_batch * model.seq_length * model.hidden_size * element_bytes(cluster);
  const bool split = layout.sequence_parallel || pipeline_scatter_gather(layout, options);
  return split ? bytes / layout.tp : bytes;
}

double pipeline_transfer_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, int64_t stage) {
  if (layout.pp <= 1) {
    return 0.0;
  }
  const int64_t message = pipeline_message_bytes(model, cluster, layout, options);
  double seconds = stage_collective_seconds(cluster, layout, CollectiveKind::kSendRecv,
                                            CommGroup::kPp, stage, message);
  if (pipeline_scatter_gather(layout, options)) {
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
  double gradient_seconds = 0;          // reduction that may overlap the last backward
  double parameter_gather_seconds = 0;  // all-gather after the optimizer step
};

// Step totals: per-chunk calls run once per (micro-batch, chunk) op; ZeRO-3 gathers before
// both the forward and the backward.
DpTimes dp_times(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                 const Layout& layout, const PlanOptions& options, int64_t stage) {
  const DpBuckets buckets = dp_buckets(model, cluster, layout, options, stage);
  const double chunk_ops = static_cast<double>(layout.num_micro_batches() * layout.vpp);
  DpTimes times;
  times.gradient_seconds =
      total_seconds(buckets.step_grad) + chunk_ops * total_seconds(buckets.chunk_grad);
  times.parameter_gather_seconds =
      total_seconds(buckets.step_param) + 2.0 * chunk_ops * total_seconds(buckets.chunk_param);
  return times;
}

}  // namespace

PlanEstimate estimate_plan_internal(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool with_collectives) {
  PlanEstimate estimate;
  estimate.layout = layout;
  const Validity validity =
      check_layout(model, cluster, layout.num_gpus(), layout, options.allow_tp_across_nodes);
  if (!validity.ok()) {
    estimate.rejection_code = validity.code;
    estimate.rejection_reason = validity.reason;
    return estimate;
  }
  const int64_t m = layout.num_micro_batches();
  const double micro_batches = static_cast<double>(m);
  const double pp = static_cast<double>(layout.pp);
  const double vpp = static_cast<double>(layout.vpp);

  double sum_stage = 0, max_stage = 0, max_forward_backward_minus_weight = 0, max_tp = 0;
  double max_forward_backward_input = 0, max_weight = 0;  // F + B and W of split schedules
  double hardware_flops_per_rank_max = 0, hardware_flops_total = 0;
  estimate.stages.resize(static_cast<size_t>(layout.pp));
  std::vector<DpTimes> dp_per_stage;  // [pp]
  for (int64_t s = 0; s < layout.pp; ++s) {
    StageEstimate& stage = estimate.stages[static_cast<size_t>(s)];
    stage.stage = s;
    double forward = 0, backward = 0, weight = 0, tp = 0, flops = 0;
    for (int64_t c = 0; c < layout.vpp; ++c) {
      stage.chunks.push_back(chunk_cost(model, cluster, layout, options, s, c));
      const ChunkCost& chunk = stage.chunks.back();
      forward += chunk.forward_seconds();
      backward += chunk.backward_seconds();
      weight += chunk.backward_weight_compute_seconds;
      tp += chunk.forward_tp_comm_seconds + chunk.backward_tp_comm_seconds;
      flops += static_cast<double>(chunk.forward_flops + chunk.backward_flops);
    }
    sum_stage += forward + backward;
    if (forward + backward > max_stage) {
      max_stage = forward + backward;
      max_tp = tp;
    }
    max_forward_backward_minus_weight =
        std::max(max_forward_backward_minus_weight, forward + backward - 2.0 * weight);
    max_forward_backward_input = std::max(max_forward_backward_input, forward + backward - weight);
    max_weight = std::max(max_weight, weight);
    hardware_flops_per_rank_max = std::max(hardware_flops_per_rank_max, flops);
    hardware_flops_total += flops * micro_batches;
    const InFlight in_flight = peak_in_flight(layout.schedule, layout.pp, layout.vpp, m, s);
    stage.peak_in_flight_micro_batches = in_flight.all_chunks;
    stage.memory = stage_memory(model, cluster, layout, options, s, in_flight);
    stage.num_parameters = stage_parameter_count(model, layout, s);
    const int64_t updated = zero_shard_count(layout, stage.num_parameters);
    stage.optimizer_step_seconds = optimizer_step_seconds(cluster, updated);
    const DpTimes& dp = dp_per_stage.emplace_back(dp_times(model, cluster, layout, options, s));
    stage.dp_grad_sync_seconds = dp.gradient_seconds + dp.parameter_gather_seconds;
  }

  // Pipeline makespan of the schedule (f_s + b_s: one micro-batch through all of stage s).
  double pipeline = 0;
  switch (layout.schedule) {
    case ScheduleKind::kGpipe:
    case ScheduleKind::kOneFOneB:
      // Flow shop of identical jobs: fill and drain through every stage, then the slowest
      // stage paces the other m - 1; (m + p - 1)(f + b) for equal stages, so the bubble is
      // (p - 1)/(m + p - 1) (Narayanan et al. 2021, Sec. 2.2.1).
      pipeline = sum_stage + (micro_batches - 1.0) * max_stage;
      break;
    case ScheduleKind::kInterleaved:
      // Bubble shrinks by v: (m v + p - 1) chunk times (ibid. Sec. 2.2.2).
      pipeline = (micro_batches * vpp + pp - 1.0) * max_stage / vpp;
      break;
    case ScheduleKind::kZbH1:
      // ZB-H1 fills the drain with deferred weight-gradient work: bubble (p - 1)(F + B - W)
      // instead of (p - 1)(F + B + W) (Qi et al. 2023, Sec. 3.1).
      // With m < p there is no steady state: F and B run through the pipeline and back, then
      // the last W, (m + p - 1)(F + B) + W; the larger of the two holds for every m.
      pipeline =
          std::max(micro_batches * max_stage + (pp - 1.0) * max_forward_backward_minus_weight,
                   (micro_batches + pp - 1.0) * max_forward_backward_input + max_weight);
      break;
  }
  StepBreakdown& breakdown = estimate.breakdown;
  breakdown.pipeline_compute_seconds = micro_batches * max_stage;
  breakdown.tp_comm_exposed_seconds = micro_batches * max_tp;
  breakdown.bubble_seconds = pipeline - breakdown.pipeline_compute_seconds;
  if (layout.pp > 1) {
    // Stage-to-stage sends on the critical path: one activation and one gradient per slot of
    // the schedule, (m v + p - 1) slots, each the collective inventory's send (s b h e, / t with
    // sequence parallelism or scatter/gather, the latter plus the receiver's tp all-gather),
    // over the slowest stage boundary.
    double transfer = 0;
    for (int64_t stage = 0; stage < layout.pp; ++stage) {
      transfer =
          std::max(transfer, pipeline_transfer_seconds(model, cluster, layout, options, stage));
    }
    breakdown.pp_transfer_seconds = 2.0 * (micro_batches * vpp + pp - 1.0) * transfer;
  }
  // Data-parallel reduction of stage s starts after its last backward. Stage s finishes its
  // last backward sum_{j<s} b_j before stage 0 does (the drain runs back to stage 0), and with
  // overlap_grad_reduce it also hides behind its own last micro-batch's backward (bucketed
  // reduction, Li et al. 2020, PyTorch DDP, Sec. 3.2.3). The ZeRO-1/2 parameter all-gather
  // hides behind the next step's first forward with overlap_param_gather. ZeRO-3 gathers and
  // reduces every micro-batch; prefetching hides them behind that micro-batch's compute at
  // best (Rajbhandari et al. 2020, Sec. 7.2.2), so only the excess is exposed.
  double slack = 0;
  for (const StageEstimate& stage : estimate.stages) {
    const DpTimes& dp = dp_per_stage[static_cast<size_t>(stage.stage)];
    double forward = 0, backward = 0;
    for (const ChunkCost& chunk : stage.chunks) {
      forward += chunk.forward_seconds();
      backward += chunk.backward_seconds();
    }
    double exposed = 0;
    if (layout.zero == 3) {
      const double per_micro_batch =
          (dp.gradient_seconds + dp.parameter_gather_seconds) / micro_batches;
      const double hidden = options.overlap_grad_reduce ? forward + backward : 0.0;
      exposed = micro_batches * std::max(0.0, per_micro_batch - hidden);
    } else if (layout.zero == 2) {
      // Each micro-batch's reduce-scatter hides behind that micro-batch's backward.
      const double per_micro_batch = dp.gradient_seconds / micro_batches;
      const double hidden = options.overlap_grad_reduce ? backward : 0.0;
      const double gather = options.overlap_param_gather
                                ? std::max(0.0, dp.parameter_gather_seconds - forward)
                                : dp.parameter_gather_seconds;
      exposed = micro_batches * std::max(0.0, per_micro_batch - hidden) + gather;
    } else {
      const double hidden = slack + (options.overlap_grad_reduce ? backward : 0.0);
      const double gather = options.overlap_param_gather
                                ? std::max(0.0, dp.parameter_gather_seconds - forward)
                                : dp.parameter_gather_seconds;
      exposed = std::max(0.0, dp.gradient_seconds - hidden) + gather;
    }
    breakdown.dp_comm_exposed_seconds = std::max(breakdown.dp_comm_exposed_seconds, exposed);
    breakdown.optimizer_seconds =
        std::max(breakdown.optimizer_seconds, stage.optimizer_step_seconds);
    slack += backward;
  }
  if (model.tied_embeddings && layout.pp > 1) {
    // Megatron-LM all-reduces the tied embedding's gradient between first and last stage.
    const int64_t bytes = padded_vocab_size(model, layout.tp) / layout.tp * model.hidden_size *
                          element_bytes(cluster);
    breakdown.dp_comm_exposed_seconds += stage_collective_seconds(
        cluster, layout, CollectiveKind::kAllReduce, CommGroup::kEmbedding, 0, bytes);
  }
  estimate.step_time_s = pipeline + breakdown.pp_transfer_seconds +
                         breakdown.dp_comm_exposed_seconds + breakdown.optimizer_seconds;

  const double gpus = static_cast<double>(layout.num_gpus());
  estimate.model_flops_per_step = model_flops_per_step(model, layout.global_batch);
  estimate.hardware_flops_per_step =
      hardware_flops_total * static_cast<double>(layout.tp) * static_cast<double>(layout.dp);
  const double peak = peak_flops_per_second(cluster);
  estimate.mfu = estimate.model_flops_per_step / (estimate.step_time_s * gpus * peak);
  estimate.hfu = estimate.hardware_flops_per_step / (estimate.step_time_s * gpus * peak);
  estimate.model_tflops_per_gpu =
      estimate.model_flops_per_step / (estimate.step_time_s * gpus) / 1e12;
  estimate.tokens_per_s =
      static_cast<double>(layout.global_batch * model.seq_length) / estimate.step_time_s;

  int64_t worst_stage = 0;
  for (const StageEstimate& stage : estimate.stages) {
    if (stage.memory.total_bytes() > estimate.peak_memory_bytes) {
      estimate.peak_memory_bytes = stage.memory.total_bytes();
      worst_stage = stage.stage;
    }
  }
  if (with_collectives) {
    estimate.collectives = collective_inventory(model, cluster, layout, options);
  }
  if (estimate.peak_memory_bytes > cluster.gpu.hbm_bytes) {
    estimate.rejection_code = "memory";
    estimate.rejection_reason = fmt::format(
        "peak memory {:.1f} GiB on stage {} exceeds {:.1f} GiB of GPU memory",
        static_cast<double>(estimate.peak_memory_bytes) / static_cast<double>(kBytesPerGiB),
        worst_stage,
        static_cast<double>(cluster.gpu.hbm_bytes) / static_cast<double>(kBytesPerGiB));
    return estimate;
  }
  estimate.feasible = true;
  return estimate;
}

PlanEstimate estimate_plan(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const Layout& layout,
                           const PlanOptions& options) {
  return estimate_plan_internal(model, cluster, layout, options, true);
}

}  // namespace meshplan::planner
