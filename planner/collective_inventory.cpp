// Every collective a rank of each pipeline stage issues in one step, with exact message sizes.
// This is Megatron-LM's communication (Shoeybi et al. 2019; Korthikanti et al. 2022;
// Narayanan et al. 2021); the executor issues exactly this list and checks its byte counts.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "meshplan/dp_buckets.h"
#include "model_shape.h"

namespace meshplan::planner {

namespace {

class Inventory {
 public:
  Inventory(const models::ClusterConfig& cluster, const Layout& layout)
      : cluster_(cluster), layout_(layout) {}

  /// Adds an entry costed by stage_collective_seconds on the whole `group`, or, when
  /// `seconds_per_call` is given, by that (a subgroup: the expert tp ranks inside kTp).
  void add(int64_t stage, std::string what, CollectiveKind kind, CommGroup group,
           int64_t group_size, int64_t message_bytes, int64_t calls_per_step,
           std::optional<double> seconds_per_call = std::nullopt) {
    if (calls_per_step == 0 || message_bytes == 0) {
      return;
    }
    CollectiveTraffic traffic;
    traffic.what = std::move(what);
    traffic.kind = kind;
    traffic.group = group;
    traffic.group_size = group_size;
    traffic.stage = stage;
    traffic.message_bytes = message_bytes;
    traffic.calls_per_step = calls_per_step;
    traffic.seconds_per_call = seconds_per_call.value_or(
        stage_collective_seconds(cluster_, layout_, kind, group, stage, message_bytes));
    list_.push_back(std::move(traffic));
  }
  std::vector<CollectiveTraffic> take() { return std::move(list_); }

