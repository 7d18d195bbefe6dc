// plan --emit megatron-deepspeed: a bash script that runs a DeepSpeed plan with
// microsoft/Megatron-DeepSpeed's pretrain_gpt.py: the plan's DeepSpeed config (the JSON of
// --emit deepspeed, emit_detail::deepspeed_config) written to ds_config.json, the deepspeed
// launcher line and pretrain_gpt.py's flags. Every flag name is one that pretrain_gpt.py's parser
// defines at Megatron-DeepSpeed f4157bea (megatron/arguments.py, and deepspeed.add_config_arguments
// for --deepspeed and --deepspeed_config); tests/data/emit/megatron_deepspeed_arguments_flags.txt
// lists them and the test checks. Files cited below are Megatron-DeepSpeed's at f4157bea unless
// named as DeepSpeed's (microsoft/DeepSpeed 38327e07).

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "emit_common.h"
#include "meshplan/emit.h"

namespace meshplan::reports {

namespace {

using emit_detail::Flags;
using emit_detail::refuse;

constexpr EmitTarget kMegatronDeepSpeedTarget = EmitTarget::kMegatronDeepSpeed;
constexpr const char* kMegatronDeepSpeedCommit = "f4157bea";

// Plan options: what the planner refuses under framework deepspeed never reaches here
// (require_framework; planner::check_precision: fp8, overlap_tp_comm; check_overlap_p2p_options;
// check_optimizer_impl_options: a fused Adam only; check_recompute_layers: the block method;
// check_recompute_modules; fsdp-only options), and overlap_param_gather at ZeRO 1/2 is costed
// as DeepSpeed runs it, not overlapped (planner::parameter_gather_overlapped).

// Model features megatron/model/transformer.py and language_model.py have no flag for, or run
// differently from how meshplan costs them. MoE is refused with the config
// (emit_detail::deepspeed_config); a sliding window shorter than seq_length and attention sinks
// by planner::check_framework (no window or softmax-offset option in megatron/arguments.py at
// f4157bea).
void check_megatron_deepspeed_model(const models::TransformerConfig& m) {
  if (m.is_mla()) {
    refuse(kMegatronDeepSpeedTarget, "model.kv_lora_rank",
           "Megatron-DeepSpeed's ParallelAttention has no multi-latent attention",
           std::to_string(m.kv_lora_rank));
  }
  if (m.num_kv_heads != m.num_attention_heads) {
    // transformer.py ParallelAttention.forward (since 676a482c, 2024-12-04): without DeepSpeed's
    // Ulysses, the fused QKV output is cut into three equal parts (each_hidden_size =
    // mixed_x_layer.shape[-1] // 3), which are Q, K and V only when the kv heads are the heads;
    // the Ulysses branch asserts projection_size == kv_projection_size. --num-key-value-heads
    // parses, but grouped-query attention does not run at f4157bea.
    refuse(kMegatronDeepSpeedTarget, "model.num_kv_heads",
           "Megatron-DeepSpeed f4157bea splits the fused QKV projection in three equal parts "
           "(transformer.py ParallelAttention.forward), so --num-key-value-heads below "
           "--num-attention-heads does not run",
           fmt::format("{} of {} heads", m.num_kv_heads, m.num_attention_heads));
  }
  if (m.activation == models::Activation::kGeglu ||
      m.activation == models::Activation::kQuickGeglu) {
    // megatron/arguments.py at f4157bea: --swiglu is the only gated MLP (SiLU).
    refuse(kMegatronDeepSpeedTarget, "model.activation",
           "Megatron-DeepSpeed has no gated GELU MLP (its one gated MLP is --swiglu, SiLU)",
           models::to_string(m.activation));
  }
  if (m.glu_linear_offset != 0.0 || m.activation_clamp_value != 0.0) {
    const bool offset = m.glu_linear_offset != 0.0;
    refuse(kMegatronDeepSpeedTarget,
           offset ? "model.glu_linear_offset" : "model.activation_clamp_value",
           "Megatron-DeepSpeed's SwiGLU has no offset or clamp (no flag in arguments.py)",
           fmt::format("{:g}", offset ? m.glu_linear_offset : m.activation_clamp_value));
  }
  if (m.norm_unit_offset || m.scale_embeddings || m.sandwich_norm) {
    // megatron/model/transformer.py at f4157bea: RMSNorm without a (1 + gain) form, no
    // embedding scale, two norms per layer.
    refuse(kMegatronDeepSpeedTarget,
           m.norm_unit_offset   ? "model.norm_unit_offset"
           : m.scale_embeddings ? "model.scale_embeddings"
                                : "model.sandwich_norm",
           "Megatron-DeepSpeed has none of Gemma's (1 + weight) RMSNorm, sqrt(h) embedding scale "
           "or post-branch norms",
           "true");
  }
  if (m.has_logit_softcapping()) {
    const bool attention = m.attn_logit_softcapping > 0.0;
    refuse(kMegatronDeepSpeedTarget,
           attention ? "model.attn_logit_softcapping" : "model.final_logit_softcapping",
           "Megatron-DeepSpeed has no logit soft-capping (no flag in arguments.py)",
           fmt::format("{}", attention ? m.attn_logit_softcapping : m.final_logit_softcapping));
  }
  if (m.has_attention_scale_override()) {
    refuse(kMegatronDeepSpeedTarget, "model.query_pre_attn_scalar",
           "Megatron-DeepSpeed scales attention by 1/sqrt(kv_channels) only",
           fmt::format("{} != head_dim {}", m.query_pre_attn_scalar, m.head_dim));
  }
  if (m.qk_norm) {
    refuse(kMegatronDeepSpeedTarget, "model.qk_norm",
           "Megatron-DeepSpeed has no query/key normalization (no flag in arguments.py)", "true");
  }
  if (m.qk_l2_norm) {
    refuse(kMegatronDeepSpeedTarget, "model.qk_l2_norm",
           "Megatron-DeepSpeed has no query/key normalization (no flag in arguments.py)", "true");
  }
  if (!m.no_rope_freq.empty()) {
    refuse(
        kMegatronDeepSpeedTarget, "model.no_rope_freq",
        "Megatron-DeepSpeed applies rotary positions on every layer (no flag in arguments.py)",
        fmt::format("{} NoPE layers", std::count(m.no_rope_freq.begin(), m.no_rope_freq.end(), 1)));
  }
  if (m.has_rope_scaling()) {
    // f4157bea: megatron/model/rotary_pos_embedding.py RotaryEmbedding(dim, theta) has no
    // scaling, and arguments.py no flag for one.
    refuse(kMegatronDeepSpeedTarget, "model.rope_scaling",
           "Megatron-DeepSpeed turns rotary positions unscaled (no flag in arguments.py)",
           fmt::format("{} x{:g}", models::to_string(m.rope_scaling.type), m.rope_scaling.factor));
  }
  if (m.parallel_residual) {
    // transformer.py ParallelTransformerLayer.forward: norm, attention, residual add, norm, MLP.
    refuse(kMegatronDeepSpeedTarget, "model.parallel_residual",
           "Megatron-DeepSpeed's ParallelTransformerLayer runs the attention and then the MLP, not "
           "in parallel",
           "true");
  }
  if (m.positions == models::Positions::kAlibi) {
    refuse(kMegatronDeepSpeedTarget, "model.positions",
           "Megatron-DeepSpeed has learned and rotary position embeddings, no ALiBi", "alibi");
  }
  if (m.qkv_bias != m.mlp_bias || m.attention_output_bias != m.mlp_bias) {
    // arguments.py --disable-bias-linear (add_bias_linear) is read by the QKV, attention output
    // and both MLP projections alike (transformer.py ParallelAttention, ParallelMLP).
    refuse(kMegatronDeepSpeedTarget, "model.mlp_bias",
           "Megatron-DeepSpeed biases every linear layer or none (--disable-bias-linear)",
           fmt::format("qkv_bias {}, attention_output_bias {}, mlp_bias {}", m.qkv_bias,
                       m.attention_output_bias, m.mlp_bias));
  }
}

// The stage split: gpt_model.py GPTModelPipe builds its PipelineModule with
// partition_method='type:transformer', which no flag changes (arguments.py has no
// --pp-partition-method). check_framework admits the splits any partition_method builds.
void check_gpt_model_pipe_split(const planner::Plan& plan) {
  const planner::Layout& layout = plan.layout;
  if (layout.pp == 1) {
    return;
  }
  const std::vector<int64_t> type_transformer =
      planner::deepspeed_stage_layers(plan.model, layout.tp, layout.pp,
                                      planner::DeepSpeedPartition::kTypeTransformer, plan.options);
  if (planner::canonical_stage_layers(type_transformer) != layout.stage_layers) {
    std::vector<int64_t> planned = layout.stage_layers;  // empty: the even split
    if (planned.empty()) {
      planned.assign(static_cast<size_t>(layout.pp), plan.model.num_layers / layout.pp);
    }
    refuse(kMegatronDeepSpeedTarget, "layout.stage_layers",
           fmt::format("Megatron-DeepSpeed's GPTModelPipe splits stages with partition_method "
                       "type:transformer (gpt_model.py), {} layers for this model",
                       planner::format_stage_layers(type_transformer)),
           planner::format_stage_layers(planned));
  }
}

// Parallel sizes, sequence parallelism, the batch.
void add_model_parallel_flags(const planner::Plan& plan, Flags& flags) {
  const planner::Layout& layout = plan.layout;
  flags.push_back({"--tensor-model-parallel-size", std::to_string(layout.tp)});
  flags.push_back({"--pipeline-model-parallel-size", std::to_string(layout.pp)});
  if (layout.pp == 1) {
    // pretrain_gpt.py model_provider builds GPTModelPipe, DeepSpeed's pipeline engine, unless
    // --no-pipeline-parallel; that engine asserts ZeRO < 2 and schedules the gradient reduction
    // itself (DeepSpeed pipe/engine.py, enable_backward_allreduce False), while meshplan costs
    // pp 1 as the plain engine (examples_deepspeed/rebase: no_pp with pp_size 1).
    flags.push_back({"--no-pipeline-parallel", ""});
  }
  if (layout.sequence_parallel) {
    flags.push_back({"--sequence-parallel", ""});
  }
  if (layout.pp > 1 && layout.schedule == planner::ScheduleKind::kZbH1) {
    // megatron/initialize.py swaps DeepSpeed's TrainSchedule for ZeroBubbleH1Pipeline
    // (core/pipeline_parallel/deepspeed_zbh1_schedule.py). Its default variant runs B and W
    // together in the steady state and defers only the warm-up's W's to the end;
    // --enable-zbh1-exact-semantics defers every W by the stage index as Qi et al.'s ZB-H1
    // does, the order meshplan costs (test "Megatron-DeepSpeed's exact ZB-H1 order").
    flags.push_back({"--enable-zbh1-pipeline", ""});
    flags.push_back({"--enable-zbh1-exact-semantics", ""});
  }
  flags.push_back({"--micro-batch-size", std::to_string(layout.micro_batch)});
  flags.push_back({"--global-batch-size", std::to_string(layout.global_batch)});
}

// --deepspeed and its config (deepspeed.add_config_arguments), and the ZeRO stage, which
// Megatron-DeepSpeed reads apart from the config (pretrain_gpt.py: deepspeed.zero.Init enabled
// at --zero-stage 3; arguments.py default 1, so it is always written).
void add_deepspeed_flags(const planner::Plan& plan, Flags& flags) {
  flags.push_back({"--deepspeed", ""});
  flags.push_back({"--deepspeed_config", "ds_config.json"});
  flags.push_back({"--zero-stage", std::to_string(plan.layout.zero)});
}

// Recompute. Full: --checkpoint-activations with --deepspeed-activation-checkpointing, as
// examples_deepspeed/rebase/ds_pretrain_gpt_1.3B_rope.sh has it, the one form both models read:
// GPTModelPipe's PipelineModule interval is --checkpoint-num-layers (gpt_model.py; DeepSpeed's
// pipe/engine.py then takes the config's equal pipeline.activation_checkpoint_interval), and
// without the pipeline transformer.py _checkpointed_forward checkpoints runs of
// --checkpoint-num-layers layers through deepspeed.checkpointing, where --recompute-num-layers
// would be ignored.
// --deepspeed-activation-checkpointing configures deepspeed.checkpointing
// (initialize.py setup_deepspeed_random_and_activation_checkpointing) with
// --partition-activations, which overrides the config's activation_checkpointing section.
void add_recompute_flags(const planner::Plan& plan, Flags& flags) {
  const planner::Layout& layout = plan.layout;
  if (layout.recompute == planner::Recompute::kSelective) {
    // The unfused CoreAttention only: with flash attention check_framework refuses it.
    flags.push_back({"--recompute-granularity", "selective"});
  } else if (layout.recompute == planner::Recompute::kFull) {
    flags.push_back({"--checkpoint-activations", ""});
    flags.push_back({"--checkpoint-num-layers",
                     std::to_string(std::max<int64_t>(layout.recompute_group_layers, 1))});
    flags.push_back({"--deepspeed-activation-checkpointing", ""});
    if (plan.options.distribute_saved_activations) {
      flags.push_back({"--partition-activations", ""});
    }
  }
}

// Model shape, positions, norm, activation, biases, dropout.
void add_model_shape_flags(const models::TransformerConfig& m, Flags& flags) {
  flags.push_back({"--num-layers", std::to_string(m.num_layers)});
  flags.push_back({"--hidden-size", std::to_string(m.hidden_size)});
  flags.push_back({"--num-attention-heads", std::to_string(m.num_attention_heads)});
  if (m.head_dim * m.num_attention_heads != m.hidden_size) {
    flags.push_back({"--kv-channels", std::to_string(m.head_dim)});
  }
  flags.push_back({"--ffn-hidden-size", std::to_string(m.ffn_hidden_size)});
  flags.push_back({"--seq-length", std::to_string(m.seq_length)});
  // arguments.py validate_args asserts --max-position-embeddings >= --seq-length; only learned
  // positions make a table of that many rows (language_model.py Embedding).
  const bool learned = m.positions == models::Positions::kLearned;
  flags.push_back({"--max-position-embeddings",
                   std::to_string(learned ? m.max_position_embeddings : m.seq_length)});
  if (!learned) {
    flags.push_back({"--use-rotary-position-embeddings", ""});
    // arguments.py --rotary-position-embeddings-theta (f4157bea, type=int, dest rope_theta,
    // default 10000): language_model.py RotaryEmbedding(rotary_dim, theta=args.rope_theta).
    flags.push_back({"--rotary-position-embeddings-theta",
                     emit_detail::integral_rope_theta(m, kMegatronDeepSpeedTarget)});
  }
  if (m.has_partial_rotary()) {
    // arguments.py --rotary-percent (f4157bea): language_model.py rotates int(kv_channels x
    // percent) channels.
    flags.push_back({"--rotary-percent", fmt::format("{:g}", m.rotary_percent)});
  }
  // arguments.py --normalization choices ['layernorm', 'rmsnorm'] (default layernorm).
  flags.push_back({"--normalization", m.norm == models::Norm::kRmsNorm ? "rmsnorm" : "layernorm"});
  if (m.activation == models::Activation::kSwiglu) {
    flags.push_back({"--swiglu", ""});
  }
  if (!m.tied_embeddings) {
    flags.push_back({"--untie-embeddings-and-output-weights", ""});
  }
  if (!m.mlp_bias) {  // check_megatron_deepspeed_model: the other biases are the same
    flags.push_back({"--disable-bias-linear", ""});
  }
  if (!m.dropout) {  // arguments.py defaults both to 0.1
    flags.push_back({"--attention-dropout", "0"});
    flags.push_back({"--hidden-dropout", "0"});
  }
}

// The attention kernel and the precision.
void add_kernel_flags(const planner::Plan& plan, Flags& flags) {
  const bool bf16 = plan.cluster.precision == models::Precision::kBf16Mixed;
  if (plan.options.flash_attention) {
    // transformer.py FlashSelfAttention.forward asserts fp16 or bf16 inputs.
    if (!bf16) {
      refuse(kMegatronDeepSpeedTarget, "options.flash_attention",
             "Megatron-DeepSpeed's flash attention runs in bf16 or fp16 only (transformer.py "
             "FlashSelfAttention)",
             models::to_string(plan.cluster.precision));
    }
    // arguments.py: --use-flash-attn-v1 (alias --use-flash-attn) runs flash-attn 1's
    // flash_attn_unpadded_func, --use-flash-attn-v2 flash-attn 2's flash_attn_varlen_func.
    flags.push_back(
        {plan.options.flash_attention_version == 1 ? "--use-flash-attn-v1" : "--use-flash-attn-v2",
         ""});
  }
  if (bf16) {
    flags.push_back({"--bf16", ""});
  }
}

// The vocabulary and the data. NullTokenizer (tokenizer.py _NullTokenizer) has --vocab-size ids
// and its end-of-document id after them, vocab_size + 1 in all: the plan's V is --vocab-size
// V - 1, padded as the plan was costed (megatron/tokenizer/tokenizer.py _vocab_size_with_padding:
// a multiple of --make-vocab-size-divisible-by times tp). Megatron-DeepSpeed f4157bea has no
// synthetic-data flag (megatron/arguments.py: no --mock-data, only --data-path), so the script
// takes the dataset from DATA_PATH and stops with an error naming it when it is unset
// (emit_megatron_deepspeed's `${DATA_PATH:?...}` line).
void add_data_flags(const planner::Plan& plan, Flags& flags) {
  flags.push_back({"--tokenizer-type", "NullTokenizer"});
  flags.push_back({"--vocab-size", std::to_string(plan.model.vocab_size - 1)});
  flags.push_back({"--make-vocab-size-divisible-by",
                   std::to_string(planner::vocab_size_divisible_by(plan.options))});
  flags.push_back({"--data-path", "\"$DATA_PATH\""});
}

// The comment lines after the plan's: what the script leaves to its caller.
std::string megatron_deepspeed_usage() {
  return fmt::format(
      "# Megatron-DeepSpeed flags as its parser defines them at {} (megatron/arguments.py);\n"
      "# run from a checkout of microsoft/Megatron-DeepSpeed. Not decided by the plan, pass them\n"
      "# as this script's arguments: --train-iters, --lr and its schedule, checkpointing\n"
      "# (--save, --load). DATA_PATH: a Megatron .bin/.idx prefix of token ids below the model's\n"
      "# vocabulary (NullTokenizer); to tokenize with a real tokenizer pass its flags\n"
      "# (--tokenizer-type HFTokenizer --tokenizer-model ...), which replace these (the last\n"
      "# given wins) and set the vocabulary instead.\n",
      kMegatronDeepSpeedCommit);
}

// CUDA_DEVICE_MAX_CONNECTIONS=1, which arguments.py validate_args requires on CUDA with
// --sequence-parallel. The launcher passes its own environment to local ranks, but to other
// hosts only variables with its prefixes (NCCL, PYTHON, UCX, ...) and the lines of the file
// DS_ENV_FILE names (DeepSpeed launcher/runner.py EXPORT_ENVS, DEEPSPEED_ENVIRONMENT_NAME).
std::string sequence_parallel_environment(const planner::Plan& plan,
                                          const emit_detail::NodeShape& nodes) {
  if (!plan.layout.sequence_parallel) {
    return "";
  }
  std::string out = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  if (nodes.num_nodes > 1) {
    out += "cat > ds_env <<'EOF'\nCUDA_DEVICE_MAX_CONNECTIONS=1\nEOF\nexport DS_ENV_FILE=ds_env\n";
  }
  return out;
}

// The deepspeed launcher, as the scripts in examples_deepspeed/ start pretrain_gpt.py (e.g.
// rebase/ds_pretrain_gpt_1.3B_rope.sh; only pretrain_llama*_distributed.sh use torchrun).
// One node: its GPUs. More: run on the first host of a hostfile ("<host> slots=<gpus>" per line,
// launcher/runner.py fetch_hostfile); the launcher starts each host's ranks over pdsh in this
// directory (multinode_runner.py PDSHRunner: cd to it), so it must be shared.
std::string deepspeed_launcher_lines(const emit_detail::NodeShape& nodes) {
  std::string out;
  if (nodes.num_nodes > 1) {
    out += fmt::format(
        "# Run on the first of {} hosts listed in HOSTFILE, \"<host> slots={}\" each, from a\n"
        "# directory all of them share.\n"
        "deepspeed --hostfile \"${{HOSTFILE:-hostfile}}\" ",
        nodes.num_nodes, nodes.ranks_per_node);
  } else {
    out += "deepspeed ";
  }
  out += fmt::format(
      "--num_nodes {} --num_gpus {} --master_port \"${{MASTER_PORT:-29500}}\" \\\n"
      "  pretrain_gpt.py \\\n",
      nodes.num_nodes, nodes.ranks_per_node);
  return out;
}

}  // namespace

std::string emit_megatron_deepspeed(const planner::Plan& plan) {
  emit_detail::require_framework(kMegatronDeepSpeedTarget, planner::Framework::kDeepSpeed, plan);
  const std::string config = emit_detail::deepspeed_config(plan, kMegatronDeepSpeedTarget);
  check_megatron_deepspeed_model(plan.model);
  check_gpt_model_pipe_split(plan);
  const emit_detail::NodeShape nodes = emit_detail::node_shape(plan, kMegatronDeepSpeedTarget);
  Flags flags;
  add_model_parallel_flags(plan, flags);
  add_deepspeed_flags(plan, flags);
  add_recompute_flags(plan, flags);
  add_model_shape_flags(plan.model, flags);
  add_kernel_flags(plan, flags);
  add_data_flags(plan, flags);

  std::string out = std::string("#!/usr/bin/env bash\n") +
                    emit_detail::plan_comment(plan, kMegatronDeepSpeedTarget, "#");
  out += megatron_deepspeed_usage();
  out += "set -euo pipefail\n";
  out += ": \"${DATA_PATH:?set DATA_PATH to the prefix of a Megatron .bin/.idx dataset}\"\n";
  out += "cat > ds_config.json <<'EOF'\n";
  out += config;
  out += "EOF\n";
  out += sequence_parallel_environment(plan, nodes);
  out += deepspeed_launcher_lines(nodes);
  return out + emit_detail::flag_lines(flags);
}

}  // namespace meshplan::reports
