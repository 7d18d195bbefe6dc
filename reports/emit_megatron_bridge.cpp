// plan --emit megatron-bridge: the plan as Megatron-Bridge ConfigContainer overrides on its
// vanilla_gpt_pretrain_config recipe, run by scripts/training/run_recipe.py
// (NVIDIA-NeMo/Megatron-Bridge 067f987d, which pins Megatron-LM 2a75ac12). That recipe
// "mirrors Megatron-LM pretrain_gpt.py defaults" (recipes/gpt/h100/vanilla_gpt.py), so the
// overrides are --emit megatron's flags (emit_detail::megatron_flags) translated one by one, as
// Megatron-LM's core_transformer_config_from_args copies each argument into the TransformerConfig
// field of its name; every flag without a translation here is refused, never dropped. Where the
// recipe's dataclass defaults differ from Megatron-LM's parser (cross-entropy fusion on,
// distributed optimizer on in its optimizer config, p2p overlap off) the plan's value is written
// whatever it is. Keys are checked against tests/data/emit/megatron_bridge_keys.txt.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emit_common.h"
#include "meshplan/emit.h"

namespace meshplan::reports {

namespace {

using emit_detail::Flags;
using emit_detail::refuse;

constexpr EmitTarget kBridgeTarget = EmitTarget::kMegatronBridge;

/// (key, value) pairs, written "  key=value \" in this order.
using Overrides = std::vector<std::pair<std::string, std::string>>;

// Megatron-LM flags whose value is the ConfigContainer field's, same meaning: TransformerConfig /
// ModelParallelConfig fields (Megatron-Core 2a75ac12) under model., DistributedDataParallelConfig
// under ddp., TrainingConfig under train., TokenizerConfig under tokenizer. (config.py).
const std::map<std::string, std::string>& value_keys() {
  static const std::map<std::string, std::string> keys = {
      {"--tensor-model-parallel-size", "model.tensor_model_parallel_size"},
      {"--pipeline-model-parallel-size", "model.pipeline_model_parallel_size"},
      {"--cp-comm-type", "model.cp_comm_type"},
      {"--expert-tensor-parallel-size", "model.expert_tensor_parallel_size"},
      {"--microbatch-group-size-per-virtual-pipeline-stage",
       "model.microbatch_group_size_per_vp_stage"},
      {"--decoder-first-pipeline-num-layers", "model.num_layers_in_first_pipeline_stage"},
      {"--decoder-last-pipeline-num-layers", "model.num_layers_in_last_pipeline_stage"},
      {"--recompute-granularity", "model.recompute_granularity"},
      {"--recompute-method", "model.recompute_method"},
      {"--recompute-num-layers", "model.recompute_num_layers"},
      {"--num-distributed-optimizer-instances", "ddp.num_distributed_optimizer_instances"},
      {"--ddp-bucket-size", "ddp.bucket_size"},
      {"--micro-batch-size", "train.micro_batch_size"},
      {"--global-batch-size", "train.global_batch_size"},
      {"--num-layers", "model.num_layers"},
      {"--hidden-size", "model.hidden_size"},
      {"--num-attention-heads", "model.num_attention_heads"},
      {"--num-query-groups", "model.num_query_groups"},
      {"--kv-channels", "model.kv_channels"},
      {"--ffn-hidden-size", "model.ffn_hidden_size"},
      {"--position-embedding-type", "model.position_embedding_type"},
      {"--rotary-percent", "model.rotary_percent"},
      {"--rotary-base", "model.rotary_base"},
      {"--rope-scaling-factor", "model.rope_scaling_factor"},
      {"--rotary-seq-len-interpolation-factor", "model.seq_len_interpolation_factor"},
      {"--rotary-scaling-factor", "model.yarn_rotary_scaling_factor"},
      {"--yarn-original-max-position-embeddings", "model.yarn_original_max_position_embeddings"},
      {"--yarn-beta-fast", "model.yarn_beta_fast"},
      {"--yarn-beta-slow", "model.yarn_beta_slow"},
      {"--mscale", "model.yarn_mscale"},
      {"--mscale-all-dim", "model.yarn_mscale_all_dim"},
      {"--normalization", "model.normalization"},
      {"--num-experts", "model.num_moe_experts"},
      {"--moe-router-topk", "model.moe_router_topk"},
      {"--moe-router-score-function", "model.moe_router_score_function"},
      {"--moe-router-num-groups", "model.moe_router_num_groups"},
      {"--moe-router-group-topk", "model.moe_router_group_topk"},
      {"--moe-ffn-hidden-size", "model.moe_ffn_hidden_size"},
      {"--moe-shared-expert-intermediate-size", "model.moe_shared_expert_intermediate_size"},
      {"--moe-token-dispatcher-type", "model.moe_token_dispatcher_type"},
      {"--moe-flex-dispatcher-backend", "model.moe_flex_dispatcher_backend"},
      {"--moe-aux-loss-coeff", "model.moe_aux_loss_coeff"},
      {"--mtp-num-layers", "model.mtp_num_layers"},
      {"--glu-linear-offset", "model.glu_linear_offset"},
      {"--activation-func-clamp-value", "model.activation_func_clamp_value"},
      {"--softmax-type", "model.softmax_type"},
      {"--attention-dropout", "model.attention_dropout"},
      {"--hidden-dropout", "model.hidden_dropout"},
      {"--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by"},
      // Megatron-Core's NullTokenizer has exactly this vocabulary (null_tokenizer.py); with
      // model.vocab_size unset Bridge takes it and pads it to the divisor x tp as Megatron-LM does
      // (training/setup.py _validate_and_set_vocab_size, gpt_provider.py
      // calculate_padded_vocab_size).
      {"--vocab-size", "tokenizer.vocab_size"},
      {"--cross-entropy-fusion-impl", "model.cross_entropy_fusion_impl"},
  };
  return keys;
}

// Megatron-LM's store_true flags, written true when the flag is there and false when not, so
// the recipe's own default never decides. A flag can set more than one field: Bridge requires
// ddp. and optimizer. to agree on the distributed optimizer and the parameter-gather overlap
// (config.py _validate_and_sync_distributed_optimizer_settings turns both on if either is).
const std::vector<std::pair<std::string, std::vector<std::string>>>& switch_keys() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> keys = {
      {"--sequence-parallel", {"model.sequence_parallel"}},
      {"--account-for-embedding-in-pipeline-split",
       {"model.account_for_embedding_in_pipeline_split"}},
      {"--account-for-loss-in-pipeline-split", {"model.account_for_loss_in_pipeline_split"}},
      {"--distribute-saved-activations", {"model.distribute_saved_activations"}},
      {"--use-distributed-optimizer",
       {"ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"}},
      {"--overlap-grad-reduce", {"ddp.overlap_grad_reduce"}},
      {"--overlap-param-gather", {"ddp.overlap_param_gather", "optimizer.overlap_param_gather"}},
      {"--use-tp-pp-dp-mapping", {"dist.use_tp_pp_dp_mapping"}},
      {"--apply-layernorm-1p", {"model.layernorm_zero_centered_gamma"}},
      {"--add-qkv-bias", {"model.add_qkv_bias"}},
      {"--qk-layernorm", {"model.qk_layernorm"}},
      {"--qk-l2-norm", {"model.qk_l2_norm"}},
      {"--cross-entropy-loss-fusion", {"model.cross_entropy_loss_fusion"}},
  };
  return keys;
}

// MoE-only store_true flags: written (true or false) for MoE models only.
const std::vector<std::pair<std::string, std::string>>& moe_switch_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"--moe-router-enable-expert-bias", "model.moe_router_enable_expert_bias"},
      {"--moe-apply-probs-on-input", "model.moe_apply_probs_on_input"},
      {"--moe-grouped-gemm", "model.moe_grouped_gemm"},
      {"--overlap-moe-expert-parallel-comm", "model.overlap_moe_expert_parallel_comm"},
      {"--delay-wgrad-compute", "model.delay_wgrad_compute"},
  };
  return keys;
}

