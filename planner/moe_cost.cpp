// Mixture-of-experts communication volumes: the all-to-all token dispatch and combine over the
// expert-parallel group, and the routed tokens' tensor-parallel gather.
//
// Megatron-Core's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
// MoEAlltoAllTokenDispatcher): each rank permutes its local tokens by expert, sends each token
// to the ep rank holding each of its k experts (dispatch all-to-all over the ep group, ep ranks
// etp apart), gathers the received tokens over the expert tensor-parallel group (expt_tp, etp
// ranks; dispatch_postprocess) when etp > 1, runs its E / ep experts, then reverses the path
// (reduce-scatter over etp in combine_preprocess, combine all-to-all). Dropless (no capacity
// factor): with balanced routing a rank sends and receives T k / sp tokens of h elements per
// all-to-all, (ep - 1) / ep of them to other ranks, whatever etp.

#include <algorithm>
#include <map>

#include "estimate_internal.h"
#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

int64_t moe_all_to_all_bytes(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout) {
  const int64_t sequence_split = layout.sequence_parallel ? layout.tp : 1;
  const int64_t tokens = rank_micro_batch_tokens(model, layout) / sequence_split;
  return tokens * model.experts_per_token * model.hidden_size * element_bytes(cluster);
}

int64_t moe_tp_gather_bytes(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout) {
  const int64_t sequence_split = layout.sequence_parallel ? layout.tp : 1;
  const int64_t tokens =
      rank_micro_batch_tokens(model, layout) * expert_tensor_parallel(layout) / sequence_split;
  return tokens * model.experts_per_token * model.hidden_size * element_bytes(cluster);
}

double moe_expert_tp_seconds(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             CollectiveKind kind) {
  const int64_t etp = expert_tensor_parallel(layout);
  if (etp <= 1) {
    return 0.0;
  }
  // The etp group is etp consecutive ranks of the tp group (check_layout "etp_tp").
  return collective_seconds(cluster, kind, moe_tp_gather_bytes(model, cluster, layout), etp, 1);
}

double moe_all_to_all_seconds(const models::TransformerConfig& model,
                              const models::ClusterConfig& cluster, const Layout& layout,
                              int64_t stage) {
  if (layout.ep <= 1) {
    return 0.0;
  }
  return stage_collective_seconds(cluster, layout, CollectiveKind::kAllToAll, CommGroup::kEp, stage,
                                  moe_all_to_all_bytes(model, cluster, layout));
}

// Megatron-Core's flex token dispatcher with DeepEP's normal kernels (token_dispatcher.py
// MoEFlexTokenDispatcher and _DeepepManager, fused_a2a.py FusedDispatch, d98e8a64; DeepEP
// docs/legacy.md "Normal kernels with NVLink and RDMA forwarding"; docs/research/
// flex-dispatcher.md). Its bottleneck bandwidths were measured on H800 (NVLink 200 GB/s per
// direction, h800-2048.json; one 400 Gb/s CX7 NIC = 50 GB/s per GPU), 4096 tokens of hidden
// 7168, top-8: intranode EP 8 dispatch 153 and combine 158 GB/s (NVLink), internode EP 16 43
// and 43 GB/s (RDMA), each a fraction of the link peak taken here for every cluster.
// tests/test_internode.py counts the RDMA bytes as (token, destination node) pairs, the
// token's own node included, and tests/test_intranode.py the NVLink bytes as the rows each rank
// receives, itself included: the rates apply to those logical counts (moe_flex_traffic).
constexpr double kDeepepNvlinkDispatchEfficiency = 153.0 / 200.0;
constexpr double kDeepepNvlinkCombineEfficiency = 158.0 / 200.0;
constexpr double kDeepepRdmaEfficiency = 43.0 / 50.0;  // EP 16 (2 nodes), dispatch and combine

double moe_expected_groups_hit(int64_t num_experts, int64_t group_experts,
                               int64_t experts_per_token) {
  // A token's k experts are k distinct of the E, each k-subset equally likely (balanced
  // routing): a given set of g experts is missed with probability C(E - g, k) / C(E, k) =
  // prod_{i<k} (E - g - i) / (E - i) (hypergeometric, no success in k draws without
  // replacement), zero when k > E - g.
  double missed = 1.0;
  for (int64_t i = 0; i < experts_per_token; ++i) {
    const double left = static_cast<double>(num_experts - group_experts - i);
    if (left <= 0) {
      return 1.0;
    }
    missed *= left / static_cast<double>(num_experts - i);
  }
  return 1.0 - missed;
}

double moe_expected_destinations(int64_t num_experts, int64_t groups, int64_t experts_per_token) {
  // Linearity of expectation over G groups of E / G experts each.
  return static_cast<double>(groups) *
         moe_expected_groups_hit(num_experts, num_experts / groups, experts_per_token);
}

