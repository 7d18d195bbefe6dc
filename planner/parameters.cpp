// Where parameters sit: per rank of each pipeline stage, after tensor-parallel sharding.

#include <fmt/format.h>

#include <algorithm>

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

namespace {
// Far above any divisor a framework or recipe uses (Megatron's 128, DeepSeek-V3's 1280 in
// Megatron-Bridge deepseek_v3_bridge.py, V2's 3200), so a typo of a few digits is refused.
constexpr int64_t kMaxVocabDivisor = 1 << 20;
// Megatron-LM d98e8a64 arguments.py `--make-vocab-size-divisible-by` default; Megatron-DeepSpeed's
// megatron/arguments.py (the same flag) and GPT-NeoX's neox_args.py NeoXArgsModel
// `make_vocab_size_divisible_by` keep it.
constexpr int64_t kMegatronVocabDivisor = 128;
}  // namespace

int64_t vocab_size_divisible_by(const PlanOptions& options) {
  if (options.make_vocab_size_divisible_by) {
    return *options.make_vocab_size_divisible_by;
  }
  switch (options.framework) {
    case Framework::kMegatron:
    case Framework::kDeepSpeed:
      return kMegatronVocabDivisor;
    case Framework::kFsdp:
    case Framework::kMeshplan:
      return 1;
  }
  return 1;
}

std::string vocab_padding_error(const PlanOptions& options, std::string_view field) {
  const int64_t divisor = vocab_size_divisible_by(options);
  if (divisor < 1 || divisor > kMaxVocabDivisor) {
    return fmt::format("{}: must be between 1 and {} ({})", field, kMaxVocabDivisor, divisor);
  }
  if (divisor > 1 && options.framework == Framework::kFsdp) {
    return fmt::format(
        "{}: {} under framework fsdp: torchtitan builds the tokenizer's vocabulary unpadded "
        "(use 1)",
        field, divisor);
  }
  return "";
}

int64_t padded_vocab_size(const models::TransformerConfig& model, int64_t tp,
                          const PlanOptions& options) {
  const int64_t multiple = vocab_size_divisible_by(options) * tp;
  return (model.vocab_size + multiple - 1) / multiple * multiple;
}

int64_t norm_parameters(const models::TransformerConfig& model) {
  return model.norm == models::Norm::kLayerNorm ? 2 * model.hidden_size : model.hidden_size;
}