// A Megatron-LM list argument ("\"[0,0,1]\"") or integer as a Hydra value ([0,0,1]).
std::string hydra_list(const std::string& value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    return value.substr(1, value.size() - 2);
  }
  return value;
}

// The per-layer MoE pattern as a list: Megatron-LM evaluates "[0]*3+[1]*58" (arguments.py
// moe_freq_type); an override takes the list it stands for (TransformerConfig.moe_layer_freq).
std::string moe_layer_list(const models::TransformerConfig& m) {
  std::vector<int> layers;
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    layers.push_back(m.is_moe_layer(layer) ? 1 : 0);
  }
  return fmt::format("[{}]", fmt::join(layers, ","));
}

// What the recipe's mixed_precision preset must be. Bridge applies the preset to the model, the
// optimizer and the DDP config after the overrides (mixed_precision.py MixedPrecisionConfig.setup
// copies every field of the same name), so a setting the preset fixes cannot be overridden
// field by field: bf16_mixed reduces gradients in fp32, and the FP8 presets fix their recipe.
std::string mixed_precision_preset(const std::map<std::string, std::string>& flags,
                                   std::set<std::string>& used) {
  for (const char* flag :
       {"--bf16", "--fp8-format", "--fp8-recipe", "--fp8-amax-history-len",
        "--fp8-amax-compute-algo", "--fp8-param-gather", "--grad-reduce-in-bf16"}) {
    used.insert(flag);
  }
  if (flags.count("--grad-reduce-in-bf16") != 0) {
    refuse(kBridgeTarget, "options.grad_reduce_dtype",
           "Megatron-Bridge's bf16_mixed preset reduces gradients in fp32 (mixed_precision.py: "
           "grad_reduce_in_fp32=True, copied into ddp. after the overrides)",
           "bf16");
  }
  if (flags.count("--fp8-format") == 0) {
    // No preset is pure fp32: without one the model keeps TransformerConfig's fp32 defaults.
    return flags.count("--bf16") != 0 ? "bf16_mixed" : "null";
  }
  if (flags.count("--fp8-recipe") != 0) {
    refuse(kBridgeTarget, "options.fp8_recipe",
           "Megatron-Bridge's tensorwise preset (bf16_with_fp8_current_scaling_mixed) keeps the "
           "first and last transformer layers in bf16, which the plan costs in FP8",
           "tensorwise");
  }
  if (flags.count("--fp8-param-gather") == 0) {
    refuse(kBridgeTarget, "options.fp8_param_gather",
           "Megatron-Bridge's delayed-scaling preset (bf16_with_fp8_delayed_scaling_mixed) "
           "gathers FP8 parameters; re-plan with --fp8-param-gather on",
           "off");
  }
  // hybrid format, delayed recipe, amax history 1024, max: the plan's delayed FP8.
  return "bf16_with_fp8_delayed_scaling_mixed";
}

