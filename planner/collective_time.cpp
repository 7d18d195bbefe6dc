// Alpha-beta time of ring collectives, tiered by where the group's ranks sit.

#include <algorithm>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

namespace {

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
      // Pairwise exchange: each rank sends (n-1)/n of its buffer, n-1 messages (nccl-tests
      // alltoall.cu: busbw = algbw (n-1)/n).
      return (n - 1.0) / n * message_bytes / link.bytes_per_second +
             (n - 1.0) * link.latency_seconds;
  }
  return 0.0;
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
  if (kind == CollectiveKind::kAllToAll) {
    // An all-to-all whose group spans nodes is costed on the NIC tier: every rank's NIC
    // carries its traffic at once, and the slowest (inter-node) share sets the pace
    // (conservative: the intra-node share would move over NVLink in parallel).
    return ring_seconds(kind, bytes, n, inter);
  }
  const int64_t members_per_full_node = gpus_per_node / stride;
  const bool fills_whole_nodes = stride < gpus_per_node && first_rank % gpus_per_node < stride &&
                                 group_size % members_per_full_node == 0;
  if (!fills_whole_nodes) {
    // One member per node, or a group that straddles node boundaries unevenly: a flat ring
    // whose slowest links are the NICs.
    return ring_seconds(kind, bytes, n, inter);
  }
  // Hierarchical (two-tier) collective over whole nodes: the intra-node tier works on the
  // whole buffer, the inter-node tier on 1/local of it, with `local` NICs in parallel (one per
  // GPU).
  const double local = static_cast<double>(members_per_full_node);
  const double nodes = n / local;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return ring_seconds(CollectiveKind::kReduceScatter, bytes, local, intra) +
             ring_seconds(CollectiveKind::kAllReduce, bytes / local, nodes, inter) +
             ring_seconds(CollectiveKind::kAllGather, bytes, local, intra);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return ring_seconds(kind, bytes / local, nodes, inter) +
             ring_seconds(kind, bytes, local, intra);
    case CollectiveKind::kSendRecv:
    case CollectiveKind::kAllToAll:
      break;
  }
  return 0.0;
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
  }
  return "?";
}

}  // namespace meshplan::planner
