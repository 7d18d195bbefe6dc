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
