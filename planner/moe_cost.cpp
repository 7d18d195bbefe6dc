// Mixture-of-experts communication volumes: the all-to-all token dispatch and combine over the
// expert-parallel group, and the routed tokens' tensor-parallel gather.
//
// Megatron-Core's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py,
// MoEAlltoAllTokenDispatcher): each rank permutes its local tokens by expert, sends each token
// to the ep rank holding each of its k experts (dispatch all-to-all), gathers the received
// tokens over tp when tp > 1, runs its E / ep experts, then reverses the path (reduce-scatter
// over tp, combine all-to-all). Dropless (no capacity factor): with balanced routing a rank
// sends and receives T k / sp tokens of h elements per all-to-all, (ep - 1) / ep of them to
// other ranks.

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
  const int64_t tokens = rank_micro_batch_tokens(model, layout);
  return tokens * model.experts_per_token * model.hidden_size * element_bytes(cluster);
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