 private:
  const models::ClusterConfig& cluster_;
  const Layout& layout_;
  std::vector<CollectiveTraffic> list_;
};

// The MTP depths of the stage with the MoE MLP (stage_mtp_layer_count).
int64_t stage_mtp_moe_layers(const models::TransformerConfig& model, const Layout& layout,
                             int64_t stage) {
  return model.mtp_layer_is_moe() ? stage_mtp_layer_count(model, layout, stage) : 0;
}

// Multi-head latent attention under tp > 1 (Megatron-Core multi_latent_attention.py,
// MLASelfAttention.get_query_key_value_tensors): the down projections are duplicated and run on
// the rank's own tokens, so what the column-parallel up projections gather is the normed query
// latent (q_lora_rank wide; the hidden state when it is 0, read by linear_q_proj), the normed kv
// latent (kv_lora_rank) and the rotary key shared by all heads (qk_rope_head_dim), per token;
// the output projection stays the dense block's row-parallel one. Sequence parallel: each is
// all-gathered forward (again by each of the stage's `regathered_layers`: its recomputed
// forwards, or every layer's backward under op-level selective recompute) and its input
// gradient reduce-scattered backward; the two
// latents are gathered again for their up projections' weight gradients. Without sequence
// parallelism each input gradient is all-reduced backward; the rotary key's as Megatron-LM pull
// request 6839 ("Fix MLA shared K rope grad for TP>1 and SP=False") adds: each rank's heads give
// part of its gradient, which Megatron-Core otherwise leaves unreduced.
void add_mla_tensor_parallel(Inventory& inventory, const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             int64_t stage, int64_t regathered_layers) {
  if (!model.is_mla() || layout.tp <= 1) {
    return;
  }
  const int64_t t = layout.tp;
  const int64_t m = layout.num_micro_batches();
  const int64_t calls =
      (stage_layer_count(model, layout, stage) + stage_mtp_layer_count(model, layout, stage)) * m;
  const int64_t regathers = regathered_layers * m;
  // --recompute-modules mla_up_proj: the up projections gather their latents again before the
  // attention's backward (mla_up_projection_recompute in compute_cost.cpp).
  const int64_t up_projection_regathers =
      recomputes_module(layout, kRecomputeMlaUpProj) ? calls : 0;
  const int64_t token_bytes = rank_micro_batch_tokens(model, layout) * element_bytes(cluster);
  const MlaLatentWidths widths = mla_latent_widths(model);
  const int64_t q_bytes = token_bytes * widths.query;
  const int64_t kv_bytes = token_bytes * widths.kv;
  const int64_t rope_bytes = token_bytes * widths.rope;
  const auto kTp = CommGroup::kTp;
  if (!layout.sequence_parallel) {
    const auto kAR = CollectiveKind::kAllReduce;
    inventory.add(stage, "tp: MLA query latent input-gradient all-reduce", kAR, kTp, t, q_bytes,
                  calls);
    inventory.add(stage, "tp: MLA kv latent input-gradient all-reduce", kAR, kTp, t, kv_bytes,
                  calls);
    inventory.add(stage, "tp: MLA rotary key input-gradient all-reduce", kAR, kTp, t, rope_bytes,
                  calls);
    return;
  }
  const auto kAG = CollectiveKind::kAllGather;
  const auto kRS = CollectiveKind::kReduceScatter;
  inventory.add(stage, "tp: MLA query latent all-gathers (forward, weight-gradient re-gather)", kAG,
                kTp, t, q_bytes, 2 * calls + regathers + up_projection_regathers);
  inventory.add(stage, "tp: MLA kv latent all-gathers (forward, weight-gradient re-gather)", kAG,
                kTp, t, kv_bytes, 2 * calls + regathers + up_projection_regathers);
  inventory.add(stage, "tp: MLA rotary key all-gather (forward)", kAG, kTp, t, rope_bytes,
                calls + regathers);
  inventory.add(stage, "tp: MLA query latent input-gradient reduce-scatter", kRS, kTp, t, q_bytes,
                calls);
  inventory.add(stage, "tp: MLA kv latent input-gradient reduce-scatter", kRS, kTp, t, kv_bytes,
                calls);
  inventory.add(stage, "tp: MLA rotary key input-gradient reduce-scatter", kRS, kTp, t, rope_bytes,
                calls);
}

// MoE layers of the stage whose MoE block runs again under --recompute-modules moe (its router,
// dispatch, experts, combine and shared experts; moe_block_recompute in compute_cost.cpp), and
// the shared experts' extra forwards (models with shared experts): one per MoE layer under moe
// or shared_experts, two under both (the rebuilt block's nested checkpoint runs them again:
// compute_cost.cpp moe_block_recompute, nested checkpoints).
struct ModuleRerunMoe {
  int64_t blocks = 0;
  int64_t shared_experts = 0;
};
ModuleRerunMoe module_rerun_moe(const models::TransformerConfig& model, const Layout& layout,
                                int64_t moe_layers) {
  ModuleRerunMoe rerun;
  if (layout.recompute != Recompute::kSelective) {
    return rerun;
  }
  rerun.blocks = recomputes_module(layout, kRecomputeMoe) ? moe_layers : 0;
  if (model.num_shared_experts > 0) {
    const int64_t runs = (recomputes_module(layout, kRecomputeMoe) ? 1 : 0) +
                         (recomputes_module(layout, kRecomputeSharedExperts) ? 1 : 0);
    rerun.shared_experts = runs * moe_layers;
  }
  return rerun;
}

// Layers of the stage whose forward runs again, and the MoE ones among them: every layer under
// full recompute, the first recompute_layers of each chunk under Megatron's block method,
// DeepSpeed's checkpointed runs, none otherwise (recomputed_layers).
struct RecomputedLayers {
  int64_t layers = 0;
  int64_t moe_layers = 0;
  int64_t checkpointed_inputs = 0;  // one per recomputed layer, or per uniform group
};
RecomputedLayers stage_recomputed_layers(const models::TransformerConfig& model,
                                         const Layout& layout, const PlanOptions& options,
                                         int64_t stage) {
  RecomputedLayers recomputed;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    const LayerRange chunk_range = chunk_layers(model, layout, stage, chunk);
    const LayerRange range = recomputed_layers(model, layout, options, chunk_range);
    recomputed.layers += range.count();
    recomputed.moe_layers += range.num_moe(model);
    recomputed.checkpointed_inputs += checkpointed_input_count(model, layout, options, chunk_range);
  }
  if (mtp_recomputed_under_full(layout)) {  // one checkpointed input per depth
    recomputed.layers += stage_mtp_layer_count(model, layout, stage);
    recomputed.moe_layers += stage_mtp_moe_layers(model, layout, stage);
    recomputed.checkpointed_inputs += stage_mtp_layer_count(model, layout, stage);
  }
  return recomputed;
}

void add_tensor_parallel(Inventory& inventory, const models::TransformerConfig& model,
                         const models::ClusterConfig& cluster, const Layout& layout,
                         const PlanOptions& options, int64_t stage) {
  const int64_t t = layout.tp;
  if (t <= 1) {
    return;
  }
  const int64_t m = layout.num_micro_batches();
  const int64_t tokens = rank_micro_batch_tokens(model, layout);
  const int64_t hidden_bytes = tokens * model.hidden_size * element_bytes(cluster);
  const int64_t layers =
      stage_layer_count(model, layout, stage) + stage_mtp_layer_count(model, layout, stage);
  int64_t moe_layers = stage_mtp_moe_layers(model, layout, stage);
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    moe_layers += chunk_layers(model, layout, stage, chunk).num_moe(model);
  }
  const bool full = layout.recompute == Recompute::kFull;
  // `recomputed` of the stage's layers run their forward again: all of them under full
  // recompute, each chunk's first recompute_layers under Megatron's block method.
  const RecomputedLayers recomputed_stage = stage_recomputed_layers(model, layout, options, stage);
  const int64_t recomputed = recomputed_stage.layers;
  const ModuleRerunMoe rerun = module_rerun_moe(model, layout, moe_layers);
  // torchtitan's op-level selective recompute saves reduce-scatter outputs, not all-gather
  // outputs: every layer's forward all-gathers run again in the backward (op_sac_recompute).
  const bool op_sac = op_level_selective_recompute(layout, options);
  const int64_t regathered = op_sac ? layers : recomputed;
  // MLA layers' attention inputs are latents, not the hidden state (add_mla_tensor_parallel).
  const int64_t mla_layers = model.is_mla() ? layers : 0;
  const int64_t regathered_mla_layers = model.is_mla() ? regathered : 0;
  const auto kAR = CollectiveKind::kAllReduce;
  const auto kAG = CollectiveKind::kAllGather;
  const auto kRS = CollectiveKind::kReduceScatter;
  const auto kTp = CommGroup::kTp;
  const bool first = stage == 0;
  const bool last = stage == layout.pp - 1;
  // A parallel block reduces its two outputs' sum once (dense_tp_calls_per_layer; dense layers
  // only, so no MoE or MLA layer below).
  const DenseTpCalls calls = dense_tp_calls_per_layer(model);
  if (!layout.sequence_parallel) {
    // Shoeybi et al. 2019, Fig. 3-4: g (all-reduce) after each row-parallel layer forward,
    // f (all-reduce) before each column-parallel layer backward.
    inventory.add(stage,
                  model.parallel_residual
                      ? "tp: layer forward all-reduces (attention + MLP out)"
                      : "tp: layer forward all-reduces (attention out, MLP out)",
                  kAR, kTp, t, hidden_bytes, calls.output_reductions * layers * m);
    inventory.add(stage, "tp: layer backward all-reduces (QKV in, MLP in)", kAR, kTp, t,
                  hidden_bytes, (calls.input_collectives * layers - mla_layers) * m);
    if (full) {
      inventory.add(stage, "tp: recomputed forward all-reduces", kAR, kTp, t, hidden_bytes,
                    calls.output_reductions * recomputed * m);
    }
    if (recomputes_module(layout, kRecomputeMlp)) {
      // --recompute-modules mlp: each dense layer's MLP forward runs again, its output reduced
      // again (dense_mlp_recompute in compute_cost.cpp).
      inventory.add(stage, "tp: recomputed MLP output all-reduces (recompute_modules mlp)", kAR,
                    kTp, t, hidden_bytes, (layers - moe_layers) * m);
    }
    if (rerun.shared_experts > 0) {
      // --recompute-modules shared_experts or moe: each MoE layer's shared experts run their
      // forward again, their output reduced again (shared_experts_recompute and
      // moe_block_recompute in compute_cost.cpp).
      inventory.add(stage,
                    "tp: recomputed shared-expert output all-reduces (recompute_modules "
                    "shared_experts, moe)",
                    kAR, kTp, t, hidden_bytes, rerun.shared_experts * m);
    }
    if (full && options.distribute_saved_activations) {
      // compute_cost.h saved_input_split: each layer's saved input gathered before its recompute.
      inventory.add(stage, "tp: all-gather of each distributed saved layer input (recompute)", kAG,
                    kTp, t, hidden_bytes, recomputed_stage.checkpointed_inputs * m);
    }
    if (first) {
      inventory.add(stage, "tp: vocab-parallel embedding all-reduce", kAR, kTp, t, hidden_bytes, m);
    }
    if (last) {
      inventory.add(stage, "tp: LM head input-gradient all-reduce", kAR, kTp, t, hidden_bytes, m);
    }
  } else {
    // Korthikanti et al. 2022, Sec. 4.2.2: g becomes reduce-scatter, f all-gather; backward
    // swaps them and re-gathers the sequence-sharded inputs of the column-parallel layers.
    // An MoE layer's MLP pair is its shared experts' (if any); its routed tokens have their own
    // (add_moe_tensor_parallel).
    const int64_t pairs = 2 * layers - moe_layers * (model.num_shared_experts > 0 ? 0 : 1);
    const int64_t recomputed_pairs =
        2 * recomputed - recomputed_stage.moe_layers * (model.num_shared_experts > 0 ? 0 : 1);
    const int64_t regathered_pairs = op_sac ? pairs : recomputed_pairs;
    // Each pair's reduce-scatter (forward) and output-gradient all-gather (backward) is one of
    // the outputs' reductions; a parallel block has one per layer for its two column inputs.
    const int64_t reductions = model.parallel_residual ? calls.output_reductions * layers : pairs;
    // The layers' all-gathers move tp_all_gather_element_bytes per element (FP8 under TE).
    const int64_t gather_bytes =
        tokens * model.hidden_size * tp_all_gather_element_bytes(cluster, options);
    inventory.add(stage, "tp: layer forward all-gathers (QKV in, MLP in)", kAG, kTp, t,
                  gather_bytes,
                  (pairs - mla_layers + regathered_pairs - regathered_mla_layers) * m);
    // Under fsdp full recompute stops before the dense MLP's last GEMM: its reduce-scatter is
    // not re-run (checkpoint_early_stop_skip).
    const int64_t unrecomputed =
        checkpoint_early_stop_skips_mlp_output(model, layout, options) ? layers - moe_layers : 0;
    const int64_t recomputed_reductions =
        model.parallel_residual ? calls.output_reductions * recomputed : recomputed_pairs;
    inventory.add(stage, "tp: layer forward reduce-scatters (attention out, MLP out)", kRS, kTp, t,
                  hidden_bytes, (reductions + recomputed_reductions - unrecomputed) * m);
    inventory.add(stage, "tp: layer backward all-gathers (output grads, input re-gather)", kAG, kTp,
                  t, gather_bytes, (reductions + pairs - mla_layers) * m);
    inventory.add(stage, "tp: layer backward reduce-scatters (QKV in, MLP in)", kRS, kTp, t,
                  hidden_bytes, (pairs - mla_layers) * m);
    if (recomputes_module(layout, kRecomputeMlp)) {
      // --recompute-modules mlp: each dense layer's MLP forward runs again, gathering its input
      // and reduce-scattering its output again (dense_mlp_recompute in compute_cost.cpp).
      inventory.add(stage, "tp: recomputed MLP input all-gathers (recompute_modules mlp)", kAG, kTp,
                    t, gather_bytes, (layers - moe_layers) * m);
      inventory.add(stage, "tp: recomputed MLP output reduce-scatters (recompute_modules mlp)", kRS,
                    kTp, t, hidden_bytes, (layers - moe_layers) * m);
    }
    if (rerun.shared_experts > 0) {
      // --recompute-modules shared_experts or moe: the shared experts' input all-gather and
      // output reduce-scatter again in each MoE layer (shared_experts_recompute and
      // moe_block_recompute in compute_cost.cpp).
      inventory.add(stage,
                    "tp: recomputed shared-expert input all-gathers (recompute_modules "
                    "shared_experts, moe)",
                    kAG, kTp, t, gather_bytes, rerun.shared_experts * m);
      inventory.add(stage,
                    "tp: recomputed shared-expert output reduce-scatters (recompute_modules "
                    "shared_experts, moe)",
                    kRS, kTp, t, hidden_bytes, rerun.shared_experts * m);
    }
    // Megatron-Core's alltoall dispatcher with etp > 1: the dispatched tokens are all-gathered
    // over the expert tp group (etp consecutive ranks of the tp group, filed under tp with
    // group size etp) before the experts and reduce-scattered after them; the backward
    // transposes. None at etp 1.
    const int64_t etp = expert_tensor_parallel(layout);
    if (etp > 1) {
      const int64_t routed_bytes = moe_tp_gather_bytes(model, cluster, layout);
      const auto subgroup_seconds = [&](CollectiveKind kind) -> std::optional<double> {
        if (etp == t) {
          return std::nullopt;  // the whole tp group
        }
        return moe_expert_tp_seconds(model, cluster, layout, kind);
      };
      inventory.add(stage, "tp: MoE routed-token all-gathers (forward; backward of combine)", kAG,
                    kTp, etp, routed_bytes,
                    (2 * moe_layers + recomputed_stage.moe_layers + rerun.blocks) * m,
                    subgroup_seconds(kAG));
      inventory.add(stage, "tp: MoE routed-token reduce-scatters (forward; backward of dispatch)",
                    kRS, kTp, etp, routed_bytes,
                    (2 * moe_layers + recomputed_stage.moe_layers + rerun.blocks) * m,
                    subgroup_seconds(kRS));
    }
    if (first) {
      // Forward: partial lookups reduce-scattered along the sequence. Backward: the weight
      // gradient of each vocabulary shard needs the whole sequence's output gradient.
      inventory.add(stage, "tp: vocab-parallel embedding reduce-scatter", kRS, kTp, t, hidden_bytes,
                    m);
      inventory.add(stage, "tp: embedding output-gradient all-gather (backward)", kAG, kTp, t,
                    hidden_bytes, m);
    }
    if (last) {
      inventory.add(stage, "tp: LM head input all-gathers (forward, backward re-gather)", kAG, kTp,
                    t, hidden_bytes, 2 * m);
      inventory.add(stage, "tp: LM head input-gradient reduce-scatter", kRS, kTp, t, hidden_bytes,
                    m);
    }
    // Parameters replicated over tp get partial gradients under sequence parallelism.
    const StageParameters parameters = stage_parameters(model, layout, stage, options);
    inventory.add(stage, "tp: replicated-parameter gradient all-reduce (sequence parallel)", kAR,
                  kTp, t, parameters.replicated * element_bytes(cluster), 1);
  }
  if (!layout.sequence_parallel && model.qk_norm) {
    // Each rank's q/k-norm gains (2d per layer) saw only its heads: their gradients are summed
    // over tp even without sequence parallelism, in one message per step (Megatron-Core
    // finalize_model_grads.py _allreduce_non_tensor_model_parallel_grads, d98e8a64: "q_layernorm"
    // and "k_layernorm" whenever qk_layernorm). Under sequence parallelism they ride in the
    // replicated-parameter all-reduce above (LayerParameters::replicated counts them).
    inventory.add(stage, "tp: q/k-norm gain gradient all-reduce", kAR, kTp, t,
                  layers * 2 * model.head_dim * element_bytes(cluster), 1);
  }
  add_mla_tensor_parallel(inventory, model, cluster, layout, stage, regathered);
  if (last) {
    // Vocab-parallel cross-entropy: max logit, target logit, sum of exp, fp32 (once more per MTP
    // depth: process_mtp_loss).
    inventory.add(stage, "tp: vocab-parallel cross-entropy all-reduces", kAR, kTp, t, tokens * 4,
                  3 * m * (1 + model.mtp_num_layers));
  }
  const int64_t depths = stage_mtp_layer_count(model, layout, stage) * m;
  if (depths > 0) {
    // Each MTP depth beyond its layer (compute_cost.cpp chunk_cost; multi_token_prediction.py):
    // the shared embedding's lookup, eh_proj (ColumnParallelLinear, its 2h-wide input),
    // gather_from_tensor_model_parallel_region of its h / t output columns, and the shared
    // output layer, as the main model's.
    if (!layout.sequence_parallel) {
      inventory.add(stage, "tp: MTP embedding all-reduce", kAR, kTp, t, hidden_bytes, depths);
      inventory.add(stage, "tp: MTP eh_proj output all-gather (forward)", kAG, kTp, t, hidden_bytes,
                    depths);
      inventory.add(stage, "tp: MTP eh_proj input-gradient all-reduce (2h)", kAR, kTp, t,
                    2 * hidden_bytes, depths);
      inventory.add(stage, "tp: MTP output-layer input-gradient all-reduce", kAR, kTp, t,
                    hidden_bytes, depths);
    } else {
      inventory.add(stage, "tp: MTP embedding reduce-scatter", kRS, kTp, t, hidden_bytes, depths);
      inventory.add(stage, "tp: MTP embedding output-gradient all-gather (backward)", kAG, kTp, t,
                    hidden_bytes, depths);
      inventory.add(stage, "tp: MTP eh_proj input all-gather (2h, forward)", kAG, kTp, t,
                    2 * hidden_bytes, depths);
      inventory.add(stage, "tp: MTP eh_proj input-gradient reduce-scatter (2h)", kRS, kTp, t,
                    2 * hidden_bytes, depths);
      inventory.add(stage,
                    "tp: MTP eh_proj output all-gather (forward) and sequence scatter's gradient "
                    "all-gather (backward)",
                    kAG, kTp, t, hidden_bytes, 2 * depths);
      inventory.add(stage, "tp: MTP output-layer input all-gathers (forward, backward re-gather)",
                    kAG, kTp, t, hidden_bytes, 2 * depths);
      inventory.add(stage, "tp: MTP output-layer input-gradient reduce-scatter", kRS, kTp, t,
                    hidden_bytes, depths);
    }
  }
}

