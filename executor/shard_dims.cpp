#include "shard_dims.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "meshplan/cost_model.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"

namespace meshplan::executor {

std::vector<int> cp_positions(int S, int cp, int cp_rank) {
  std::vector<int> positions;
  if (cp == 1) {
    for (int t = 0; t < S; t++) {
      positions.push_back(t);
    }
    return positions;
  }
  const int chunk = S / (2 * cp);
  for (int piece : {cp_rank, 2 * cp - 1 - cp_rank}) {
    for (int i = 0; i < chunk; i++) {
      positions.push_back(piece * chunk + i);
    }
  }
  return positions;
}

ShardDims make_shard_dims(const planner::Plan& plan, int tp_rank, int cp_rank, int ep_rank) {
  const models::TransformerConfig& model = plan.model;
  const planner::Layout& layout = plan.layout;
  ShardDims d;
  d.model = model;
  d.tp = static_cast<int>(layout.tp);
  d.tp_rank = tp_rank;
  d.sequence_parallel = layout.sequence_parallel;
  d.S = static_cast<int>(model.seq_length);
  d.cp = static_cast<int>(layout.cp);
  d.cp_rank = cp_rank;
  d.T = d.S / d.cp;
  d.positions = cp_positions(d.S, d.cp, cp_rank);
  d.B = static_cast<int>(layout.micro_batch);
  d.C = static_cast<int>(model.hidden_size);
  d.NH = static_cast<int>(model.num_attention_heads / layout.tp);
  d.KVH = static_cast<int>(model.num_kv_heads / layout.tp);
  d.HS = static_cast<int>(model.head_dim);
  d.QKV = (d.NH + 2 * d.KVH) * d.HS;
  d.AO = d.NH * d.HS;
  if (model.is_mla()) {
    d.RQ = static_cast<int>(model.q_lora_rank);
    d.RKV = static_cast<int>(model.kv_lora_rank);
    d.DN = static_cast<int>(model.qk_nope_head_dim);
    d.DR = static_cast<int>(model.qk_rope_head_dim);
    d.DV = static_cast<int>(model.v_head_dim);
    d.QUP = d.NH * (d.DN + d.DR);
    d.KVUP = d.NH * (d.DN + d.DV);
    d.AO = d.NH * d.DV;
  }
  d.F = static_cast<int>(model.ffn_hidden_size / layout.tp);
  d.FC1 = models::is_gated(model.activation) ? 2 * d.F : d.F;
  // The embedding and LM head hold the vocabulary padded as the plan costs it, ceil(V / (d tp))
  // d tp rows (planner::padded_vocab_size; Megatron-LM's vocab_size_with_padding): the padded
  // rows are never a token or a target but are ordinary logits of the softmax, as in
  // Megatron-LM's vocab_parallel_cross_entropy.
  d.V = static_cast<int>(planner::padded_vocab_size(model, layout.tp, plan.options) / layout.tp);
  d.vocab_start = tp_rank * d.V;
  d.N = d.T * d.B;
  d.ep = static_cast<int>(layout.ep);
  d.ep_rank = ep_rank;
  if (model.is_moe()) {
    d.E = static_cast<int>(model.num_experts);
    d.E_local = static_cast<int>(model.num_experts / layout.ep);
    d.expert0 = ep_rank * d.E_local;
    d.K = static_cast<int>(model.experts_per_token);
    d.FE = static_cast<int>(model.expert_ffn_hidden_size);
    d.FC1E = models::is_gated(model.activation) ? 2 * d.FE : d.FE;
    // Megatron-Core shared_experts.py: one MLP of moe_shared_expert_intermediate_size = S f_s.
    d.FS = static_cast<int>(model.num_shared_experts * model.shared_expert_ffn_hidden_size);
    d.FC1S = models::is_gated(model.activation) ? 2 * d.FS : d.FS;
    d.aux_loss_weight = plan.options.moe_aux_loss_coeff * static_cast<double>(layout.micro_batch) /
                        static_cast<double>(layout.global_batch);
  }
  d.T_local = d.sequence_parallel ? d.T / d.tp : d.T;
  d.N_local = d.T_local * d.B;
  d.t0 = d.sequence_parallel ? tp_rank * d.T_local : 0;
  return d;
}

namespace {

// The plan's options the CPU executor cannot run, one InputError naming the field.
void validate_options_for_executor(const planner::Plan& plan, const std::string& source) {
  const models::TransformerConfig& model = plan.model;
  const planner::Layout& layout = plan.layout;
  if (plan.options.overlap_tp_comm) {
    throw InputError(
        fmt::format("{}: options.overlap_tp_comm: the CPU executor does not overlap "
                    "tensor-parallel communication with GEMMs (true)",
                    source));
  }
  if (plan.options.fp8_param_gather) {
    throw InputError(fmt::format(
        "{}: options.fp8_param_gather: the CPU executor keeps no fp8 weights (true)", source));
  }
  if (plan.options.delay_wgrad_compute) {
    throw InputError(fmt::format(
        "{}: options.delay_wgrad_compute: the CPU executor computes each layer's weight "
        "gradients inside its backward (true)",
        source));
  }
  if (plan.options.overlap_moe_expert_parallel_comm) {
    throw InputError(fmt::format(
        "{}: options.overlap_moe_expert_parallel_comm: the CPU executor runs each micro-batch's "
        "forward and backward in turn, never merged (true)",
        source));
  }
  // Pipeline scatter/gather and distributed saved activations split one micro-batch's hidden
  // states (N x C floats; the planner excludes sequence parallelism from the latter) into tp
  // equal flat blocks.
  const int64_t hidden_elements = layout.micro_batch * model.seq_length * model.hidden_size;
  const auto require_tp_blocks = [&](bool used, const char* field, const char* what) {
    if (used && hidden_elements % layout.tp != 0) {
      throw InputError(
          fmt::format("{}: options.{}: {} does not split into tp equal blocks ({} % {})", source,
                      field, what, hidden_elements, layout.tp));
    }
  };
  require_tp_blocks(plan.options.distribute_saved_activations, "distribute_saved_activations",
                    "a block input");
  require_tp_blocks(plan.options.scatter_gather_pipeline, "scatter_gather_pipeline",
                    "a pipeline tensor");
  // overlap_p2p_comm (a megatron plan's default) is run, not refused: the executor's pipeline
  // sends are already non-blocking isends that complete while it computes, and each receive is
  // waited for where the op list needs the tensor (pipeline_runner.cpp send_tensor_,
  // receive_tensor_); the option changes when a transfer may run, never what is computed.
  if (layout.cp > 1 && plan.options.cp_comm != planner::CpComm::kP2p) {
    throw InputError(
        fmt::format("{}: options.cp_comm: the CPU executor runs the p2p ring only ({})", source,
                    planner::to_string(plan.options.cp_comm)));
  }
  if (plan.options.moe_dispatcher != planner::MoeDispatcher::kAllToAll) {
    throw InputError(fmt::format(
        "{}: options.moe_dispatcher: the CPU executor dispatches MoE tokens with an MPI "
        "all-to-all (alltoall), not DeepEP's flex kernels ({})",
        source, planner::to_string(plan.options.moe_dispatcher)));
  }
  if (!plan.options.pipeline_grad_scatter_gather) {
    throw InputError(fmt::format(
        "{}: options.pipeline_grad_scatter_gather: the CPU executor splits both directions "
        "(false)",
        source));
  }
  // A bucket holds whole fp32 elements, dp of them at least under ZeRO 1-3 (dp_buckets.h).
  const int64_t smallest_bucket_bytes =
      4 * (planner::zero_shards_optimizer(layout) ? layout.dp : 1);
  const int64_t bucket_bytes = planner::dp_bucket_bytes(plan.cluster, layout, plan.options);
  if (bucket_bytes < smallest_bucket_bytes) {
    throw InputError(
        fmt::format("{}: options.bucket_bytes: smaller than one fp32 element per data-parallel "
                    "rank ({} < {})",
                    source, bucket_bytes, smallest_bucket_bytes));
  }
}

// The mixture-of-experts parts the CPU executor does not build, one InputError naming the field.
// It runs routed experts (moe_layer.h) with tp 1 and ZeRO 0.
void validate_moe_for_executor(const planner::Plan& plan, const std::string& source) {
  const models::TransformerConfig& model = plan.model;
  const planner::Layout& layout = plan.layout;
  if (!model.is_moe()) {
    return;
  }
  const auto refuse = [&](const std::string& field, const std::string& what,
                          const std::string& value) {
    throw InputError(fmt::format("{}: {}: the CPU executor's mixture-of-experts {} ({})", source,
                                 field, what, value));
  };
  if (planner::expert_tensor_parallel(layout) != layout.tp) {
    refuse("layout.etp", "runs etp = tp only", std::to_string(layout.etp));
  }
  if (layout.tp > 1) {
    refuse("layout.tp", "runs tp 1 only; expert tensor parallelism is not built",
           std::to_string(layout.tp));
  }
  if (layout.zero > 0) {
    refuse("layout.zero", "runs ZeRO 0 only; experts are not ZeRO-sharded",
           std::to_string(layout.zero));
  }
  if (model.shared_expert_gate) {
    refuse("model.shared_expert_gate", "has no shared-expert gate", "true");
  }
  if (model.router_score_bias) {
    refuse("model.router_score_bias", "routes by softmax without a score bias", "true");
  }
  if (model.router_num_groups > 0) {
    refuse("model.router_num_groups", "routes over all experts, without group-limited routing",
           std::to_string(model.router_num_groups));
  }
}

// The multi-head latent attention parts the CPU executor does not build (mla_attention.h), one
// InputError naming the field.
void validate_mla_for_executor(const planner::Plan& plan, const std::string& source) {
  const models::TransformerConfig& model = plan.model;
  if (!model.is_mla()) {
    return;
  }
  const auto refuse = [&](const std::string& field, const std::string& what,
                          const std::string& value) {
    throw InputError(fmt::format("{}: {}: the CPU executor's multi-head latent attention {} ({})",
                                 source, field, what, value));
  };
  if (model.positions != models::Positions::kRope) {
    refuse("model.positions", "needs rope positions (its shared rotary key)",
           models::to_string(model.positions));
  }
  if (model.qk_rope_head_dim % 2 != 0) {
    refuse("model.qk_rope_head_dim", "needs an even rotary head dim",
           std::to_string(model.qk_rope_head_dim));
  }
  if (model.v_head_dim > model.qk_nope_head_dim + model.qk_rope_head_dim) {
    refuse(
        "model.v_head_dim",
        "pads value heads to qk_nope_head_dim + qk_rope_head_dim, so needs v_head_dim no "
        "larger",
        fmt::format("{} > {}", model.v_head_dim, model.qk_nope_head_dim + model.qk_rope_head_dim));
  }
}

}  // namespace

void validate_mtp_for_executor(const planner::Plan& plan, const std::string& source) {
  // Neither the CPU nor the GPU executor builds DeepSeek-V3's multi-token-prediction depths
  // (eh_proj, their layer and loss): the plan would train another model than it was costed for.
  if (plan.model.has_mtp()) {
    throw InputError(
        fmt::format("{}: model.mtp_num_layers: meshplan's executors do not build the "
                    "multi-token-prediction module; run the plan with Megatron-LM (--emit "
                    "megatron) ({})",
                    source, plan.model.mtp_num_layers));
  }
}

void validate_plan_for_executor(const planner::Plan& plan, const std::string& source) {
  const models::TransformerConfig& model = plan.model;
  const planner::Layout& layout = plan.layout;
  validate_mtp_for_executor(plan, source);
  if (plan.cluster.precision != models::Precision::kFp32) {
    throw InputError(
        fmt::format("{}: cluster.precision: the CPU executor runs fp32 only ({}); "
                    "plan with --cluster local-cpu",
                    source, models::to_string(plan.cluster.precision)));
  }
  if (model.positions == models::Positions::kAlibi) {
    throw InputError(fmt::format(
        "{}: model.positions: the CPU executor implements learned and rope positions ({})", source,
        models::to_string(model.positions)));
  }
  validate_moe_for_executor(plan, source);
  if (layout.recompute == planner::Recompute::kSelectiveOp) {
    throw InputError(fmt::format(
        "{}: layout.recompute: the CPU executor re-runs the modules recompute_modules names "
        "(selective) or the whole layer (full), not torchtitan's op-level policy (selective-op)",
        source));
  }
  validate_mla_for_executor(plan, source);
  // Gemma 2's attention soft-cap and scale run in the standard attention kernel
  // (ops/attention.h), not in MLA's or in the context-parallel ring's.
  const bool gemma2_scores =
      model.attn_logit_softcapping > 0.0 || model.has_attention_scale_override();
  if (gemma2_scores && (model.is_mla() || layout.cp > 1)) {
    const bool attention = model.attn_logit_softcapping > 0.0;
    throw InputError(fmt::format(
        "{}: model.{}: the CPU executor soft-caps and rescales the scores of standard attention "
        "without context parallelism only, not with {} ({})",
        source, attention ? "attn_logit_softcapping" : "query_pre_attn_scalar",
        model.is_mla() ? "MLA (kv_lora_rank)" : fmt::format("cp {}", layout.cp),
        attention ? model.attn_logit_softcapping : model.query_pre_attn_scalar));
  }
  // gpt-oss's sinks join the standard attention kernel's softmax (ops/attention.h), not the
  // context-parallel ring's (MLA with sinks the model validation refuses).
  if (model.attention_sinks && (model.is_mla() || layout.cp > 1)) {
    throw InputError(fmt::format(
        "{}: model.attention_sinks: the CPU executor adds the sinks to the softmax of standard "
        "attention without context parallelism only, not with {} (true)",
        source, model.is_mla() ? "MLA (kv_lora_rank)" : fmt::format("cp {}", layout.cp)));
  }
  if (planner::hybrid_sharded(layout)) {
    throw InputError(fmt::format(
        "{}: layout.dp_shard: the CPU executor shards ZeRO over all {} data-parallel ranks; "
        "hybrid sharding (dp_shard {}) is planned for PyTorch FSDP2 and Megatron-Core only",
        source, layout.dp, planner::dp_shard_size(layout)));
  }
  if (layout.cp > 1 && model.positions != models::Positions::kRope) {
    throw InputError(
        fmt::format("{}: layout.cp: the CPU executor's context parallelism needs rope positions "
                    "({}, cp {})",
                    source, models::to_string(model.positions), layout.cp));
  }
  if (planner::zero_shards_parameters(layout) && layout.vpp > 1) {
    throw InputError(
        fmt::format("{}: layout.vpp: the CPU executor's ZeRO 3 gathers a stage's parameters "
                    "whole, not per interleaved chunk ({})",
                    source, layout.vpp));
  }
  validate_options_for_executor(plan, source);
  const planner::Validity validity =
      planner::check_layout(model, plan.cluster, plan.num_gpus, layout,
                            /*allow_tp_across_nodes=*/true);
  if (!validity.ok()) {
    throw InputError(fmt::format("{}: layout: {}", source, validity.reason));
  }
  if (model.positions == models::Positions::kRope && !model.is_mla() && model.head_dim % 2 != 0) {
    throw InputError(fmt::format("{}: model.head_dim: RoPE needs an even head dim ({})", source,
                                 model.head_dim));
  }
  if (model.positions == models::Positions::kLearned &&
      model.seq_length > model.max_position_embeddings) {
    throw InputError(
        fmt::format("{}: model.seq_length: longer than the learned position table "
                    "({} > {})",
                    source, model.seq_length, model.max_position_embeddings));
  }
  // The kernels index with int (llm.c's convention): every tensor of a micro-batch must fit.
  const int64_t padded_vocab = planner::padded_vocab_size(model, layout.tp, plan.options);
  const int64_t widest = std::max(
      {model.hidden_size, (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim,
       model.ffn_hidden_size * 2, padded_vocab, model.seq_length});
  const int64_t elements = layout.micro_batch * model.seq_length * widest;
  if (elements > std::numeric_limits<int>::max() ||
      padded_vocab * model.hidden_size > std::numeric_limits<int>::max()) {
    throw InputError(
        fmt::format("{}: model: too large for the CPU executor, a micro-batch tensor "
                    "has {} elements",
                    source, elements));
  }
}

}  // namespace meshplan::executor
