// From a plan to a SimulationInput: every duration is the planner's. Chunk costs and the
// optimizer step come from estimate_plan, each send from planner::pipeline_transfer_seconds,
// the embedding sync from the collective inventory, the data-parallel buckets from
// planner::dp_buckets (ZeRO-2/3's per-chunk lists run after each gradient-producing op, ZeRO-3's
// gathers before each F and B: the inventory's m and 2m stage volumes per step).

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/simulator.h"

namespace meshplan::simulator {
namespace {

using planner::CollectiveKind;
using planner::CommGroup;

// The planner's bucket runs as the replay's calls: bytes and the time of each call alone.
// One bucket per call, in the order the calls are issued (planner::calls_in_order: DeepSpeed's
// module gathers layer by layer).
std::vector<Bucket> replay_buckets(const std::vector<planner::DpBucket>& buckets) {
  std::vector<Bucket> out;
  for (const planner::DpBucket& call : planner::calls_in_order(buckets)) {
    out.push_back(Bucket{call.bytes, call.seconds});
  }
  return out;
}

bool same_buckets(const std::vector<Bucket>& a, const std::vector<Bucket>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Bucket& x, const Bucket& y) {
    return x.bytes == y.bytes && x.seconds == y.seconds;
  });
}

// A cluster whose links are infinitely fast with no latency: every collective_seconds is 0.
models::ClusterConfig without_communication(models::ClusterConfig cluster) {
  const double infinite = std::numeric_limits<double>::infinity();
  cluster.intra_node_bytes_per_second = infinite;
  cluster.inter_node_bytes_per_second_per_gpu = infinite;
  cluster.intra_node_latency_seconds = 0;
  cluster.inter_node_latency_seconds = 0;
  return cluster;
}

}  // namespace

