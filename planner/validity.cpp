// Validity rules of a layout, each with a named reason.

#include <fmt/format.h>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

namespace {

Validity reject(std::string code, std::string reason) {
  return Validity{std::move(code), std::move(reason)};
}

}  // namespace

Validity check_layout(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                      int64_t num_gpus, const Layout& layout, bool allow_tp_across_nodes) {
  if (layout.tp < 1 || layout.pp < 1 || layout.dp < 1 || layout.vpp < 1 || layout.micro_batch < 1 ||
      layout.global_batch < 1) {
    return reject("sizes", fmt::format("tp, pp, dp, vpp, micro_batch and global_batch must be "
                                       "positive ({})",
                                       describe(layout)));
  }
  if (layout.num_gpus() != num_gpus) {
    return reject("gpus", fmt::format("tp*pp*dp must equal the GPU count ({}*{}*{} != {})",
                                      layout.tp, layout.pp, layout.dp, num_gpus));
  }
  if (model.num_attention_heads % layout.tp != 0) {
    return reject("tp_heads", fmt::format("num_attention_heads not divisible by tp ({} % {})",
                                          model.num_attention_heads, layout.tp));
  }
  if (model.num_kv_heads % layout.tp != 0) {
    return reject("tp_kv_heads", fmt::format("num_kv_heads not divisible by tp ({} % {})",
                                             model.num_kv_heads, layout.tp));
  }
  if (model.ffn_hidden_size % layout.tp != 0) {
    return reject("tp_ffn", fmt::format("ffn_hidden_size not divisible by tp ({} % {})",
                                        model.ffn_hidden_size, layout.tp));
  }
  if (!allow_tp_across_nodes &&
      (layout.tp > cluster.gpus_per_node || cluster.gpus_per_node % layout.tp != 0)) {
    return reject("tp_node", fmt::format("tp group does not fit in one node (tp {} with {} GPUs "
                                         "per node)",
                                         layout.tp, cluster.gpus_per_node));
  }
  if (model.num_layers % (layout.pp * layout.vpp) != 0) {
    return reject("pp_layers", fmt::format("num_layers not divisible by pp*vpp ({} % {})",
                                           model.num_layers, layout.pp * layout.vpp));
  }
  if (layout.global_batch % (layout.dp * layout.micro_batch) != 0) {
    return reject("batch", fmt::format("global_batch not divisible by dp*micro_batch ({} % {})",
                                       layout.global_batch, layout.dp * layout.micro_batch));
  }
  std::string reason;
  const std::string schedule_code = check_schedule_shape(layout.schedule, layout.pp, layout.vpp,
                                                         layout.num_micro_batches(), &reason);
  if (!schedule_code.empty()) {
    return reject(schedule_code, reason);
  }
  if (layout.sequence_parallel && layout.tp < 2) {
    return reject("sequence_parallel", "sequence parallel needs tp > 1");
  }
  if (layout.sequence_parallel && model.seq_length % layout.tp != 0) {
    return reject("sequence_parallel", fmt::format("seq_length not divisible by tp ({} % {})",
                                                   model.seq_length, layout.tp));
  }
  if (layout.zero < 0 || layout.zero > 3) {
    return reject("zero", fmt::format("ZeRO stage must be 0-3 ({})", layout.zero));
  }
  return {};
}

}  // namespace meshplan::planner