// Context-parallel attention traffic (cp_attention_comm) of every layer of the stage, per
// micro-batch: forward calls once per forward, again per recomputed forward (every layer under
// full recompute, a chunk's first recompute_layers under the block method); backward calls
// once per backward.
void add_context_parallel(Inventory& inventory, const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options, int64_t stage) {
  const int64_t layers =
      stage_layer_count(model, layout, stage) + stage_mtp_layer_count(model, layout, stage);
  const int64_t forwards = layers + stage_recomputed_layers(model, layout, options, stage).layers;
  const int64_t m = layout.num_micro_batches();
  for (const CpAttentionComm::Call& call :
       cp_attention_comm(model, cluster, layout, options).calls) {
    inventory.add(stage, call.what, call.kind, CommGroup::kCp, layout.cp, call.message_bytes,
                  (forwards * call.forward_calls + layers * call.backward_calls) * m);
  }
}

// The stage's data-parallel calls as dp_buckets lists them, one entry per run of equal
// buckets: step lists once a step, chunk lists after each of the m vpp backward ops, ZeRO-3's
// gathers before each forward and each backward op (chunk_list_rounds; under torchtitan's
// pipelining once per chunk).
void add_data_parallel(Inventory& inventory, const models::TransformerConfig& model,
                       const models::ClusterConfig& cluster, const Layout& layout,
                       const PlanOptions& options, int64_t stage) {
  if (grad_group_size(layout) <= 1) {
    return;
  }
  const DpBuckets buckets = dp_buckets(model, cluster, layout, options, stage);
  const int64_t chunk_ops = chunk_list_rounds(layout, options);
  // Each call over its bucket's group; under hybrid sharding each gradient call's shard is then
  // all-reduced over the replicas, an entry of its own.
  const auto add_bucket = [&](const DpBucket& bucket, const std::string& what, int64_t calls) {
    const int64_t group_size = bucket.group == CommGroup::kDpShard ? zero_shard_group_size(layout)
                                                                   : grad_group_size(layout);
    inventory.add(stage, what, bucket.kind, bucket.group, group_size, bucket.bytes, calls);
    if (bucket.replicate_bytes > 0) {
      inventory.add(stage, "dp_replicate: gradient shard all-reduce over the replicas (HSDP)",
                    CollectiveKind::kAllReduce, CommGroup::kDpReplicate, dp_replicate_size(layout),
                    bucket.replicate_bytes, calls);
    }
  };
  if (zero3_gathers_once_per_step(layout, options)) {
    // torchtitan's pipelining: each chunk's units gathered once, before its first forward, and
    // reduce-scattered once, after its last backward.
    for (const auto& [list, what] :
         {std::pair{&buckets.chunk_grad,
                    "dp: gradient reduce-scatter after each chunk's last "
                    "backward (FSDP under pipelining)"},
          std::pair{&buckets.chunk_param,
                    "dp: parameter all-gather before each chunk's first "
                    "forward (FSDP under pipelining)"},
          std::pair{&buckets.chunk_root_grad,
                    "dp: root unit gradient reduce-scatter after each "
                    "chunk's last backward (FSDP under pipelining)"},
          std::pair{&buckets.chunk_root_param,
                    "dp: root unit parameter all-gather before each "
                    "chunk's first forward (FSDP under pipelining)"}}) {
      for (const DpBucket& bucket : *list) {
        add_bucket(bucket, what, bucket.num_calls * chunk_ops);
      }
    }
    return;
  }
  const auto add = [&](const std::vector<DpBucket>& list, const char* what, int64_t rounds) {
    for (const DpBucket& bucket : list) {
      add_bucket(bucket, what, bucket.num_calls * rounds);
    }
  };
  add(buckets.step_grad,
      layout.zero == 0                        ? "dp: gradient all-reduce (buckets)"
      : zero_grad_all_reduce(layout, options) ? "dp: gradient all-reduce (DeepSpeed ZeRO-1)"
                                              : "dp: gradient reduce-scatter (ZeRO)",
      1);
  add(buckets.step_param, "dp: parameter all-gather after the optimizer (ZeRO)", 1);
  add(buckets.chunk_grad,
      zero_grad_all_reduce(layout, options)
          ? "dp: gradient all-reduce per micro-batch and chunk (DeepSpeed ZeRO-2)"
          : "dp: gradient reduce-scatter per micro-batch and chunk (ZeRO)",
      chunk_ops);
  const auto same_calls = [](const std::vector<DpBucket>& a, const std::vector<DpBucket>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const DpBucket& x, const DpBucket& y) {
                        return x.bytes == y.bytes && x.num_calls == y.num_calls;
                      });
  };
  if (same_calls(buckets.chunk_param, buckets.chunk_param_backward)) {
    add(buckets.chunk_param, "dp: parameter all-gather before each forward and backward (ZeRO-3)",
        2 * chunk_ops);
  } else {
    add(buckets.chunk_param, "dp: parameter all-gather before each forward (ZeRO-3)", chunk_ops);
    add(buckets.chunk_param_backward,
        "dp: parameter all-gather before each recompute and backward (ZeRO-3, DeepSpeed's "
        "coordinator)",
        chunk_ops);
  }
  add(buckets.chunk_root_grad, "dp: root unit gradient reduce-scatter per micro-batch (FSDP)",
      chunk_ops);
  add(buckets.chunk_root_param, "dp: root unit parameter all-gather before each forward (FSDP)",
      chunk_ops);
}