SimulationInput simulation_input(const planner::Plan& plan, const planner::PlanEstimate& estimate,
                                 const SimulationOptions& options, const std::string& source) {
  const planner::Layout& layout = plan.layout;
  if (options.bucket_bytes <= 0) {
    throw InputError(
        fmt::format("{}: bucket_bytes: must be positive ({})", source, options.bucket_bytes));
  }
  if (static_cast<int64_t>(estimate.stages.size()) != layout.pp) {
    throw InputError(fmt::format("{}: layout: the planner has no stage costs ({})", source,
                                 estimate.rejection_reason));
  }
  SimulationInput input;
  input.source = source;
  input.layout = layout;
  input.schedule = planner::generate_schedule(
      layout.schedule, layout.pp, layout.vpp, layout.num_micro_batches(), true,
      layout.microbatch_group, planner::ep_overlap_schedule(layout, plan.options));
  input.gpus_per_node = plan.cluster.gpus_per_node;
  input.overlap_tp_comm = plan.options.overlap_tp_comm;
  input.overlap_grad_reduce = plan.options.overlap_grad_reduce;
  input.overlap_param_gather = planner::parameter_gather_overlapped(layout, plan.options);
  // Megatron sends replay as buffered isends whose receive is waited for where the op list
  // needs it: Megatron-Core's overlap_p2p_comm in the steady state (schedules.py, d98e8a64).
  // With it off the replay stays so (the planner's exposed count is the bound; README,
  // "Agreement with the planner"); DeepSpeed's pipeline engine blocks.
  input.blocking_sends = plan.options.framework == planner::Framework::kDeepSpeed;
  input.late_receives =
      plan.options.framework == planner::Framework::kFsdp ||
      plan.options.framework == planner::Framework::kMeshplan ||
      (plan.options.framework == planner::Framework::kMegatron &&
       layout.schedule == planner::ScheduleKind::kInterleaved && !plan.options.overlap_p2p_comm);
  // Megatron-Core's schedule without interleaving (1F1B; GPipe's op lists pair the same way).
  // Its interleaved schedule without overlap_p2p_comm pairs its calls differently from the
  // generator's op lists (send_forward_backward_recv_forward_backward in the steady state):
  // replayed with late receives and buffered sends (late_receives above).
  input.paired_p2p = plan.options.framework == planner::Framework::kMegatron &&
                     (layout.schedule == planner::ScheduleKind::kOneFOneB ||
                      layout.schedule == planner::ScheduleKind::kGpipe);
  input.sharded_pass_boundaries =
      planner::backward_waits_for_reduce_scatter(plan.options.framework);
  input.zero3_gathers_once_per_step = planner::zero3_gathers_once_per_step(layout, plan.options);
  input.zero3_backward_pass_starts =
      planner::zero3_backward_gathers_start_a_pass(layout, plan.options);
  input.all_ranks = options.all_ranks;
  input.with_trace = options.with_trace;
  for (const planner::StageEstimate& stage : estimate.stages) {
    StageCosts costs;
    costs.chunks = stage.chunks;
    costs.optimizer_step_seconds = stage.optimizer_step_seconds;
    input.stages.push_back(costs);
  }
  for (const planner::CollectiveTraffic& traffic : estimate.collectives) {
    StageCosts& costs = input.stages.at(static_cast<size_t>(traffic.stage));
    switch (traffic.group) {
      case CommGroup::kTp:
        break;  // inside the chunk costs: their exposed part is ChunkCost's tp_comm seconds
      case CommGroup::kPp:
        costs.transfer_seconds = planner::pipeline_transfer_seconds(
            plan.model, plan.cluster, layout, plan.options, traffic.stage);
        costs.gradient_transfer_seconds = planner::pipeline_transfer_seconds(
            plan.model, plan.cluster, layout, plan.options, traffic.stage, true);
        break;
      case CommGroup::kEmbedding:
        costs.has_embedding_sync = true;
        costs.embedding_sync_seconds = traffic.seconds_per_call * traffic.calls_per_step;
        break;
      case CommGroup::kDp:
      case CommGroup::kDpShard:
      case CommGroup::kDpReplicate:
        break;  // from planner::dp_buckets below
      case CommGroup::kCp:
        break;  // inside the chunk costs: their exposed part is ChunkCost's cp_comm seconds
      case CommGroup::kEp:
        break;  // MoE all-to-alls: inside the chunk costs (ChunkCost's ep_comm seconds)
      case CommGroup::kExpertDp:
        // From planner::expert_dp_buckets below, once per step with the dp buckets (under
        // ZeRO 2 beside the dense gradients' per-op reduce-scatters; the planner refuses MoE
        // plans under ZeRO 3, moe_zero3).
        break;
    }
  }
  planner::PlanOptions plan_options = plan.options;
  plan_options.bucket_bytes = options.bucket_bytes;
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    const planner::DpBuckets dp =
        planner::dp_buckets(plan.model, plan.cluster, layout, plan_options, stage);
    StageCosts& costs = input.stages[static_cast<size_t>(stage)];
    costs.grad_buckets = replay_buckets(dp.step_grad);
    costs.param_buckets = replay_buckets(dp.step_param);
    costs.chunk_grad_buckets = replay_buckets(dp.chunk_grad);
    costs.chunk_param_buckets = replay_buckets(dp.chunk_param);
    std::vector<Bucket> backward_gathers = replay_buckets(dp.chunk_param_backward);
    if (!same_buckets(backward_gathers, costs.chunk_param_buckets)) {
      costs.chunk_param_backward_buckets = std::move(backward_gathers);
    }
    costs.chunk_root_grad_buckets = replay_buckets(dp.chunk_root_grad);
    costs.chunk_root_param_buckets = replay_buckets(dp.chunk_root_param);
    // Expert gradients over the expert data-parallel group: after the dense buckets, on the
    // same stream (the planner adds their times to the stage's gradient and gather times).
    const planner::DpBuckets experts =
        planner::expert_dp_buckets(plan.model, plan.cluster, layout, plan_options, stage);
    for (const Bucket& bucket : replay_buckets(experts.step_grad)) {
      costs.grad_buckets.push_back(bucket);
    }
    for (const Bucket& bucket : replay_buckets(experts.step_param)) {
      costs.param_buckets.push_back(bucket);
    }
  }
  return input;
}

SimulationResult simulate_plan(const planner::Plan& plan, const SimulationOptions& options,
                               const std::string& source) {
  planner::Plan simulated = plan;
  // The closed form and the replay bucket the same way.
  simulated.options.bucket_bytes = options.bucket_bytes;
  if (options.zero_communication) {
    simulated.cluster = without_communication(plan.cluster);
  }
  const planner::PlanEstimate estimate = planner::estimate_plan(
      simulated.model, simulated.cluster, simulated.layout, simulated.options);
  if (static_cast<int64_t>(estimate.stages.size()) != plan.layout.pp) {
    throw InputError(fmt::format("{}: layout: {} ({})", source, estimate.rejection_reason,
                                 estimate.rejection_code));
  }
  SimulationResult result = simulate(simulation_input(simulated, estimate, options, source));
  result.model_name = plan.model.name;
  result.cluster_name = plan.cluster.name;
  result.options = options;
  result.plan_options = simulated.options;
  result.analytic_step_time_s = estimate.step_time_s;
  result.planner_rejection = estimate.rejection_reason;
  return result;
}

}  // namespace meshplan::simulator