MoeFlexTraffic moe_flex_traffic(const models::TransformerConfig& model,
                                const models::ClusterConfig& cluster, const Layout& layout,
                                int64_t stage) {
  MoeFlexTraffic worst;
  if (layout.ep <= 1) {
    return worst;
  }
  const int64_t sequence_split = layout.sequence_parallel ? layout.tp : 1;
  const double token_bytes =
      static_cast<double>(rank_micro_batch_tokens(model, layout) / sequence_split *
                          model.hidden_size * element_bytes(cluster));
  const int64_t experts = model.num_experts;
  const int64_t k = model.experts_per_token;
  const int64_t experts_per_rank = experts / layout.ep;
  const int64_t stride = group_stride(layout, CommGroup::kEp);
  // The stage's groups at tp ranks 0 and tp - 1 bound how groups straddle node boundaries
  // (stage_collective_seconds); the slower one paces the layer.
  for (const int64_t tp_rank : {int64_t{0}, layout.tp - 1}) {
    const int64_t first = group_first_rank(layout, CommGroup::kEp, stage, tp_rank);
    std::map<int64_t, int64_t> members_per_node;
    for (int64_t i = 0; i < layout.ep; ++i) {
      ++members_per_node[(first + i * stride) / cluster.gpus_per_node];
    }
    MoeFlexTraffic t;
    t.nodes = static_cast<int64_t>(members_per_node.size());
    // Nodes a token reaches; of them its own, averaged over the group's ranks (a rank on a
    // node of m members finds m E / ep of the experts there).
    double nodes_hit = 0;
    double own_node_hit = 0;
    for (const auto& node : members_per_node) {
      t.local_members = std::max(t.local_members, node.second);
      const double hit = moe_expected_groups_hit(experts, node.second * experts_per_rank, k);
      nodes_hit += hit;
      own_node_hit += hit * static_cast<double>(node.second) / static_cast<double>(layout.ep);
    }
    t.destination_gpus = moe_expected_destinations(experts, layout.ep, k);
    t.destination_nodes = nodes_hit;
    t.inter_node_bytes_per_rank = t.nodes > 1 ? token_bytes * (nodes_hit - own_node_hit) : 0.0;
    t.rdma_logical_bytes_per_rank = t.nodes > 1 ? token_bytes * nodes_hit : 0.0;
    t.nvlink_bytes_per_rank = token_bytes * t.destination_gpus;
    // The internode kernel's RDMA senders, forwarders and NVLink receivers run at once, warps
    // of one kernel (DeepEP V1 csrc/kernels/internode.cu: dispatch's kRDMASender,
    // kRDMAAndNVLForwarder, kNVLReceivers; combine's kNVLSender, kNVLAndRDMAForwarder,
    // kRDMAReceiver): the slower leg paces a call.
    // Latency: one step per peer node over the NICs, one per peer GPU of the node over NVLink,
    // as the two-tier all-to-all (collective_time.cpp).
    const auto leg_seconds = [&](double nvlink_efficiency) {
      const double nvlink =
          t.nvlink_bytes_per_rank / (cluster.intra_node_bytes_per_second * nvlink_efficiency) +
          static_cast<double>(t.local_members - 1) * cluster.intra_node_latency_seconds;
      if (t.nodes <= 1) {
        return nvlink;
      }
      const double rdma =
          t.rdma_logical_bytes_per_rank /
              (cluster.inter_node_bytes_per_second_per_gpu * kDeepepRdmaEfficiency) +
          static_cast<double>(t.nodes - 1) * cluster.inter_node_latency_seconds;
      return std::max(nvlink, rdma);
    };
    t.dispatch_seconds = leg_seconds(kDeepepNvlinkDispatchEfficiency);
    t.combine_seconds = leg_seconds(kDeepepNvlinkCombineEfficiency);
    if (t.dispatch_seconds + t.combine_seconds >= worst.dispatch_seconds + worst.combine_seconds) {
      worst = t;
    }
  }
  return worst;
}

double moe_dispatch_combine_seconds(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, int64_t stage) {
  if (options.moe_dispatcher == MoeDispatcher::kFlex) {
    const MoeFlexTraffic flex = moe_flex_traffic(model, cluster, layout, stage);
    return flex.dispatch_seconds + flex.combine_seconds;
  }
  return 2.0 * moe_all_to_all_seconds(model, cluster, layout, stage);
}

int64_t moe_token_count_bytes(const models::TransformerConfig& model, const Layout& layout) {
  return layout.ep * model.num_experts * kMoeTokenCountBytes;
}

double moe_token_count_seconds(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, const Layout& layout,
                               int64_t stage) {
  if (layout.ep <= 1) {
    return 0.0;
  }
  return stage_collective_seconds(cluster, layout, CollectiveKind::kAllGather, CommGroup::kEp,
                                  stage, moe_token_count_bytes(model, layout));
}

}  // namespace meshplan::planner