// Mixture-of-experts: the token dispatch and combine all-to-alls over the ep group (two per MoE
// layer forward, two backward, two more for a full recompute or --recompute-modules moe;
// moe_cost.cpp), the dispatcher's
// token-count all-gather before each forward dispatch, the router's token-count all-reduce for
// the load-balancing loss, and the expert gradients' reduction over the expert data parallel
// group, once a step.
void add_mixture_of_experts(Inventory& inventory, const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, int64_t stage) {
  int64_t moe_layers = stage_mtp_moe_layers(model, layout, stage);
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    moe_layers += chunk_layers(model, layout, stage, chunk).num_moe(model);
  }
  const int64_t m = layout.num_micro_batches();
  // Forwards per step: each MoE layer's, and again each recomputed one's (full recompute, or
  // its MoE block under --recompute-modules moe).
  const int64_t forwards = moe_layers +
                           stage_recomputed_layers(model, layout, options, stage).moe_layers +
                           module_rerun_moe(model, layout, moe_layers).blocks;
  if (layout.ep > 1 && options.moe_dispatcher == MoeDispatcher::kFlex) {
    // Megatron-Core's flex dispatcher (DeepEP normal kernels, moe_cost.cpp moe_flex_traffic):
    // one fused dispatch and one combine per MoE layer forward, a combine and a dispatch
    // backward; no token-count all-gather (the counts travel inside the dispatch). Bytes: what
    // leaves the rank's NIC, each token once per other destination node, or, within one node,
    // what NVLink delivers, each token once per destination GPU.
    const MoeFlexTraffic flex = moe_flex_traffic(model, cluster, layout, stage);
    const bool inter_node = flex.nodes > 1;
    const auto bytes = static_cast<int64_t>(
        std::llround(inter_node ? flex.inter_node_bytes_per_rank : flex.nvlink_bytes_per_rank));
    const std::string leg = inter_node ? "RDMA once per destination node, NVLink forward"
                                       : "NVLink once per destination GPU";
    const double seconds = 0.5 * (flex.dispatch_seconds + flex.combine_seconds);
    inventory.add(stage, "ep: MoE flex dispatch and combine, DeepEP (" + leg + ") (forward)",
                  CollectiveKind::kAllToAll, CommGroup::kEp, layout.ep, bytes, 2 * forwards * m,
                  seconds);
    inventory.add(stage, "ep: MoE flex dispatch and combine, DeepEP (" + leg + ") (backward)",
                  CollectiveKind::kAllToAll, CommGroup::kEp, layout.ep, bytes, 2 * moe_layers * m,
                  seconds);
  } else if (layout.ep > 1) {
    const int64_t bytes = moe_all_to_all_bytes(model, cluster, layout);
    inventory.add(stage, "ep: MoE token dispatch and combine all-to-alls (forward)",
                  CollectiveKind::kAllToAll, CommGroup::kEp, layout.ep, bytes, 2 * forwards * m);
    inventory.add(stage, "ep: MoE token dispatch and combine all-to-alls (backward)",
                  CollectiveKind::kAllToAll, CommGroup::kEp, layout.ep, bytes, 2 * moe_layers * m);
    // token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess: every rank's E token counts
    // (int64, routing_map.sum(dim=0)) gathered over the tp x ep group (tp 1 in the executor;
    // meshplan files it under ep) before each forward dispatch; the backward reuses them.
    inventory.add(stage, "ep: MoE token-count all-gather (dispatch preprocess)",
                  CollectiveKind::kAllGather, CommGroup::kEp, layout.ep,
                  moe_token_count_bytes(model, layout), forwards * m);
  }
  if (options.moe_aux_loss_coeff > 0 && layout.tp * layout.cp > 1) {
    // router.py _apply_aux_loss: the E token counts summed over the tp x cp ranks sharing the
    // sequences, each forward (meshplan files the group under cp, or tp when cp is 1).
    inventory.add(stage, "cp: MoE router token-count all-reduce (load-balancing loss)",
                  CollectiveKind::kAllReduce, layout.cp > 1 ? CommGroup::kCp : CommGroup::kTp,
                  layout.tp * layout.cp, model.num_experts * kMoeTokenCountBytes, forwards * m);
  }
  const int64_t edp = expert_data_parallel(layout);
  const DpBuckets experts = expert_dp_buckets(model, cluster, layout, options, stage);
  for (const DpBucket& call : experts.step_grad) {
    inventory.add(stage,
                  layout.zero == 0 ? "expert_dp: expert gradient all-reduce"
                                   : "expert_dp: expert gradient reduce-scatter (ZeRO)",
                  call.kind, CommGroup::kExpertDp, edp, call.bytes, call.num_calls);
  }
  for (const DpBucket& call : experts.step_param) {
    inventory.add(stage, "expert_dp: expert parameter all-gather after the optimizer (ZeRO)",
                  call.kind, CommGroup::kExpertDp, edp, call.bytes, call.num_calls);
  }
}