// Refusals of what --emit megatron writes but the vanilla recipe cannot be told by override.
void refuse_unexpressible(const std::map<std::string, std::string>& flags) {
  if (flags.count("--use-megatron-fsdp") != 0) {
    refuse(kBridgeTarget, "layout.zero",
           "Megatron-Bridge's bf16_mixed preset sets ddp.grad_reduce_in_fp32, so Megatron-FSDP "
           "would keep fp32 gradients where the plan costs bf16 (mixed_precision.py)",
           flags.at("--data-parallel-sharding-strategy"));
  }
  if (flags.count("--tp-comm-overlap") != 0) {
    refuse(kBridgeTarget, "options.overlap_tp_comm",
           "Megatron-Bridge turns tp-comm overlap on through a recipe's comm_overlap "
           "(CommOverlapConfig with a userbuffers shape), which vanilla_gpt_pretrain_config has "
           "not; --emit megatron writes --tp-comm-overlap",
           "on");
  }
  if (flags.count("--attention-backend") != 0 && flags.at("--attention-backend") != "auto") {
    refuse(kBridgeTarget, "options.flash_attention",
           "model.attention_backend is an AttnBackend enum that a run_recipe.py override sets as "
           "a string (omegaconf_utils.py _apply_overrides converts dtypes and activations only)",
           "off");
  }
  if (flags.count("--window-size") != 0) {
    refuse(kBridgeTarget, "model.sliding_window",
           "TransformerConfig.window_size is a tuple, which a run_recipe.py override gives as a "
           "list (omegaconf_utils.py); --emit megatron writes --window-size",
           flags.at("--window-size"));
  }
  if (flags.count("--multi-latent-attention") != 0) {
    refuse(kBridgeTarget, "model.kv_lora_rank",
           "vanilla_gpt_pretrain_config builds a GPTModelProvider, which has no multi-latent "
           "attention fields (Megatron-Bridge builds it with MLATransformerConfig providers)",
           flags.at("--kv-lora-rank"));
  }
}

