// plan --emit megatron: the torchrun line and Megatron-LM pretrain_gpt.py flags of a plan. Every
// flag name is one Megatron-LM's parser defines (megatron/training/arguments.py, commit
// fd0df7d3; tests/data/emit/megatron_arguments_flags.txt lists them and the test checks).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "emit_common.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/emit.h"
#include "meshplan/pipeline_layout.h"

namespace meshplan::reports {

namespace {

using emit_detail::Flags;
using emit_detail::refuse;

// Uneven stages as Megatron-Core's --decoder-first-pipeline-num-layers and
// --decoder-last-pipeline-num-layers (arguments.py); split_has_flags admits only equal middle
// stages here, any other split goes out as --pipeline-model-parallel-layout.
void add_stage_layer_flags(const planner::Plan& plan, Flags& flags) {
  const std::vector<int64_t>& stages = plan.layout.stage_layers;
  if (stages.empty()) {
    return;
  }
  const size_t last = stages.size() - 1;
  const int64_t middle = stages.size() > 2 ? stages[1] : -1;
  if (stages.size() == 2 || stages.front() != middle) {
    flags.push_back({"--decoder-first-pipeline-num-layers", std::to_string(stages.front())});
  }
  if (stages.size() == 2 || stages[last] != middle) {
    flags.push_back({"--decoder-last-pipeline-num-layers", std::to_string(stages[last])});
  }
}

// An embedding/loss-accounted split (planner::stage_layer_range) as Megatron-Core writes it:
// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split for the
// short first / last stage and --num-layers-per-virtual-pipeline-stage L / vpp, from which
// arguments.py derives vpp = (l + accounted) / pp / that; transformer_block.py
// get_num_layers_to_build then builds one layer less in the first / last chunk.
void add_accounted_split_flags(const planner::Plan& plan, Flags& flags) {
  // The short ends are the counts vpp does not divide (L - 1 with L % vpp == 0).
  const std::vector<int64_t>& stages = plan.layout.stage_layers;
  const int64_t vpp = plan.layout.vpp;
  const bool embedding = stages.front() % vpp != 0;
  if (embedding) {
    flags.push_back({"--account-for-embedding-in-pipeline-split", ""});
  }
  if (stages.back() % vpp != 0) {
    flags.push_back({"--account-for-loss-in-pipeline-split", ""});
  }
  const int64_t slots = stages.front() + (embedding ? 1 : 0);
  flags.push_back({"--num-layers-per-virtual-pipeline-stage", std::to_string(slots / vpp)});
}

// Whether an uneven split has Megatron-Core flags of its own: the embedding/loss-accounted
// form under interleaving, or first/last counts (equal middle stages) that vpp divides.
bool split_has_flags(const planner::Layout& layout) {
  const std::vector<int64_t>& stages = layout.stage_layers;
  if (layout.schedule == planner::ScheduleKind::kInterleaved &&
      planner::is_accounted_split(stages, layout.vpp)) {
    return true;
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    const bool middle = s > 0 && s + 1 < stages.size();
    if (stages[s] % layout.vpp != 0 || (middle && stages[s] != stages[1])) {
      return false;
    }
  }
  return true;
}

// Parallel sizes, schedule, recompute, data-parallel sharding and overlaps.
void add_parallel_flags(EmitTarget target, const planner::Plan& plan, Flags& flags) {
  const planner::Layout& layout = plan.layout;
  flags.push_back({"--tensor-model-parallel-size", std::to_string(layout.tp)});
  flags.push_back({"--pipeline-model-parallel-size", std::to_string(layout.pp)});
  if (layout.cp > 1) {
    // p2p (the ring) is Megatron-Core's default --cp-comm-type; a2a is Ulysses.
    flags.push_back({"--context-parallel-size", std::to_string(layout.cp)});
    if (plan.options.cp_comm == planner::CpComm::kA2a) {
      flags.push_back({"--cp-comm-type", "a2a"});
    }
  }
  if (layout.ep > 1) {
    flags.push_back({"--expert-model-parallel-size", std::to_string(layout.ep)});
  }
  if (planner::expert_tensor_parallel(layout) != layout.tp) {
    // arguments.py: absent, --expert-tensor-parallel-size defaults to tp.
    flags.push_back({"--expert-tensor-parallel-size", std::to_string(layout.etp)});
  }
  const bool accounted = layout.schedule == planner::ScheduleKind::kInterleaved &&
                         planner::is_accounted_split(layout.stage_layers, layout.vpp);
  const bool custom = !layout.virtual_stage_layers.empty() ||
                      (!layout.stage_layers.empty() && !split_has_flags(layout));
  if (custom) {
    // Any other split as Megatron-Core's --pipeline-model-parallel-layout
    // (pipeline_parallel_layer_layout.py parse_str_to_list): it fixes the split and vpp (its
    // stage count / pp), and Megatron-LM takes no other split or virtual-stage flag with it.
    flags.push_back({"--pipeline-model-parallel-layout",
                     fmt::format("\"{}\"", planner::format_pipeline_layout(plan.model, layout))});
  } else if (accounted) {
    add_accounted_split_flags(plan, flags);
  } else if (layout.schedule == planner::ScheduleKind::kInterleaved) {
    if (layout.stage_layers.empty()) {
      // Megatron-LM derives vpp = l / (pp * layers per virtual stage).
      flags.push_back(
          {"--num-layers-per-virtual-pipeline-stage",
           std::to_string(planner::stage_layer_range(plan.model, layout, 0, 0).count())});
    } else {
      // arguments.py: "please use --num-virtual-stages-per-pipeline-rank to specify virtual
      // pipeline parallel degree when enable uneven pipeline parallelism".
      flags.push_back({"--num-virtual-stages-per-pipeline-rank", std::to_string(layout.vpp)});
    }
  }
  if (layout.microbatch_group > 0) {
    // model_parallel_config.py microbatch_group_size_per_vp_stage (default pp when absent).
    flags.push_back({"--microbatch-group-size-per-virtual-pipeline-stage",
                     std::to_string(layout.microbatch_group)});
  }
  if (!accounted && !custom) {
    add_stage_layer_flags(plan, flags);
  }
  if (layout.sequence_parallel) {
    flags.push_back({"--sequence-parallel", ""});
  }
  if (layout.recompute == planner::Recompute::kSelectiveOp) {
    refuse(target, "layout.recompute",
           "Megatron-LM has no op-level (torchtitan) selective checkpointing", "selective-op");
  }
  if (layout.recompute == planner::Recompute::kSelective) {
    flags.push_back({"--recompute-granularity", "selective"});
    if (layout.recompute_modules != planner::kRecomputeCoreAttn) {
      // Megatron-LM arguments.py --recompute-modules (nargs='*', space-separated names).
      std::string names = planner::format_recompute_modules(layout.recompute_modules);
      std::replace(names.begin(), names.end(), ',', ' ');
      flags.push_back({"--recompute-modules", names});
    }
  } else if (layout.recompute == planner::Recompute::kFull) {
    // meshplan's full recompute checkpoints every layer's input (Korthikanti et al. 2022,
    // Sec. 5): Megatron's uniform method with one layer per checkpointed group, or
    // recompute_group_layers per group; with recompute_layers, the block method on each
    // chunk's first that many layers (megatron/core/recompute.py, d98e8a64).
    flags.push_back({"--recompute-granularity", "full"});
    if (layout.recompute_layers > 0) {
      flags.push_back({"--recompute-method", "block"});
      flags.push_back({"--recompute-num-layers", std::to_string(layout.recompute_layers)});
    } else {
      flags.push_back({"--recompute-method", "uniform"});
      flags.push_back({"--recompute-num-layers",
                       std::to_string(std::max<int64_t>(layout.recompute_group_layers, 1))});
    }
    if (plan.options.distribute_saved_activations) {
      flags.push_back({"--distribute-saved-activations", ""});
    }
  }
  // ZeRO 1 is the distributed optimizer; 2 and 3 are Megatron-FSDP's optim_grads and
  // optim_grads_params (planner/validity.cpp check_framework cites the docs).
  if (layout.zero == 1) {
    flags.push_back({"--use-distributed-optimizer", ""});
    // Hybrid sharding at ZeRO 1: dp / dp_shard optimizer instances (distributed_data_parallel_
    // config.py num_distributed_optimizer_instances, "the factor by which the DP domain is
    // sharded to have the partial DistOpt enabled").
    if (planner::hybrid_sharded(layout)) {
      flags.push_back({"--num-distributed-optimizer-instances",
                       std::to_string(planner::dp_replicate_size(layout))});
    }
  } else if (layout.zero >= 2) {
    flags.push_back({"--use-megatron-fsdp", ""});
    flags.push_back({"--data-parallel-sharding-strategy",
                     layout.zero == 2 ? "optim_grads" : "optim_grads_params"});
    // arguments.py validate_args: "Megatron FSDP only supports fsdp_dtensor checkpoint format".
    flags.push_back({"--ckpt-format", "fsdp_dtensor"});
  }
  if (layout.placement == planner::Placement::kTpPpDp) {
    // initialize.py: order 'tp-cp-ep-pp-dp' instead of the default 'tp-cp-ep-dp-pp'.
    flags.push_back({"--use-tp-pp-dp-mapping", ""});
  }
  if (plan.options.overlap_grad_reduce) {
    flags.push_back({"--overlap-grad-reduce", ""});
  }
  // Megatron asserts --overlap-param-gather needs the distributed optimizer or Megatron-FSDP;
  // without ZeRO there is no parameter gather to overlap.
  if (plan.options.overlap_param_gather && layout.zero >= 1) {
    // arguments.py validate_args: "Must use --overlap-param-gather with --overlap-grad-reduce".
    if (!plan.options.overlap_grad_reduce) {
      refuse(target, "options.overlap_param_gather",
             "Megatron-LM overlaps the parameter gather only with --overlap-grad-reduce",
             "on, overlap_grad_reduce off");
    }
    flags.push_back({"--overlap-param-gather", ""});
  }
  if (plan.options.overlap_tp_comm) {
    flags.push_back({"--tp-comm-overlap", ""});
  }
  // Megatron-LM overlaps the interleaved schedule's sends by default since 4eeff55d (2023-10);
  // its parser has only the opt-out (arguments.py --no-overlap-p2p-communication, store_false)
  // and turns the overlap off itself for other schedules.
  if (layout.schedule == planner::ScheduleKind::kInterleaved && !plan.options.overlap_p2p_comm) {
    flags.push_back({"--no-overlap-p2p-communication", ""});
  }
  // Megatron-Core's p2p_communication.py sends whole tensors: --scatter-gather-tensors-in-pipeline
  // was read only by the legacy model (fd0df7d3) and is gone since 10e7b74597 (2026-04-03).
  if (planner::pipeline_scatter_gather(layout, plan.options, false)) {
    refuse(target, "options.scatter_gather_pipeline",
           "Megatron-Core sends whole tensors between pipeline stages (Megatron-LM 2021's "
           "scatter/gather is gone)",
           "true");
  }
  // Megatron's --ddp-bucket-size counts parameters, meshplan's bucket counts bytes of the
  // gradients, in the reduce dtype (planner/dp_buckets.cpp).
  flags.push_back(
      {"--ddp-bucket-size",
       std::to_string(planner::dp_bucket_bytes(plan.cluster, layout, plan.options) /
                      planner::grad_reduce_element_bytes(plan.cluster, layout, plan.options))});
  flags.push_back({"--micro-batch-size", std::to_string(layout.micro_batch)});
  flags.push_back({"--global-batch-size", std::to_string(layout.global_batch)});
}

// --bf16 makes Megatron-LM reduce gradients in fp32 (arguments.py validate_args sets
// accumulate_allreduce_grads_in_fp32) unless --grad-reduce-in-bf16; Megatron-FSDP (zero 2, 3)
// keeps bf16 main grads by default, fp32 being refused by the planner there.
void add_grad_reduce_flag(const planner::Plan& plan, Flags& flags) {
  if (plan.cluster.precision == models::Precision::kBf16Mixed && plan.layout.zero <= 1 &&
      planner::grad_reduce_element_bytes(plan.cluster, plan.layout, plan.options) < 4) {
    flags.push_back({"--grad-reduce-in-bf16", ""});
  }
}

// The biases: Megatron has one switch for every linear layer, plus --add-qkv-bias.
void add_bias_flags(EmitTarget target, const models::TransformerConfig& m, Flags& flags) {
  if (m.attention_output_bias != m.mlp_bias) {
    refuse(
        target, "model.mlp_bias",
        "Megatron-LM biases the attention output and the MLP together (--disable-bias-linear)",
        fmt::format("mlp_bias {}, attention_output_bias {}", m.mlp_bias, m.attention_output_bias));
  }
  if (!m.mlp_bias) {
    flags.push_back({"--disable-bias-linear", ""});
    if (m.qkv_bias) {
      flags.push_back({"--add-qkv-bias", ""});
    }
  } else if (!m.qkv_bias) {
    refuse(target, "model.qkv_bias", "Megatron-LM's linear biases include the QKV projection",
           "false");
  }
}

// gpt-oss's gated-unit offset and clamp and its attention sinks: TransformerConfig's
// glu_linear_offset, activation_func_clamp_value and softmax_type, flags generated from the
// dataclass (argument_utils.py, d98e8a64), as Megatron-LM's examples/gptoss/02_train.sh passes
// them. transformer_config.py __post_init__ allows the offset with quick_gelu only (fused bias
// activation) and a SwiGLU clamp on MoE experts only.
void add_gated_unit_variant_flags(EmitTarget target, const models::TransformerConfig& m,
                                  Flags& flags) {
  const bool quick = m.activation == models::Activation::kQuickGeglu;
  if (m.glu_linear_offset != 0.0) {
    if (!quick) {
      refuse(target, "model.glu_linear_offset",
             "Megatron-Core's fused bias-GLU applies the offset with --quick-geglu only",
             fmt::format("{:g}", m.glu_linear_offset));
    }
    flags.push_back({"--glu-linear-offset", fmt::format("{:g}", m.glu_linear_offset)});
  }
  if (m.activation_clamp_value != 0.0) {
    if (!quick && !(m.activation == models::Activation::kSwiglu && m.is_moe())) {
      refuse(target, "model.activation_clamp_value",
             "Megatron-Core clamps quick-GELU units and MoE experts' SwiGLU only",
             fmt::format("{:g}", m.activation_clamp_value));
    }
    flags.push_back(
        {"--activation-func-clamp-value", fmt::format("{:g}", m.activation_clamp_value)});
  }
  if (m.attention_sinks) {
    flags.push_back({"--softmax-type", "learnable"});
  }
}

// YaRN (d98e8a64). Multi-head latent attention: --rope-type yarn (MLATransformerConfig's
// default) with --rotary-scaling-factor, --mscale, --mscale-all-dim (the mla group); its
// original context, betas and rounding are MLATransformerConfig's defaults (4096, 32, 1, rounded:
// no flag reaches them, argument_utils.py _apply_yarn_config_from_args skips MLA). Other models:
// --position-embedding-type yarn (written by the caller) and the yarn_* fields that
// _apply_yarn_config_from_args maps, all written so the script states them. YarnRotaryEmbedding
// turns kv_channels wholly (yarn_rotary_pos_embedding.py), so partial rotary is refused.
void add_yarn_flags(const models::TransformerConfig& m, EmitTarget target, Flags& flags) {
  const models::RopeScaling& scaling = m.rope_scaling;
  if (m.is_mla()) {
    models::RopeScaling mla_defaults;
    mla_defaults.type = models::RopeScalingType::kYarn;
    mla_defaults.factor = scaling.factor;
    mla_defaults.original_max_positions = 4096;
    mla_defaults.mscale = scaling.mscale;
    mla_defaults.mscale_all_dim = scaling.mscale_all_dim;
    if (scaling != mla_defaults) {
      refuse(
          target, "model.rope_scaling",
          "Megatron-Core's MLA YaRN takes MLATransformerConfig's original context 4096, beta "
          "32 / 1 and rounded ramp; no flag sets others",
          fmt::format("original {}, beta {:g} / {:g}, truncate {}", scaling.original_max_positions,
                      scaling.beta_fast, scaling.beta_slow, scaling.truncate));
    }
    flags.push_back({"--rope-type", "yarn"});
  } else if (m.has_partial_rotary()) {
    refuse(target, "model.rotary_percent",
           "Megatron-Core's YarnRotaryEmbedding turns every kv channel; YaRN over part of a head "
           "has no flag",
           fmt::format("{:g}", m.rotary_percent));
  }
  flags.push_back({"--rotary-scaling-factor", fmt::format("{:g}", scaling.factor)});
  if (!m.is_mla()) {
    flags.push_back({"--yarn-original-max-position-embeddings",
                     std::to_string(scaling.original_max_positions)});
    flags.push_back({"--yarn-beta-fast", fmt::format("{:g}", scaling.beta_fast)});
    flags.push_back({"--yarn-beta-slow", fmt::format("{:g}", scaling.beta_slow)});
    flags.push_back({scaling.truncate ? "--yarn-correction-range-round-to-int"
                                      : "--no-yarn-correction-range-round-to-int",
                     ""});
  }
  flags.push_back({"--mscale", fmt::format("{:g}", scaling.mscale)});
  flags.push_back({"--mscale-all-dim", fmt::format("{:g}", scaling.mscale_all_dim)});
}

// The rotary frequencies' scaling (models.h RopeScaling) as Megatron-LM's flags (d98e8a64):
// --use-rope-scaling --rope-scaling-factor F builds RotaryEmbedding(rope_scaling=True), whose
// _apply_scaling fixes Llama 3.1's bands (low 1, high 4, original 8192); linear is
// --rotary-seq-len-interpolation-factor (type=int; get_freqs_non_repeated divides the positions
// by it); YaRN add_yarn_flags. MultiLatentAttention builds its RotaryEmbedding with neither of
// the first two (multi_latent_attention.py).
void add_rope_scaling_flags(const models::TransformerConfig& m, EmitTarget target, Flags& flags) {
  if (!m.has_rope_scaling()) {
    return;
  }
  const models::RopeScaling& scaling = m.rope_scaling;
  if (scaling.type == models::RopeScalingType::kYarn) {
    add_yarn_flags(m, target, flags);
    return;
  }
  const std::string value =
      fmt::format("{} x{:g}", models::to_string(scaling.type), scaling.factor);
  if (m.is_mla()) {
    refuse(target, "model.rope_scaling",
           "Megatron-Core's MultiLatentAttention turns its rotary part unscaled or by YaRN (no "
           "--use-rope-scaling there)",
           value);
  }
  if (scaling.type == models::RopeScalingType::kLinear) {
    if (scaling.factor != std::floor(scaling.factor)) {
      refuse(target, "model.rope_scaling_factor",
             "--rotary-seq-len-interpolation-factor is an integer flag (arguments.py type=int)",
             value);
    }
    flags.push_back({"--rotary-seq-len-interpolation-factor",
                     std::to_string(static_cast<int64_t>(scaling.factor))});
    return;
  }
  // RopeScaling's defaults are Llama 3.1's bands, the ones _apply_scaling fixes.
  models::RopeScaling llama31;
  llama31.type = models::RopeScalingType::kLlama3;
  llama31.factor = scaling.factor;
  if (scaling != llama31) {
    refuse(target, "model.rope_scaling",
           "Megatron-Core's _apply_scaling fixes Llama 3.1's bands (low_freq_factor 1, "
           "high_freq_factor 4, original 8192); no flag sets others",
           fmt::format("low {:g}, high {:g}, original {}", scaling.low_freq_factor,
                       scaling.high_freq_factor, scaling.original_max_positions));
  }
  flags.push_back({"--use-rope-scaling", ""});
  flags.push_back({"--rope-scaling-factor", fmt::format("{:g}", scaling.factor)});
}

// --no-rope-freq's value: N when the list is Megatron-Core's expansion of an integer N (every
// N-th layer NoPE, transformer_config.py), else the list as a quoted Python expression.
std::string no_rope_freq_argument(const std::vector<int>& layers) {
  const auto first_nope = std::find(layers.begin(), layers.end(), 1);
  const size_t every = static_cast<size_t>(first_nope - layers.begin()) + 1;
  bool periodic = first_nope != layers.end() && layers.size() % every == 0;
  for (size_t layer = 0; periodic && layer < layers.size(); ++layer) {
    periodic = layers[layer] == ((layer + 1) % every == 0 ? 1 : 0);
  }
  if (periodic && every >= 2) {
    return std::to_string(every);
  }
  return fmt::format("\"[{}]\"", fmt::join(layers, ","));
}

// Multi-head latent attention (DeepSeek-V2 Sec. 2.1): Megatron-Core's MLATransformerConfig
// (transformer_config.py, d98e8a64) through arguments.py's mla group (fd0df7d3 _add_mla_args):
// --q-lora-rank (left out when 0: the queries are not compressed, q_lora_rank None),
// --kv-lora-rank, --qk-head-dim (the part without rotary positions), --qk-pos-emb-head-dim,
// --v-head-dim. --qk-layernorm builds the latent RMSNorms meshplan costs with every MLA layer
// (gpt_layer_specs.py: the q and kv up projections become layer-norm linears under
// qk_layernorm). No --kv-channels: MLA hands its own k and v widths to the core attention
// (extensions/transformer_engine.py TEDotProductAttention k_channels, v_channels), and Megatron's
// MLA takes no grouped-query attention (num_kv_heads = a here).
void add_mla_flags(const models::TransformerConfig& m, Flags& flags) {
  flags.push_back({"--multi-latent-attention", ""});
  if (m.q_lora_rank > 0) {
    flags.push_back({"--q-lora-rank", std::to_string(m.q_lora_rank)});
  }
  flags.push_back({"--kv-lora-rank", std::to_string(m.kv_lora_rank)});
  flags.push_back({"--qk-head-dim", std::to_string(m.qk_nope_head_dim)});
  flags.push_back({"--qk-pos-emb-head-dim", std::to_string(m.qk_rope_head_dim)});
  flags.push_back({"--v-head-dim", std::to_string(m.v_head_dim)});
  flags.push_back({"--qk-layernorm", ""});  // validate_model refuses qk_norm with MLA
}

// Mixture-of-experts shape as the planner costs it: dropless top-k routing, Megatron-Core's
// alltoall (or, with options.moe_dispatcher flex, its flex) token dispatcher and grouped expert
// GEMMs (planner/moe_cost.cpp), shared experts as one MLP of S f_s. What has no such flag here is
// refused by name.
void add_moe_flags(EmitTarget target, const models::TransformerConfig& m,
                   const planner::PlanOptions& options, Flags& flags) {
  if (m.qk_norm) {
    flags.push_back({"--qk-layernorm", ""});
  }
  if (m.qk_l2_norm) {
    // attention.py (d98e8a64): qk_l2_norm builds L2Norm on every layer; Llama 4 normalises only
    // its rotary layers (Megatron-Bridge llama4_utils.py Llama4SelfAttention, transformers
    // Llama4TextAttention), which differs once some layer is NoPE.
    if (!m.no_rope_freq.empty()) {
      refuse(target, "model.qk_l2_norm",
             "Megatron-LM's --qk-l2-norm normalises every layer, the model only its rotary ones "
             "(no_rope_freq gives NoPE layers)",
             "true");
    }
    flags.push_back({"--qk-l2-norm", ""});
  }
  if (!m.is_moe()) {
    return;
  }
  if (m.shared_expert_gate) {
    refuse(target, "model.shared_expert_gate", "Megatron-LM has no gate on the shared experts",
           "true");
  }
  if (m.router_bias != m.mlp_bias) {
    // moe/router.py Router.__init__ (d98e8a64): a bias when config.add_bias_linear.
    refuse(target, "model.router_bias",
           "Megatron-LM biases the router with the linear layers (--disable-bias-linear)",
           fmt::format("router_bias {}, mlp_bias {}", m.router_bias, m.mlp_bias));
  }
  flags.push_back({"--num-experts", std::to_string(m.num_experts)});
  if (m.first_dense_layers > 0) {
    // The dense prefix as a per-layer pattern (arguments.py moe_freq_type: a Python list
    // expression, 1 an MoE layer, 0 dense, as long as --num-layers; transformer_config.py
    // moe_layer_freq), DeepSeek-V3's "[0]*3+[1]*58" (Megatron-Bridge DeepSeekV3Provider).
    flags.push_back({"--moe-layer-freq",
                     fmt::format("\"[0]*{}+[1]*{}\"", m.first_dense_layers, m.num_moe_layers())});
  } else if (!m.moe_layers.empty()) {
    // Any other pattern as the list itself, e.g. "[1,0,1,0]" for MoE every other layer.
    flags.push_back({"--moe-layer-freq", fmt::format("\"[{}]\"", fmt::join(m.moe_layers, ","))});
  }
  flags.push_back({"--moe-router-topk", std::to_string(m.experts_per_token)});
  if (m.router_score_bias) {
    // DeepSeek-V3's aux-loss-free router (Sec. 2.1.2; transformers DeepseekV3TopkRouter:
    // sigmoid scores plus e_score_correction_bias for the choice): Megatron-Core's
    // moe_router_score_function "sigmoid" with moe_router_enable_expert_bias, which
    // transformer_config.py allows with sigmoid only (d98e8a64). Its update rate and
    // routed_scaling_factor (--moe-router-topk-scaling-factor) change no cost: "$@".
    flags.push_back({"--moe-router-score-function", "sigmoid"});
    flags.push_back({"--moe-router-enable-expert-bias", ""});
  }
  if (m.router_probs_on_input) {
    // Llama 4's router: experts.py (d98e8a64) scales the input by the probability under
    // moe_apply_probs_on_input, which it allows at top-1; sigmoid scores, not normalised at k 1.
    if (!m.router_score_bias) {
      flags.push_back({"--moe-router-score-function", "sigmoid"});
    }
    flags.push_back({"--moe-apply-probs-on-input", ""});
  }
  if (m.router_num_groups > 0) {
    // Group-limited routing (moe_utils.py group_limited_topk; transformer_config.py asserts
    // E % G == 0 and M <= G, as validate_model does), costed by the flex dispatcher's node count.
    flags.push_back({"--moe-router-num-groups", std::to_string(m.router_num_groups)});
    flags.push_back({"--moe-router-group-topk", std::to_string(m.router_group_topk)});
  }
  flags.push_back({"--moe-ffn-hidden-size", std::to_string(m.expert_ffn_hidden_size)});
  if (m.num_shared_experts > 0) {
    flags.push_back({"--moe-shared-expert-intermediate-size",
                     std::to_string(m.num_shared_experts * m.shared_expert_ffn_hidden_size)});
  }
  if (options.moe_dispatcher == planner::MoeDispatcher::kFlex) {
    // MoEFlexTokenDispatcher over DeepEP, whose normal kernels the cost model reads
    // (planner/moe_cost.cpp moe_flex_traffic): transformer_config.py moe_token_dispatcher_type
    // "flex", moe_flex_dispatcher_backend "deepep" (d98e8a64; deepep is also its default), flags
    // made from those fields (training/arguments.py ArgumentGroupFactory(TransformerConfig)).
    flags.push_back({"--moe-token-dispatcher-type", "flex"});
    flags.push_back({"--moe-flex-dispatcher-backend", "deepep"});
  } else {
    flags.push_back({"--moe-token-dispatcher-type", "alltoall"});
  }
  flags.push_back({"--moe-grouped-gemm", ""});
  if (options.overlap_moe_expert_parallel_comm) {
    // TransformerConfig.overlap_moe_expert_parallel_comm as arguments.py's ArgumentGroupFactory
    // spells it (d98e8a64); alltoall dispatcher as above.
    flags.push_back({"--overlap-moe-expert-parallel-comm", ""});
    if (options.delay_wgrad_compute) {  // TransformerConfig.delay_wgrad_compute
      flags.push_back({"--delay-wgrad-compute", ""});
    }
  }
  if (options.moe_aux_loss_coeff > 0) {
    // The router's load-balancing loss (--moe-router-load-balancing-type aux_loss, the default).
    flags.push_back({"--moe-aux-loss-coeff", fmt::format("{}", options.moe_aux_loss_coeff)});
  }
}

// Model shape, positions, norm, activation, dropout, attention kernel, precision.
void add_model_flags(EmitTarget target, const planner::Plan& plan, Flags& flags) {
  const models::TransformerConfig& m = plan.model;
  flags.push_back({"--num-layers", std::to_string(m.num_layers)});
  flags.push_back({"--hidden-size", std::to_string(m.hidden_size)});
  flags.push_back({"--num-attention-heads", std::to_string(m.num_attention_heads)});
  if (m.num_kv_heads != m.num_attention_heads) {
    flags.push_back({"--group-query-attention", ""});
    flags.push_back({"--num-query-groups", std::to_string(m.num_kv_heads)});
  }
  if (m.is_mla()) {
    add_mla_flags(m, flags);
  } else if (m.head_dim * m.num_attention_heads != m.hidden_size) {
    flags.push_back({"--kv-channels", std::to_string(m.head_dim)});
  }
  flags.push_back({"--ffn-hidden-size", std::to_string(m.ffn_hidden_size)});
  flags.push_back({"--seq-length", std::to_string(m.seq_length)});
  if (m.is_windowed()) {
    // Query i attends keys i - w < j <= i: Megatron-Core window_size (w - 1, 0), written
    // "--window-size w-1,0" (arguments.py tuple_type, d98e8a64; Megatron-Bridge's Gemma 2
    // bridge sets window_size = (sliding_window - 1, 0)), on every layer unless
    // --window-attn-skip-freq chooses them: N as is, or the list as a Python list expression
    // that moe_freq_type evaluates ("[1,0,1,0]"; arguments.py _eval_pattern admits digits,
    // commas and brackets), read by is_layer_window_attention as meshplan reads the model's.
    flags.push_back({"--window-size", fmt::format("{},0", m.sliding_window - 1)});
    if (m.window_attn_skip_freq != 0) {
      flags.push_back({"--window-attn-skip-freq", std::to_string(m.window_attn_skip_freq)});
    } else if (!m.window_attn_layers.empty()) {
      flags.push_back({"--window-attn-skip-freq",
                       fmt::format("\"[{}]\"", fmt::join(m.window_attn_layers, ","))});
    }
  }
  if (m.positions == models::Positions::kAlibi) {
    refuse(target, "model.positions", "Megatron-LM has no ALiBi position embedding", "alibi");
  }
  const bool learned = m.positions == models::Positions::kLearned;
  flags.push_back({"--max-position-embeddings",
                   std::to_string(learned ? m.max_position_embeddings : m.seq_length)});
  // YaRN outside MLA is a position-embedding type of its own (gpt_model.py); MLA reads
  // --rope-type (add_yarn_flags).
  const bool dense_yarn = m.rope_scaling.type == models::RopeScalingType::kYarn && !m.is_mla();
  flags.push_back(
      {"--position-embedding-type", learned ? "learned_absolute" : (dense_yarn ? "yarn" : "rope")});
  if (!learned) {
    // arguments.py --rotary-base (d98e8a64, type=int, default 10000): GPTModel's and MLA's
    // RotaryEmbedding base, written whatever its value so the script states it.
    flags.push_back({"--rotary-base", emit_detail::integral_rope_theta(m, target)});
  }
  add_rope_scaling_flags(m, target, flags);
  if (m.has_partial_rotary()) {
    // arguments.py --rotary-percent (d98e8a64): RotaryEmbedding over int(kv_channels x percent)
    // channels (rotary_pos_embedding.py).
    flags.push_back({"--rotary-percent", fmt::format("{:g}", m.rotary_percent)});
  }
  if (!m.no_rope_freq.empty()) {
    // arguments.py --no-rope-freq (d98e8a64, no_rope_freq_type): an integer N (every N-th layer
    // NoPE) or a Python list expression; attention.py skips rope where the entry is 1.
    flags.push_back({"--no-rope-freq", no_rope_freq_argument(m.no_rope_freq)});
  }
  // attention_chunk_size: a plan's sequence is at most the chunk (validate_training_length),
  // where chunked attention equals full causal attention, so no flag is needed.
  flags.push_back({"--normalization", m.norm == models::Norm::kRmsNorm ? "RMSNorm" : "LayerNorm"});
  if (m.activation == models::Activation::kSwiglu) {
    flags.push_back({"--swiglu", ""});
  } else if (m.activation == models::Activation::kQuickGeglu) {
    // argument_utils.py (d98e8a64): --quick-geglu sets gated_linear_unit and quick_gelu.
    flags.push_back({"--quick-geglu", ""});
  } else if (m.activation == models::Activation::kGeglu) {
    // megatron/training/arguments.py at d98e8a64: --swiglu gates with SiLU and --quick-geglu
    // with quick_gelu(x) = x sigmoid(1.702 x) (core/fusions/fused_bias_geglu.py); no flag gates
    // with the tanh GELU (Megatron-Bridge sets TransformerConfig.activation_func in Python).
    refuse(target, "model.activation",
           "Megatron-LM has no flag for a tanh-GELU-gated MLP (--swiglu gates with SiLU, "
           "--quick-geglu with x sigmoid(1.702 x))",
           "geglu");
  }
  add_gated_unit_variant_flags(target, m, flags);
  if (m.norm_unit_offset) {
    // transformer_config.py layernorm_zero_centered_gamma (d98e8a64): the (1 + gamma) norm.
    flags.push_back({"--apply-layernorm-1p", ""});
  }
  if (m.scale_embeddings) {
    refuse(target, "model.scale_embeddings",
           "Megatron-LM has no flag to scale the embeddings by sqrt(h) (Megatron-Bridge's "
           "EmbeddingScalingMixin does it in Python)",
           "true");
  }
  if (m.sandwich_norm) {
    refuse(target, "model.sandwich_norm",
           "Megatron-Core's TransformerLayer has no post-attention and post-MLP norms", "true");
  }
  if (m.has_logit_softcapping()) {
    // No soft-capping flag in megatron/training/arguments.py (d98e8a64; attention.py passes
    // FlashAttention "softcap": 0.0); Megatron-Bridge's Gemma 2 caps in its own attention and
    // output layer (src/megatron/bridge/models/gemma/gemma2_provider.py, 067f987d).
    const bool attention = m.attn_logit_softcapping > 0.0;
    refuse(target, attention ? "model.attn_logit_softcapping" : "model.final_logit_softcapping",
           "Megatron-LM has no flag for Gemma 2's logit soft-capping",
           fmt::format("{}", attention ? m.attn_logit_softcapping : m.final_logit_softcapping));
  }
  if (m.has_attention_scale_override()) {
    refuse(target, "model.query_pre_attn_scalar",
           "Megatron-LM has no flag for an attention scale other than 1/sqrt(kv_channels)",
           fmt::format("{} != head_dim {}", m.query_pre_attn_scalar, m.head_dim));
  }
  if (!m.tied_embeddings) {
    flags.push_back({"--untie-embeddings-and-output-weights", ""});
  }
  if (m.has_mtp()) {
    // TransformerConfig.mtp_num_layers (d98e8a64 transformer_config.py, an argparse flag through
    // arguments.py's dataclass arguments): the depths on the last pipeline stage, as costed.
    // --mtp-loss-scaling-factor keeps its default 0.1: the loss weight changes no cost.
    flags.push_back({"--mtp-num-layers", std::to_string(m.mtp_num_layers)});
  }
  if (m.parallel_residual) {
    // megatron/core/transformer/transformer_layer.py TransformerLayer.forward: norm, attention,
    // residual add, norm, MLP, residual add, with no parallel-block option.
    refuse(target, "model.parallel_residual",
           "Megatron-Core's TransformerLayer runs the attention and then the MLP, not in parallel",
           "true");
  }
  add_bias_flags(target, m, flags);
  add_moe_flags(target, m, plan.options, flags);
  if (!m.dropout) {
    flags.push_back({"--attention-dropout", "0"});
    flags.push_back({"--hidden-dropout", "0"});
  }
  flags.push_back({"--vocab-size", std::to_string(m.vocab_size)});
  // The divisor the plan's embedding and LM head were costed with (planner::padded_vocab_size):
  // Megatron-LM pads whatever tokenizer's vocabulary to a multiple of it times tp
  // (build_tokenizer.py vocab_size_with_padding).
  flags.push_back({"--make-vocab-size-divisible-by",
                   std::to_string(planner::vocab_size_divisible_by(plan.options))});
  // fsdp_version 1 and the eager norm are fsdp-only options (planner::check_fsdp_version,
  // check_norm_kernel_options): a megatron plan has neither (require_framework).
  if (plan.options.flash_attention_version == 1) {
    refuse(target, "options.flash_attention_version",
           "no Megatron-LM flag selects a FlashAttention-1 kernel (--attention-backend flash "
           "runs the installed flash-attn)",
           "1");
  }
  if (plan.options.flash_attention) {
    // Transformer Engine picks its fused kernel (flash or cuDNN); --use-flash-attn is read only
    // by the legacy model (fd0df7d3 megatron/legacy/model/transformer.py).
    flags.push_back({"--attention-backend", "auto"});
  } else {
    flags.push_back({"--attention-backend", "unfused"});
  }
  if (plan.cluster.precision == models::Precision::kBf16Mixed) {
    flags.push_back({"--bf16", ""});
  }
  if (plan.options.gemm_precision == planner::GemmPrecision::kFp8) {
    // meshplan's delayed FP8 is TE delayed scaling with a 1024-entry amax history
    // (planner/memory.cpp fp8_state_bytes); Megatron-LM arguments.py: --fp8-format e4m3|hybrid,
    // --fp8-recipe (default delayed; tensorwise from Megatron Core 0.12),
    // --fp8-amax-history-len (default 1).
    flags.push_back({"--fp8-format", "hybrid"});
    if (plan.options.fp8_recipe == planner::Fp8Recipe::kTensorwise) {
      flags.push_back({"--fp8-recipe", "tensorwise"});
    } else {
      flags.push_back({"--fp8-amax-history-len", "1024"});
      flags.push_back({"--fp8-amax-compute-algo", "max"});
    }
  }
  if (plan.options.fp8_param_gather) {
    flags.push_back({"--fp8-param-gather", ""});
  }
  // Megatron-LM arguments.py at 358e5f07: --cross-entropy-loss-fusion, --cross-entropy-fusion-impl
  // native|te (default native).
  if (plan.options.cross_entropy_loss_fusion != planner::CrossEntropyFusion::kOff) {
    flags.push_back({"--cross-entropy-loss-fusion", ""});
    flags.push_back({"--cross-entropy-fusion-impl",
                     planner::to_string(plan.options.cross_entropy_loss_fusion)});
  }
  add_grad_reduce_flag(plan, flags);
}

}  // namespace

namespace emit_detail {

Flags megatron_flags(const planner::Plan& plan, EmitTarget target) {
  // Planner features added after this writer (uneven pipeline stages, context parallelism,
  // MoE expert parallelism, FP8) must be emitted here or refused with refuse().
  Flags flags;
  add_parallel_flags(target, plan, flags);
  add_model_flags(target, plan, flags);
  return flags;
}

int megatron_device_max_connections(const planner::Plan& plan) {
  if (plan.options.overlap_moe_expert_parallel_comm) {
    // arguments.py validate_args (d98e8a64, line 1466): with the EP overlap it warns instead of
    // asserting 1; the communication stream needs more than one hardware queue to run beside
    // the compute stream (its warning: "set CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32").
    return 32;
  }
  if ((plan.layout.tp > 1 || plan.layout.cp > 1) && plan.layout.zero <= 1) {
    // arguments.py validate_args asserts it for tp or cp > 1 before Blackwell (Megatron-FSDP,
    // zero 2-3, asserts the opposite): kernels queue in issue order, so the tp collectives
    // overlap the GEMMs they are meant to.
    return 1;
  }
  return 0;
}

std::string torchrun_lines(const planner::Plan& plan, EmitTarget target,
                           const std::string& entry_point) {
  const NodeShape nodes = node_shape(plan, target);
  std::string out = "# Run once per node, with NODE_RANK, MASTER_ADDR and MASTER_PORT set.\n";
  if (const int connections = megatron_device_max_connections(plan); connections > 0) {
    out += fmt::format("export CUDA_DEVICE_MAX_CONNECTIONS={}\n", connections);
  }
  return out + fmt::format(
                   "torchrun --nnodes {} --nproc-per-node {} --node-rank \"${{NODE_RANK:-0}}\" "
                   "\\\n  --master-addr \"${{MASTER_ADDR:-localhost}}\" --master-port "
                   "\"${{MASTER_PORT:-6000}}\" \\\n  {} \\\n",
                   nodes.num_nodes, nodes.ranks_per_node, entry_point);
}

}  // namespace emit_detail

std::string emit_megatron(const planner::Plan& plan) {
  const EmitTarget target = EmitTarget::kMegatron;
  emit_detail::require_framework(target, planner::Framework::kMegatron, plan);
  emit_detail::node_shape(plan, target);  // refuses a partial node before the flags' refusals
  const Flags flags = emit_detail::megatron_flags(plan, target);
  std::string out = "#!/usr/bin/env bash\n" + emit_detail::plan_comment(plan, target, "#");
  out +=
      "# Megatron-LM flags (megatron/training/arguments.py). Not decided by the plan, pass them\n"
      "# as this script's arguments: data (--data-path or --mock-data), tokenizer\n"
      "# (--tokenizer-type), --train-iters, --lr and the schedule, and checkpointing.\n";
  out += emit_detail::torchrun_lines(plan, target, "pretrain_gpt.py");
  return out + emit_detail::flag_lines(flags);
}

}  // namespace meshplan::reports