// The stage's pipeline sends per step, from its op list: activations and gradients at the
// sizes pipeline_message_bytes gives each direction, and the tp all-gather of each received
// tensor that was scattered (pipeline_grad_scatter_gather false: the gradients go whole).
void add_pipeline_transfers(Inventory& inventory, const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, const PipelineSchedule& schedule,
                            int64_t stage) {
  int64_t sends[2] = {0, 0}, receives[2] = {0, 0};  // [activation, gradient]
  for (const PipelineOp& op : schedule.stages[static_cast<size_t>(stage)]) {
    sends[0] += op.kind == OpKind::kSendActivation;
    sends[1] += op.kind == OpKind::kSendGradient;
    receives[0] += op.kind == OpKind::kRecvActivation;
    receives[1] += op.kind == OpKind::kRecvGradient;
  }
  const char* gather_name = "tp: all-gather of each received pipeline tensor (scatter/gather)";
  const int64_t message = pipeline_message_bytes(model, cluster, layout, options);
  if (pipeline_scatter_gather(layout, options) == pipeline_scatter_gather(layout, options, true)) {
    inventory.add(stage, "pp: activation and gradient sends", CollectiveKind::kSendRecv,
                  CommGroup::kPp, 2, message, sends[0] + sends[1]);
    if (pipeline_scatter_gather(layout, options)) {
      inventory.add(stage, gather_name, CollectiveKind::kAllGather, CommGroup::kTp, layout.tp,
                    message * layout.tp, receives[0] + receives[1]);
    }
    return;
  }
  inventory.add(stage, "pp: activation sends", CollectiveKind::kSendRecv, CommGroup::kPp, 2,
                message, sends[0]);
  inventory.add(stage, "pp: gradient sends, whole (pipeline_grad_scatter_gather false)",
                CollectiveKind::kSendRecv, CommGroup::kPp, 2,
                pipeline_message_bytes(model, cluster, layout, options, true), sends[1]);
  inventory.add(stage, gather_name, CollectiveKind::kAllGather, CommGroup::kTp, layout.tp,
                message * layout.tp, receives[0]);
}

}  // namespace