class Translation {
 public:
  Translation(const planner::Plan& plan, const Flags& flags) : plan_(plan) {
    for (const auto& [flag, value] : flags) {
      flags_[flag] = value;
    }
  }

  Overrides overrides() {
    refuse_unexpressible(flags_);
    add_parallel();
    add_model();
    for (const auto& [flag, value] : flags_) {
      if (used_.count(flag) == 0) {
        refuse(kBridgeTarget, "layout",
               "no Megatron-Bridge ConfigContainer field for Megatron-LM's " + flag,
               value.empty() ? "set" : value);
      }
    }
    return overrides_;
  }

 private:
  bool has(const std::string& flag) {
    used_.insert(flag);
    return flags_.count(flag) != 0;
  }
  void put(const std::string& key, const std::string& value) { overrides_.push_back({key, value}); }
  void put_value(const std::string& flag) {
    if (has(flag)) {
      put(value_keys().at(flag), flags_.at(flag));
    }
  }
  void put_switch(const std::string& flag, const std::vector<std::string>& keys) {
    const bool on = has(flag);
    for (const std::string& key : keys) {
      put(key, on ? "true" : "false");
    }
  }

  void add_parallel() {
    const planner::Layout& layout = plan_.layout;
    for (const char* flag : {"--tensor-model-parallel-size", "--pipeline-model-parallel-size"}) {
      put_value(flag);
    }
    // Written at 1 too: the recipe's defaults are Megatron-LM's, but the plan decides.
    put("model.context_parallel_size", std::to_string(layout.cp));
    used_.insert("--context-parallel-size");
    put_value("--cp-comm-type");
    put("model.expert_model_parallel_size", std::to_string(layout.ep));
    used_.insert("--expert-model-parallel-size");
    put_value("--expert-tensor-parallel-size");
    // The virtual stages: Megatron-LM derives them from --num-layers-per-virtual-pipeline-stage
    // or a layout; the recipe takes the count (transformer_config.py asserts it equals the
    // layout's).
    used_.insert("--num-layers-per-virtual-pipeline-stage");
    used_.insert("--num-virtual-stages-per-pipeline-rank");
    const bool interleaved = layout.schedule == planner::ScheduleKind::kInterleaved;
    put("model.virtual_pipeline_model_parallel_size",
        interleaved ? std::to_string(layout.vpp) : "null");
    if (has("--pipeline-model-parallel-layout")) {
      // A Hydra quoted string: the layout has |, *, ( and ).
      put("model.pipeline_model_parallel_layout",
          fmt::format("\"{}\"", hydra_list(flags_.at("--pipeline-model-parallel-layout"))));
    }
    for (const char* flag :
         {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
          "--microbatch-group-size-per-virtual-pipeline-stage"}) {
      put_value(flag);
    }
    // Megatron-LM overlaps the interleaved schedule's sends unless told not to and batches them
    // otherwise (arguments.py validate_args; core_transformer_config_from_args sets
    // batch_p2p_comm = not overlap_p2p_comm); ModelParallelConfig defaults to no overlap.
    used_.insert("--no-overlap-p2p-communication");
    const bool overlap_p2p = interleaved && !has("--no-overlap-p2p-communication");
    put("model.overlap_p2p_comm", overlap_p2p ? "true" : "false");
    put("model.batch_p2p_comm", overlap_p2p ? "false" : "true");
    if (has("--recompute-granularity")) {
      for (const char* flag :
           {"--recompute-granularity", "--recompute-method", "--recompute-num-layers"}) {
        put_value(flag);
      }
    } else {
      put("model.recompute_granularity", "null");
    }
    if (has("--recompute-modules")) {
      std::string names = flags_.at("--recompute-modules");
      std::replace(names.begin(), names.end(), ' ', ',');
      put("model.recompute_modules", "[" + names + "]");
    }
    for (const auto& [flag, keys] : switch_keys()) {
      put_switch(flag, keys);
    }
    for (const char* flag : {"--num-distributed-optimizer-instances", "--ddp-bucket-size",
                             "--micro-batch-size", "--global-batch-size"}) {
      put_value(flag);
    }
  }

