// Alpha-beta time of ring collectives, tiered by where the group's ranks sit.

#include <algorithm>
#include <cmath>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

namespace {

// all_gather_perf at 2 GiB on 32 nodes x 8 H100 with 8 x 400 Gb/s NICs per node reached about
// 200 GB/s bus bandwidth, against 340 GB/s for all_reduce_perf with the same flags
// (NVIDIA/nccl#1218, 2024): 200 / (8 x 50 GB/s) = 0.5 of the node's NIC line rate. Taken for
// every GPU type (no comparable A100 figure published).
constexpr double kRingNetBusEfficiency = 0.5;

struct Link {
  double bytes_per_second;
  double latency_seconds;
};

// Ring algorithms (Patarasuk & Yuan 2009; nccl-tests doc/PERFORMANCE.md): each rank sends
// 2(n-1)/n of the buffer for an all-reduce, (n-1)/n for an all-gather or reduce-scatter,
// in 2(n-1) or (n-1) latency-bound steps.
double ring_seconds(CollectiveKind kind, double message_bytes, double n, const Link& link) {
  if (n <= 1) {
    return 0.0;
  }
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 2.0 * (n - 1.0) / n * message_bytes / link.bytes_per_second +
             2.0 * (n - 1.0) * link.latency_seconds;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return (n - 1.0) / n * message_bytes / link.bytes_per_second +
             (n - 1.0) * link.latency_seconds;
    case CollectiveKind::kSendRecv:
      return message_bytes / link.bytes_per_second + link.latency_seconds;
    case CollectiveKind::kAllToAll:
      // n - 1 pairwise exchanges of 1/n of the buffer each (nccl-tests src/alltoall.cu:
      // busbw = algbw (n-1)/n), as NCCL groups n - 1 sends and receives.
      return (n - 1.0) / n * message_bytes / link.bytes_per_second +
             (n - 1.0) * link.latency_seconds;
  }
  return 0.0;
}

// An all-gather or reduce-scatter whose group spans nodes runs as one flat ring over all n
// ranks: NCCL has no tree for them ("Implementing a Tree algorithm for allgather/reducescatter
// is very hard", S. Jeaugey, NVIDIA/nccl#1473; its PAT algorithm supports one GPU per node
// only). Latency, as NCCL's own model counts it (src/graph/tuning.cc, ncclTopoTuneModel):
// n - 1 steps, of which nodes - 1 cross the network and n - nodes stay on NVLink. Bandwidth:
// each of the ring's channels leaves a node through one NIC, so a rank moves (n-1)/n S at the
// bus bandwidth min(NVLink, local x NIC), `local` = group members per node sharing the node's
// NICs. A ring with one member per node drives its own NIC at collective_efficiency like
// any other NIC-bound ring; with several members per node, nccl-tests reach
// kRingNetBusEfficiency of the node's NIC line rate at scale.
double flat_ring_seconds(const models::ClusterConfig& cluster, double message_bytes,
                         int64_t group_size, int64_t members_per_node) {
  const double n = static_cast<double>(group_size);
  const double nodes = std::ceil(n / static_cast<double>(members_per_node));
  const double efficiency = cluster.efficiency.collective_efficiency;
  const double net_efficiency = members_per_node > 1 ? kRingNetBusEfficiency : efficiency;
  const double bus_bytes_per_second =
      std::min(cluster.intra_node_bytes_per_second * efficiency,
               static_cast<double>(members_per_node) * cluster.inter_node_bytes_per_second_per_gpu *
                   net_efficiency);
  return (n - 1.0) / n * message_bytes / bus_bytes_per_second +
         (n - nodes) * cluster.intra_node_latency_seconds +
         (nodes - 1.0) * cluster.inter_node_latency_seconds;
}

}  // namespace

double collective_seconds(const models::ClusterConfig& cluster, CollectiveKind kind,
                          int64_t message_bytes, int64_t group_size, int64_t stride,
                          int64_t first_rank) {
  if (message_bytes <= 0 || (group_size <= 1 && kind != CollectiveKind::kSendRecv)) {
    return 0.0;
  }
  const double efficiency = cluster.efficiency.collective_efficiency;
  const Link intra{cluster.intra_node_bytes_per_second * efficiency,
                   cluster.intra_node_latency_seconds};
  const Link inter{cluster.inter_node_bytes_per_second_per_gpu * efficiency,
                   cluster.inter_node_latency_seconds};
  const double bytes = static_cast<double>(message_bytes);
  const int64_t gpus_per_node = cluster.gpus_per_node;
  const int64_t first_node = first_rank / gpus_per_node;
  if (kind == CollectiveKind::kSendRecv) {
    const bool same_node = (first_rank + stride) / gpus_per_node == first_node;
    return ring_seconds(kind, bytes, 2, same_node ? intra : inter);
  }
  // Nodes the group touches: its members are first_rank + k stride, k < group_size.
  const int64_t last_node = (first_rank + stride * (group_size - 1)) / gpus_per_node;
  const double n = static_cast<double>(group_size);
  if (last_node == first_node) {
    return ring_seconds(kind, bytes, n, intra);
  }
  const int64_t members_per_full_node = gpus_per_node / stride;
  const bool fills_whole_nodes = stride < gpus_per_node && first_rank % gpus_per_node < stride &&
                                 group_size % members_per_full_node == 0;
  if (kind == CollectiveKind::kAllToAll && fills_whole_nodes) {
    // Of each rank's buffer, (local - 1)/n goes to its node's other members over NVLink and
    // (n - local)/n through its own NIC; both at once, the slower one paces it.
    const double local = static_cast<double>(members_per_full_node);
    return std::max(
        (local - 1.0) / n * bytes / intra.bytes_per_second + (local - 1.0) * intra.latency_seconds,
        (n - local) / n * bytes / inter.bytes_per_second + (n - local) * inter.latency_seconds);
  }
  if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kReduceScatter) {
    return flat_ring_seconds(cluster, bytes, group_size,
                             fills_whole_nodes ? members_per_full_node : 1);
  }
  if (!fills_whole_nodes) {
    // One member per node, or a group that straddles node boundaries unevenly: a flat ring
    // whose slowest links are the NICs.
    return ring_seconds(kind, bytes, n, inter);
  }
  // All-reduce over whole nodes, two tiers (NCCL picks its tree or ring across nodes for
  // all-reduce only): the intra-node tier works on the whole buffer, the inter-node tier on
  // 1/local of it, with `local` NICs in parallel (one per GPU).
  const double local = static_cast<double>(members_per_full_node);
  const double nodes = n / local;
  return ring_seconds(CollectiveKind::kReduceScatter, bytes, local, intra) +
         ring_seconds(CollectiveKind::kAllReduce, bytes / local, nodes, inter) +
         ring_seconds(CollectiveKind::kAllGather, bytes, local, intra);
}

std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kSendRecv:
      return "send_recv";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

std::string to_string(CommGroup group) {
  switch (group) {
    case CommGroup::kTp:
      return "tp";
    case CommGroup::kPp:
      return "pp";
    case CommGroup::kDp:
      return "dp";
    case CommGroup::kEmbedding:
      return "embedding";
    case CommGroup::kEp:
      return "ep";
    case CommGroup::kExpertDp:
      return "expert_dp";
    case CommGroup::kCp:
      return "cp";
    case CommGroup::kDpShard:
      return "dp_shard";
    case CommGroup::kDpReplicate:
      return "dp_replicate";
  }
  return "?";
}

}  // namespace meshplan::planner
