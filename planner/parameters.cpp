// Where parameters sit: per rank of each pipeline stage, after tensor-parallel sharding.

#include <fmt/format.h>

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

int64_t padded_vocab_size(const models::TransformerConfig& model, int64_t tp) {
  return (model.vocab_size + tp - 1) / tp * tp;
}

int64_t norm_parameters(const models::TransformerConfig& model) {
  return model.norm == models::Norm::kLayerNorm ? 2 * model.hidden_size : model.hidden_size;
}

LayerParameters layer_parameters(const models::TransformerConfig& model, int64_t tp) {
  // Megatron-LM tensor parallelism (Shoeybi et al. 2019, Sec. 3): QKV and the first MLP
  // projection are split by columns, the attention output and second MLP projection by rows;
  // row-parallel biases and norms are replicated.
  const int64_t h = model.hidden_size;
  const int64_t d = model.head_dim;
  const int64_t f = model.ffn_hidden_size;
  const int64_t qkv_columns = (model.num_attention_heads + 2 * model.num_kv_heads) * d;
  const int64_t fc1_columns = model.activation == models::Activation::kSwiglu ? 2 * f : f;
  LayerParameters p;
  p.sharded = h * qkv_columns / tp + model.num_attention_heads * d * h / tp + h * fc1_columns / tp +
              f * h / tp;
  if (model.qkv_bias) {
    p.sharded += qkv_columns / tp;
  }
  if (model.mlp_bias) {
    p.sharded += fc1_columns / tp;
    p.replicated += h;  // second projection's bias
  }
  if (model.attention_output_bias) {
    p.replicated += h;
  }
  p.replicated += 2 * norm_parameters(model);
  return p;
}

StageParameters stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                 int64_t stage) {
  StageParameters p;
  const LayerParameters layer = layer_parameters(model, layout.tp);
  const int64_t num_layers = stage_layer_count(model, layout, stage);
  p.sharded = layer.sharded * num_layers;
  p.replicated = layer.replicated * num_layers;
  const int64_t vocab_shard = padded_vocab_size(model, layout.tp) / layout.tp;
  if (stage == 0) {
    p.sharded += vocab_shard * model.hidden_size;
    if (model.positions == models::Positions::kLearned) {
      p.replicated += model.max_position_embeddings * model.hidden_size;
    }
  }
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

int64_t stage_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage) {
  const StageParameters p = stage_parameters(model, layout, stage);
  return p.sharded + p.replicated;
}

}  // namespace meshplan::planner