std::vector<CollectiveTraffic> collective_inventory(const models::TransformerConfig& model,
                                                    const models::ClusterConfig& cluster,
                                                    const Layout& layout,
                                                    const PlanOptions& options) {
  Inventory inventory(cluster, layout);
  const int64_t m = layout.num_micro_batches();
  const int64_t e = element_bytes(cluster);
  PipelineSchedule schedule;
  if (layout.pp > 1) {
    schedule = generate_schedule(layout.schedule, layout.pp, layout.vpp, m, true,
                                 layout.microbatch_group, ep_overlap_schedule(layout, options));
  }
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    add_tensor_parallel(inventory, model, cluster, layout, options, stage);
    add_context_parallel(inventory, model, cluster, layout, options, stage);
    if (layout.pp > 1) {
      add_pipeline_transfers(inventory, model, cluster, layout, options, schedule, stage);
      if (embedding_gradient_all_reduced(model, layout) && (stage == 0 || stage == layout.pp - 1)) {
        inventory.add(
            stage,
            model.tied_embeddings ? "embedding: tied word-embedding gradient all-reduce"
                                  : "embedding: MTP word-embedding copy gradient all-reduce",
            CollectiveKind::kAllReduce, CommGroup::kEmbedding, 2,
            padded_vocab_size(model, layout.tp, options) / layout.tp * model.hidden_size * e, 1);
      }
    }
    add_data_parallel(inventory, model, cluster, layout, options, stage);
    add_mixture_of_experts(inventory, model, cluster, layout, options, stage);
  }
  return inventory.take();
}

}  // namespace meshplan::planner
