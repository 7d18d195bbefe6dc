// Context-parallel attention: what the cp ranks of one (tp, dp, pp) coordinate send each other
// per layer, and how much of it the attention compute hides.

#include <fmt/format.h>

#include <algorithm>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "meshplan/errors.h"
#include "model_shape.h"

namespace meshplan::planner {

std::string to_string(CpComm comm) {
  return comm == CpComm::kP2p ? "p2p" : "a2a";
}

CpComm parse_cp_comm(const std::string& text, const std::string& field) {
  for (CpComm value : {CpComm::kP2p, CpComm::kA2a}) {
    if (text == to_string(value)) {
      return value;
    }
  }
  throw InputError(fmt::format("{}: unknown cp_comm, expected p2p or a2a ({})", field, text));
}

namespace {

// Ring: each rank's K and V chunk, T/cp tokens of g/t heads of d elements each (T = b s; per
// tp shard, since tp splits heads): 2 (T/cp) (g/t) d e bytes. MLA's value heads are d_v wide:
// (T/cp) (a/t) (d + d_v) e (TE sends k and v flattened side by side when their head dims differ,
// enable_mla in AttnFuncWithCPAndKVP2P).
CpAttentionComm ring_comm(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options) {
  const int64_t value_head_dim = model.is_mla() ? model.v_head_dim : model.head_dim;
  const int64_t kv_bytes = rank_micro_batch_tokens(model, layout) * model.num_kv_heads / layout.tp *
                           (model.head_dim + value_head_dim) * element_bytes(cluster);
  const int64_t steps = layout.cp - 1;
  CpAttentionComm comm;
  // Transformer Engine AttnFuncWithCPAndKVP2P (context_parallel.py): forward, cp steps, the
  // K/V in hand sent on to the next rank of the ring at each of the first cp - 1; backward
  // passes K/V around again and the accumulated dK/dV after them (cp - 1 each, 2 (cp - 1)
  // chunk volumes, as TE's kv+dkv buffer moves), dK/dV ending on the chunk's owner.
  comm.calls.push_back({"cp: ring K/V sends (forward, backward)", CollectiveKind::kSendRecv,
                        kv_bytes, steps, steps});
  comm.calls.push_back(
      {"cp: ring dK/dV sends (backward)", CollectiveKind::kSendRecv, kv_bytes, 0, steps});
  // Overlap (TE's loop issues step i's send/recv before step i's attention and waits for it at
  // step i + 1; Liu et al. 2023, "Ring Attention", Sec. 3: the transfer hides when a block's
  // compute outlasts it). Each of the cp steps does 1/cp of the rank's attention, so per layer
  //   exposed_forward  = (cp - 1) max(0, t_send(K/V) - A / cp),
  //   exposed_backward = (cp - 1) max(0, t_send(K/V) + t_send(dK/dV) - r A / cp),
  // A = the rank's attention forward time, its backward r A (attention_backward_to_forward).
  const double send = stage_collective_seconds(cluster, layout, CollectiveKind::kSendRecv,
                                               CommGroup::kCp, 0, kv_bytes);
  // Full attention: no layer is windowed under cp > 1 (check_cp_layout "cp_window").
  const double step_attention = attention_forward_seconds(model, cluster, layout, options, false) /
                                static_cast<double>(layout.cp);
  comm.forward_exposed_seconds = static_cast<double>(steps) * std::max(0.0, send - step_attention);
  comm.backward_exposed_seconds =
      static_cast<double>(steps) *
      std::max(0.0, 2.0 * send - attention_backward_to_forward(options) * step_attention);
  return comm;
}

// Ulysses (Jacobs et al. 2023, Sec. 3.1; Megatron-Core cp_comm_type "a2a"): before attention an
// all-to-all each of Q, K and V turns T/cp tokens x all local heads into T tokens x 1/cp of
// them, after it one turns the output back: 4 all-to-alls forward, 4 of the gradients
// backward, each rank's send buffer (T/cp) (a/t or g/t) d e bytes. They sit between the
// projections and attention with nothing to overlap: all exposed.
CpAttentionComm ulysses_comm(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout) {
  const int64_t token_bytes =
      rank_micro_batch_tokens(model, layout) * model.head_dim * element_bytes(cluster);
  const int64_t q_bytes = token_bytes * model.num_attention_heads / layout.tp;
  const int64_t kv_bytes = token_bytes * model.num_kv_heads / layout.tp;
  CpAttentionComm comm;
  comm.calls.push_back({"cp: Ulysses all-to-alls of Q and attention output",
                        CollectiveKind::kAllToAll, q_bytes, 2, 2});
  comm.calls.push_back(
      {"cp: Ulysses all-to-alls of K and V", CollectiveKind::kAllToAll, kv_bytes, 2, 2});
  for (const CpAttentionComm::Call& call : comm.calls) {
    const double seconds =
        stage_collective_seconds(cluster, layout, call.kind, CommGroup::kCp, 0, call.message_bytes);
    comm.forward_exposed_seconds += static_cast<double>(call.forward_calls) * seconds;
    comm.backward_exposed_seconds += static_cast<double>(call.backward_calls) * seconds;
  }
  return comm;
}

}  // namespace

CpAttentionComm cp_attention_comm(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options) {
  if (layout.cp <= 1) {
    return {};
  }
  return options.cp_comm == CpComm::kP2p ? ring_comm(model, cluster, layout, options)
                                         : ulysses_comm(model, cluster, layout);
}

}  // namespace meshplan::planner
