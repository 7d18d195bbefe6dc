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
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

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

namespace {

// ln C(n, r), or -infinity when r < 0 or r > n (C(n, r) = 0).
double log_binomial(int64_t n, int64_t r) {
  if (r < 0 || r > n) {
    return -std::numeric_limits<double>::infinity();
  }
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(r) + 1) -
         std::lgamma(static_cast<double>(n - r) + 1);
}

}  // namespace

double moe_expected_range_hit(const models::TransformerConfig& model, int64_t first_expert,
                              int64_t expert_count) {
  const int64_t k = model.experts_per_token;
  if (!model.has_routing_groups()) {
    return moe_expected_groups_hit(model.num_experts, expert_count, k);
  }
  // Group-limited routing (Megatron-Core moe_utils.py group_limited_topk; DeepSeek-V3 Sec.
  // 2.1.2): a token's M groups are M distinct of the G, each M-subset equally likely (balanced
  // routing), and each chosen group holds k / M of its experts, k / M distinct of the group's
  // E / G. A chosen group is scored by the sum of its top-(k / M) experts, so its best experts
  // rank among the token's k: a Monte Carlo with independent scores (DeepSeek-V3: E 256, G 8,
  // M 4, k 8) reaches 3.97 of the 4 chosen groups and 7.49 of the 64 ranks at ep 64, where this
  // model gives 4 and 7.61 and k uniform over the chosen groups' experts 3.62 and 7.28.
  const int64_t groups = model.router_num_groups;
  const int64_t chosen = model.router_group_topk;
  // The search asks for the same few ranges for every layout: kept per thread (sweep searches
  // in parallel), as stage_layer_range's memo.
  static thread_local std::map<std::array<int64_t, 6>, double> memo;
  const std::array<int64_t, 6> key = {model.num_experts, k,           groups, chosen,
                                      first_expert,      expert_count};
  if (const auto found = memo.find(key); found != memo.end()) {
    return found->second;
  }
  const int64_t group_size = model.num_experts / groups;
  const int64_t per_group = k / chosen;
  // Groups wholly inside the range are hit whenever chosen; the range's partial groups (at most
  // its first and last) are missed with q = C(E/G - overlap, k/M) / C(E/G, k/M) each.
  const int64_t end = first_expert + expert_count;
  int64_t full = 0;
  std::vector<double> partial_missed;
  for (int64_t g = first_expert / group_size; g * group_size < end; ++g) {
    const int64_t overlap =
        std::min(end, (g + 1) * group_size) - std::max(first_expert, g * group_size);
    if (overlap == group_size) {
      ++full;
    } else {
      partial_missed.push_back(1.0 - moe_expected_groups_hit(group_size, overlap, per_group));
    }
  }
  // P(miss) = sum over the chosen subsets A of the partial groups of prod_{A} q times
  // P(S meets the range's groups in exactly A) = C(G - full - p, M - |A|) / C(G, M).
  const auto p = static_cast<int64_t>(partial_missed.size());
  double missed = 0;
  for (int64_t subset = 0; subset < (int64_t{1} << p); ++subset) {
    double product = 1.0;
    int64_t size = 0;
    for (int64_t i = 0; i < p; ++i) {
      if ((subset >> i) & 1) {
        product *= partial_missed[static_cast<size_t>(i)];
        ++size;
      }
    }
    missed += product * std::exp(log_binomial(groups - full - p, chosen - size) -
                                 log_binomial(groups, chosen));
  }
  if (memo.size() >= 4096) {
    memo.clear();  // bounded for a long-lived process (sweep, the fuzzers)
  }
  memo.emplace(key, 1.0 - missed);
  return 1.0 - missed;
}

double moe_expected_destinations(const models::TransformerConfig& model, int64_t destinations) {
  // Linearity of expectation over the destinations, each holding E / n consecutive experts.
  // When the destinations and the routing groups nest (one inside the other, or no groups),
  // every destination meets the groups alike: n times the first one's.
  const int64_t experts_each = model.num_experts / destinations;
  const int64_t group_size =
      model.has_routing_groups() ? model.num_experts / model.router_num_groups : model.num_experts;
  if (group_size % experts_each == 0 || experts_each % group_size == 0) {
    return static_cast<double>(destinations) * moe_expected_range_hit(model, 0, experts_each);
  }
  double total = 0;
  for (int64_t d = 0; d < destinations; ++d) {
    total += moe_expected_range_hit(model, d * experts_each, experts_each);
  }
  return total;
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
  const int64_t experts_per_rank = model.num_experts / layout.ep;
  const int64_t stride = group_stride(layout, CommGroup::kEp);
  // The stage's groups at tp ranks 0 and tp - 1 bound how groups straddle node boundaries
  // (stage_collective_seconds); the slower one paces the layer.
  for (const int64_t tp_rank : {int64_t{0}, layout.tp - 1}) {
    const int64_t first = group_first_rank(layout, CommGroup::kEp, stage, tp_rank);
    // Per node: its first ep index and its member count (a node's members are consecutive ep
    // indices, so its experts are one run of consecutive experts).
    std::map<int64_t, std::pair<int64_t, int64_t>> members_per_node;
    for (int64_t i = 0; i < layout.ep; ++i) {
      const auto entry =
          members_per_node.try_emplace((first + i * stride) / cluster.gpus_per_node, i, 0).first;
      ++entry->second.second;
    }
    MoeFlexTraffic t;
    t.nodes = static_cast<int64_t>(members_per_node.size());
    // Nodes a token reaches; of them its own, averaged over the group's ranks (a rank on a
    // node of m members finds m E / ep of the experts there).
    double nodes_hit = 0;
    double own_node_hit = 0;
    for (const auto& node : members_per_node) {
      const int64_t members = node.second.second;
      t.local_members = std::max(t.local_members, members);
      const double hit = moe_expected_range_hit(model, node.second.first * experts_per_rank,
                                                members * experts_per_rank);
      nodes_hit += hit;
      own_node_hit += hit * static_cast<double>(members) / static_cast<double>(layout.ep);
    }
    t.destination_gpus = moe_expected_destinations(model, layout.ep);
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
