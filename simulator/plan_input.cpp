// From a plan to a SimulationInput: every duration is the planner's. Chunk costs and the
// optimizer step come from estimate_plan, each send from planner::pipeline_transfer_seconds,
// the embedding sync from the collective inventory; DP buckets are costed by
// planner::collective_seconds on each bucket's bytes, over the nodes the stage's groups touch.
// ZeRO-3's inventory lists the whole stage gathered 2m times and reduce-scattered m times per
// step; the replay does it per op, a chunk's share (1/vpp) before each F and B and after each
// gradient-producing op: the same 2m and m stage volumes.

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "meshplan/errors.h"
#include "meshplan/simulator.h"

namespace meshplan::simulator {
namespace {

using planner::CollectiveKind;
using planner::CommGroup;

// The ranks whose data-parallel groups a stage's cost is taken from: like the planner's
// per-stage collective times, the slower of the groups of its first and last tp rank (they sit
// at different offsets in a node, so one may cross a node boundary the other does not).
struct DpGroups {
  const models::ClusterConfig& cluster;
  const planner::Layout& layout;
  int64_t stage;
  double seconds(CollectiveKind kind, int64_t bytes) const {
    const int64_t stride = planner::global_rank(layout, planner::RankCoords{0, 1, stage}) -
                           planner::global_rank(layout, planner::RankCoords{0, 0, stage});
    double slowest = 0;
    for (int64_t tp_rank : {int64_t{0}, layout.tp - 1}) {
      const int64_t first = planner::global_rank(layout, planner::RankCoords{tp_rank, 0, stage});
      slowest = std::max(
          slowest, planner::collective_seconds(cluster, kind, bytes, layout.dp, stride, first));
    }
    return slowest;
  }
};

// Buckets of at most `bucket_bytes`, the last one holding the remainder, as DDP fills them.
std::vector<Bucket> buckets(const DpGroups& groups, CollectiveKind kind, int64_t total_bytes,
                            int64_t bucket_bytes) {
  std::vector<Bucket> out;
  for (int64_t offset = 0; offset < total_bytes; offset += bucket_bytes) {
    const int64_t bytes = std::min(bucket_bytes, total_bytes - offset);
    out.push_back(Bucket{bytes, groups.seconds(kind, bytes)});
  }
  return out;
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
                                 const SimulationOptions& options) {
  const planner::Layout& layout = plan.layout;
  if (options.bucket_bytes <= 0) {
    throw InputError(
        fmt::format("simulate: bucket_bytes: must be positive ({})", options.bucket_bytes));
  }
  if (static_cast<int64_t>(estimate.stages.size()) != layout.pp) {
    throw InputError(fmt::format("simulate: layout: the planner has no stage costs ({})",
                                 estimate.rejection_reason));
  }
  SimulationInput input;
  input.layout = layout;
  input.schedule = planner::generate_schedule(layout.schedule, layout.pp, layout.vpp,
                                              layout.num_micro_batches());
  input.gpus_per_node = plan.cluster.gpus_per_node;
  input.overlap_tp_comm = plan.options.overlap_tp_comm;
  input.overlap_grad_reduce = plan.options.overlap_grad_reduce;
  input.overlap_param_gather = plan.options.overlap_param_gather;
  input.all_ranks = options.all_ranks;
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
        break;
      case CommGroup::kEmbedding:
        costs.has_embedding_sync = true;
        costs.embedding_sync_seconds = traffic.seconds_per_call * traffic.calls_per_step;
        break;
      case CommGroup::kDp: {
        const bool gather = traffic.kind == CollectiveKind::kAllGather;
        const DpGroups groups{plan.cluster, layout, traffic.stage};
        // ZeRO-2 reduce-scatters per op like ZeRO-3 but gathers once a step like ZeRO-1.
        if (layout.zero == 3 || (layout.zero == 2 && !gather)) {
          // Per call the whole stage's parameters (gradients); per op one chunk's share, in
          // one bucket per layer: ZeRO-3 gathers and reduces module by module (Rajbhandari et
          // al. 2020, Sec. 7.2.2; FSDP wraps each transformer block), not in DDP's buckets.
          // ZeRO-2 instead reduces each op's gradients in DDP-sized buckets (DeepSpeed's
          // reduce_bucket_size), as the planner costs one reduce-scatter per micro-batch.
          const int64_t chunk_bytes = traffic.message_bytes / layout.vpp;
          const int64_t layers = std::max<int64_t>(1, costs.chunks.front().num_layers);
          const int64_t bucket =
              layout.zero == 3 ? (chunk_bytes + layers - 1) / layers : options.bucket_bytes;
          auto& list = gather ? costs.chunk_param_buckets : costs.chunk_grad_buckets;
          list = buckets(groups, traffic.kind, chunk_bytes, bucket);
        } else {
          auto& list = gather ? costs.param_buckets : costs.grad_buckets;
          list = buckets(groups, traffic.kind, traffic.total_message_bytes(), options.bucket_bytes);
        }
        break;
      }
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
  SimulationResult result = simulate(simulation_input(simulated, estimate, options));
  result.model_name = plan.model.name;
  result.cluster_name = plan.cluster.name;
  result.options = options;
  result.analytic_step_time_s = estimate.step_time_s;
  result.planner_rejection = estimate.rejection_reason;
  return result;
}

}  // namespace meshplan::simulator