  void add_model() {
    const models::TransformerConfig& m = plan_.model;
    for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads",
                             "--num-query-groups", "--kv-channels", "--ffn-hidden-size"}) {
      put_value(flag);
    }
    used_.insert("--group-query-attention");  // num_query_groups says it
    // The sequence: run_recipe.py copies dataset.seq_length into model.seq_length
    // (recipe_runner.py sync_model_dataset_sequence_length); both are written.
    used_.insert("--seq-length");
    put("dataset.seq_length", flags_.at("--seq-length"));
    put("model.seq_length", flags_.at("--seq-length"));
    // GPTModelProvider has no max_position_embeddings: its learned table has seq_length rows
    // (gpt_provider.py provide: max_sequence_length=self.seq_length).
    used_.insert("--max-position-embeddings");
    if (m.positions == models::Positions::kLearned && m.max_position_embeddings != m.seq_length) {
      refuse(kBridgeTarget, "model.max_position_embeddings",
             "Megatron-Bridge's GPTModelProvider learns seq_length positions (gpt_provider.py); "
             "plan at --seq-len equal to the table",
             fmt::format("{} != seq_length {}", m.max_position_embeddings, m.seq_length));
    }
    for (const char* flag :
         {"--position-embedding-type", "--rotary-percent", "--rotary-base", "--normalization"}) {
      put_value(flag);
    }
    // GPTModelProvider rope_scaling, rope_scaling_factor, seq_len_interpolation_factor
    // (gpt_provider.py), handed to the same GPTModel.
    if (has("--use-rope-scaling")) {
      put("model.rope_scaling", "true");
    }
    put_value("--rope-scaling-factor");
    put_value("--rotary-seq-len-interpolation-factor");
    // YaRN: GPTModelProvider's yarn_* fields (gpt_provider.py, 067f987d), which GPTModel reads
    // under position_embedding_type yarn, as gpt_oss_bridge.py sets them (MLA is refused above).
    for (const char* flag :
         {"--rotary-scaling-factor", "--yarn-original-max-position-embeddings", "--yarn-beta-fast",
          "--yarn-beta-slow", "--mscale", "--mscale-all-dim"}) {
      put_value(flag);
    }
    const bool rounded = has("--yarn-correction-range-round-to-int");
    if (has("--no-yarn-correction-range-round-to-int") || rounded) {
      put("model.yarn_correction_range_round_to_int", rounded ? "true" : "false");
    }
    if (has("--no-rope-freq")) {
      put("model.no_rope_freq", hydra_list(flags_.at("--no-rope-freq")));
    }
    // The activation: TransformerConfig.activation_func, an override Bridge maps from its name
    // (utils/activation_map.py: silu, quick_gelu, gelu); --swiglu and --quick-geglu also gate.
    const bool swiglu = has("--swiglu");
    const bool quick_geglu = has("--quick-geglu");
    put("model.gated_linear_unit", swiglu || quick_geglu ? "true" : "false");
    put("model.activation_func", swiglu ? "silu" : quick_geglu ? "quick_gelu" : "gelu");
    for (const char* flag :
         {"--glu-linear-offset", "--activation-func-clamp-value", "--softmax-type"}) {
      put_value(flag);
    }
    put("model.share_embeddings_and_output_weights",
        has("--untie-embeddings-and-output-weights") ? "false" : "true");
    put("model.add_bias_linear", has("--disable-bias-linear") ? "false" : "true");
    put_value("--mtp-num-layers");
    if (m.is_moe()) {
      for (const char* flag :
           {"--num-experts", "--moe-router-topk", "--moe-router-score-function",
            "--moe-router-num-groups", "--moe-router-group-topk", "--moe-ffn-hidden-size",
            "--moe-shared-expert-intermediate-size", "--moe-token-dispatcher-type",
            "--moe-flex-dispatcher-backend", "--moe-aux-loss-coeff"}) {
        put_value(flag);
      }
      if (has("--moe-layer-freq")) {
        put("model.moe_layer_freq", moe_layer_list(m));
      }
      for (const auto& [flag, key] : moe_switch_keys()) {
        put_switch(flag, {key});
      }
    }
    for (const char* flag : {"--attention-dropout", "--hidden-dropout"}) {
      put_value(flag);
    }
    put("tokenizer.tokenizer_type", "NullTokenizer");
    for (const char* flag : {"--vocab-size", "--make-vocab-size-divisible-by"}) {
      put_value(flag);
    }
    // auto is TransformerConfig's default attention_backend (others are refused above).
    used_.insert("--attention-backend");
    put_value("--cross-entropy-fusion-impl");
    put("mixed_precision", mixed_precision_preset(flags_, used_));
  }

  const planner::Plan& plan_;
  std::map<std::string, std::string> flags_;
  std::set<std::string> used_;
  Overrides overrides_;
};