LayerParameters layer_parameters(const models::TransformerConfig& model, int64_t tp, bool moe_layer,
                                 int64_t ep, int64_t etp) {
  // Megatron-LM tensor parallelism (Shoeybi et al. 2019, Sec. 3): QKV and the first MLP
  // projection are split by columns, the attention output and second MLP projection by rows;
  // row-parallel biases and norms are replicated.
  const int64_t h = model.hidden_size;
  const int64_t d = model.head_dim;
  const int64_t fc1_per_f = models::is_gated(model.activation) ? 2 : 1;
  LayerParameters p;
  if (model.is_mla()) {
    // Megatron-Core MLA (multi_latent_attention.py, Transformer Engine spec): linear_q_down_proj
    // and linear_kv_down_proj are TELinear with parallel_mode 'duplicated' on every tp rank
    // (with their latent norms); the up projections are column-parallel, linear_proj
    // row-parallel.
    const models::LayerParameterCounts counts = models::count_layer_parameters(model, false);
    const int64_t a = model.num_attention_heads;
    const int64_t qk_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
    const int64_t q_up = (model.q_lora_rank > 0 ? model.q_lora_rank : h) * a * qk_head;
    const int64_t kv_up = model.kv_lora_rank * a * (model.qk_nope_head_dim + model.v_head_dim);
    const int64_t out = a * model.v_head_dim * h;
    p.sharded = (q_up + kv_up + out) / tp;
    p.replicated = counts.attention - q_up - kv_up - out;
  } else {
    const int64_t qkv_columns = (model.num_attention_heads + 2 * model.num_kv_heads) * d;
    p.sharded = h * qkv_columns / tp + model.num_attention_heads * d * h / tp;
    if (model.qkv_bias) {
      p.sharded += qkv_columns / tp;
    }
    if (model.attention_output_bias) {
      p.replicated += h;
    }
    if (model.qk_norm) {
      p.replicated += 2 * d;  // Qwen3's q_norm, k_norm over one head: the same on every rank
    }
  }
  if (model.attention_sinks) {
    // One logit per head, split with the heads (Megatron-Core DotProductAttention.softmax_offset:
    // num_attention_heads / tp entries per rank).
    p.sharded += model.num_attention_heads / tp;
  }
  // One MLP of hidden size f sharded over `ways` ranks: fc1 columns and fc2 rows / ways, fc2's
  // bias whole on each of them, counted in `replicated`.
  const auto add_mlp = [&](int64_t f, int64_t copies, int64_t ways, int64_t& sharded,
                           int64_t& replicated) {
    sharded += copies * (h * fc1_per_f * f / ways + f * h / ways);
    if (model.mlp_bias) {
      sharded += copies * fc1_per_f * f / ways;
      replicated += copies * h;
    }
  };
  if (!moe_layer) {
    add_mlp(model.ffn_hidden_size, 1, tp, p.sharded, p.replicated);
  } else {
    // Megatron-Core MoE (moe/router.py, experts.py, shared_experts.py): the router weight is
    // replicated over tp; each ep rank holds E / ep experts, sharded over the expert tensor
    // parallel group (experts.py TEGroupedMLP: fc1 column- and fc2 row-parallel over
    // expt_tp, etp ranks); shared experts are an ordinary tp-sharded MLP.
    p.replicated += model.num_experts * h + (model.router_score_bias ? model.num_experts : 0) +
                    (model.router_bias ? model.num_experts : 0);
    // A routed expert's fc2 bias is its own (gpt-oss down_proj_bias), an expert parameter like
    // its weights, reduced over the expert data parallel group: Megatron-Core's TE grouped
    // linears set `allreduce` to `not (is_expert and expert_parallel)` on every parameter,
    // biases included (extensions/transformer_engine.py TEGroupedLinear).
    add_mlp(model.expert_ffn_hidden_size, model.num_experts / ep, etp > 0 ? etp : tp, p.expert,
            p.expert);
    add_mlp(model.shared_expert_ffn_hidden_size, model.num_shared_experts, tp, p.sharded,
            p.replicated);
    p.replicated += model.shared_expert_gate ? h : 0;
  }
  p.replicated += (model.sandwich_norm ? 4 : 2) * norm_parameters(model);  // sandwich: Gemma 2/3
  return p;
}

int64_t LayerRange::num_moe(const models::TransformerConfig& model) const {
  if (!model.is_moe()) {
    return 0;
  }
  if (!model.moe_layers.empty()) {  // a pattern: count the range's MoE entries
    return std::count(model.moe_layers.begin() + first, model.moe_layers.begin() + end, 1);
  }
  const int64_t dense_here = std::clamp<int64_t>(model.first_dense_layers - first, 0, count());
  return count() - dense_here;
}

LayerKind layer_kind(const models::TransformerConfig& model, int64_t layer) {
  return {model.is_moe_layer(layer), model.is_windowed_layer(layer)};
}

LayerKind mtp_layer_kind(const models::TransformerConfig& model) {
  return layer_kind(model, model.mtp_template_layer());
}

bool embedding_gradient_all_reduced(const models::TransformerConfig& model, const Layout& layout) {
  return layout.pp > 1 && (model.tied_embeddings || model.has_mtp());
}

int64_t stage_mtp_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage) {
  return stage == layout.pp - 1 ? model.mtp_num_layers : 0;
}

bool mtp_recomputed_under_full(const Layout& layout) {
  return layout.recompute == Recompute::kFull && layout.recompute_layers == 0;
}

StageParameters mtp_stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options) {
  StageParameters p;
  if (!model.has_mtp() || stage != layout.pp - 1) {
    return p;
  }
  // Megatron-Core multi_token_prediction.py MultiTokenPredictionLayer: enorm, hnorm,
  // eh_proj (ColumnParallelLinear 2h -> h, bias off), transformer_layer, final_layernorm.
  const LayerParameters layer =
      layer_parameters(model, layout.tp, model.mtp_layer_is_moe(), layout.ep, layout.etp);
  const int64_t h = model.hidden_size;
  p.sharded = model.mtp_num_layers * (layer.sharded + 2 * h * h / layout.tp);
  p.replicated = model.mtp_num_layers * (layer.replicated + 3 * norm_parameters(model));
  p.expert = model.mtp_num_layers * layer.expert;
  if (layout.pp > 1 && !model.tied_embeddings) {
    // The last stage builds `embedding` for the MTP depths (gpt_model.py: pre_process or
    // mtp_process); its gradient is all-reduced with stage 0's as a tied embedding's.
    p.sharded += padded_vocab_size(model, layout.tp, options) / layout.tp * h;
  }
  return p;
}

int64_t LayerRange::num_of_kind(const models::TransformerConfig& model, LayerKind kind) const {
  if (!model.has_window_pattern()) {  // every layer windowed, or none: O(1)
    const int64_t moe = num_moe(model);
    const int64_t of_mlp = kind.moe ? moe : count() - moe;
    return kind.windowed == model.is_windowed() ? of_mlp : 0;
  }
  // Layer by layer (is_windowed_layer is O(1); is_windowed would scan a list every call).
  int64_t n = 0;
  for (int64_t layer = first; layer < end; ++layer) {
    n += layer_kind(model, layer) == kind ? 1 : 0;
  }
  return n;
}

namespace {
// Functions before stage 0's first transformer layer in DeepSpeed GPT pipelines: Megatron-DeepSpeed
// GPTModelPipe's _to_float16 and EmbeddingPipe (megatron/model/gpt_model.py, f4157bea), GPT-NeoX
// GPT2ModelPipe's EmbeddingPipe and _pre_transformer_block (megatron/model/gpt2_model.py).
constexpr int64_t kDeepSpeedFirstStageLeadingFunctions = 2;

// The layers costed as layout.recompute says (layers_under_recompute).
LayerRange counted_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                                   const PlanOptions& options, const LayerRange& range) {
  return layout.recompute == Recompute::kFull ? recomputed_layers(model, layout, options, range)
                                              : range;
}
}  // namespace

LayerRange recomputed_layers(const models::TransformerConfig& model, const Layout& layout,
                             const PlanOptions& options, const LayerRange& range) {
  LayerRange recomputed = recomputed_layers(layout, range);
  if (options.framework != Framework::kDeepSpeed || layout.pp == 1 || layout.vpp != 1 ||
      layout.recompute != Recompute::kFull) {
    return recomputed;
  }
  // DeepSpeed's PipelineModule.forward (deepspeed/runtime/pipe/module.py, 0.19.6) walks the
  // stage's functions in runs of activation_checkpoint_interval N from the stage's first and
  // checkpoints a run only when _is_checkpointable finds every function in it a transformer
  // layer (GPTModelPipe/GPT2ModelPipe: ParallelTransformerLayerPipe, or GPT-NeoX's
  // checkpointable_layers); the other runs run whole and keep their activations. Stage 0's first
  // run holds the two leading functions and its first N - 2 layers. The last stage's functions end
  // with the final norm and the head (and a cast or _post_transformer_block), so its last
  // L mod N layers share their run. pp 1 is the plain engine (--no-pipeline-parallel), Megatron's
  // uniform groups from the first layer.
  const int64_t interval = std::max<int64_t>(layout.recompute_group_layers, 1);
  if (range.first == 0) {
    recomputed.first = std::min(
        range.end,
        range.first + std::max<int64_t>(0, interval - kDeepSpeedFirstStageLeadingFunctions));
  }
  if (range.end == model.num_layers) {
    recomputed.end = std::max(recomputed.first, range.end - range.count() % interval);
  }
  return recomputed;
}