// Shell-quoted when the value has characters bash or Hydra would read: lists, layouts, quotes.
std::string override_line(const std::string& key, const std::string& value) {
  const std::string word = key + "=" + value;
  if (word.find_first_of("[]|*()\"' ") != std::string::npos) {
    return fmt::format("  '{}' \\\n", word);
  }
  return fmt::format("  {} \\\n", word);
}

}  // namespace

std::string emit_megatron_bridge(const planner::Plan& plan) {
  emit_detail::require_framework(kBridgeTarget, planner::Framework::kMegatron, plan);
  emit_detail::node_shape(plan, kBridgeTarget);  // refuses a partial node first
  const Flags flags = emit_detail::megatron_flags(plan, kBridgeTarget);
  const Overrides overrides = Translation(plan, flags).overrides();
  std::string out = "#!/usr/bin/env bash\n" + emit_detail::plan_comment(plan, kBridgeTarget, "#");
  out +=
      "# Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge 067f987d): run from its checkout. The\n"
      "# vanilla_gpt_pretrain_config recipe has Megatron-LM's pretrain_gpt.py defaults; every\n"
      "# setting the plan decides is overridden below. Not decided by the plan, pass them as this\n"
      "# script's arguments: data (--dataset megatron-indexed dataset.data_path=...; the recipe's\n"
      "# default is mock data), train.train_iters, optimizer.lr and checkpoint.save.\n";
  out += emit_detail::torchrun_lines(
      plan, kBridgeTarget,
      "scripts/training/run_recipe.py --recipe vanilla_gpt_pretrain_config --mode pretrain");
  for (const auto& [key, value] : overrides) {
    out += override_line(key, value);
  }
  return out + "  \"$@\"\n";
}

}  // namespace meshplan::reports