int64_t checkpointed_input_count(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options, const LayerRange& range) {
  const int64_t recomputed = recomputed_layers(model, layout, options, range).count();
  const int64_t group = layout.recompute_group_layers > 1 ? layout.recompute_group_layers : 1;
  return (recomputed + group - 1) / group;
}

double checkpointed_inputs_per_recomputed_layer(const models::TransformerConfig& model,
                                                const Layout& layout, const PlanOptions& options,
                                                const LayerRange& range) {
  const int64_t recomputed = recomputed_layers(model, layout, options, range).count();
  if (recomputed == 0) {
    return 1.0;
  }
  return static_cast<double>(checkpointed_input_count(model, layout, options, range)) /
         static_cast<double>(recomputed);
}

int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range,
                               bool moe_layer) {
  const LayerRange counted = counted_under_recompute(model, layout, options, range);
  const int64_t moe = counted.num_moe(model);
  return moe_layer ? moe : counted.count() - moe;
}

int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range,
                               LayerKind kind) {
  return counted_under_recompute(model, layout, options, range).num_of_kind(model, kind);
}

LayerRange chunk_layers(const models::TransformerConfig& model, const Layout& layout, int64_t stage,
                        int64_t chunk) {
  return stage_layer_range(model, layout, stage, chunk);
}

StageParameters stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                 int64_t stage, const PlanOptions& options) {
  StageParameters p;
  const LayerParameters dense = layer_parameters(model, layout.tp);
  const LayerParameters moe =
      model.is_moe() ? layer_parameters(model, layout.tp, true, layout.ep, layout.etp) : dense;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    const LayerRange range = chunk_layers(model, layout, stage, chunk);
    const int64_t num_moe = range.num_moe(model);
    const int64_t num_dense = range.count() - num_moe;
    p.sharded += dense.sharded * num_dense + moe.sharded * num_moe;
    p.replicated += dense.replicated * num_dense + moe.replicated * num_moe;
    p.expert += moe.expert * num_moe;
  }
  const StageParameters outside = stage_outside_layer_parameters(model, layout, stage, options);
  p.sharded += outside.sharded;
  p.replicated += outside.replicated;
  const StageParameters mtp = mtp_stage_parameters(model, layout, stage, options);
  p.sharded += mtp.sharded;
  p.replicated += mtp.replicated;
  p.expert += mtp.expert;
  return p;
}

StageParameters stage_embedding_parameters(const models::TransformerConfig& model,
                                           const Layout& layout, int64_t stage,
                                           const PlanOptions& options) {
  StageParameters p;
  if (stage == 0) {
    p.sharded += padded_vocab_size(model, layout.tp, options) / layout.tp * model.hidden_size;
    if (model.positions == models::Positions::kLearned) {
      p.replicated += model.max_position_embeddings * model.hidden_size;
    }
  }
  return p;
}

StageParameters stage_outside_layer_parameters(const models::TransformerConfig& model,
                                               const Layout& layout, int64_t stage,
                                               const PlanOptions& options) {
  StageParameters p = stage_embedding_parameters(model, layout, stage, options);
  const int64_t vocab_shard = padded_vocab_size(model, layout.tp, options) / layout.tp;
  if (stage == layout.pp - 1) {
    p.replicated += norm_parameters(model);
    // Untied models own an LM head; tied ones keep a copy on the last stage when pp > 1
    // (Megatron-LM's embedding group), and share the embedding when pp == 1.
    if (!model.tied_embeddings || layout.pp > 1) {
      p.sharded += vocab_shard * model.hidden_size;
    }
  }
  return p;
}

int64_t stage_expert_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options) {
  return stage_parameters(model, layout, stage, options).expert;
}

int64_t stage_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage, const PlanOptions& options) {
  const StageParameters p = stage_parameters(model, layout, stage, options);
  return p.sharded + p.replicated + p.expert;
}

}  // namespace meshplan::planner
