// DeepSpeed's pipeline stage splits: what PipelineModule's partition_method builds, so a
// DeepSpeed plan holds the layers DeepSpeed would give each stage (DeepSpeed 0.19.6,
// deepspeed/runtime/pipe/module.py _partition_layers; deepspeed/runtime/utils.py
// partition_balanced).

#include <algorithm>
#include <cmath>
#include <compare>
#include <limits>
#include <map>
#include <utility>

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

namespace {

// deepspeed/runtime/utils.py partition_balanced (0.19.6): the linear partition of `weights`
// into `parts` contiguous parts that minimises the spread max - min of the part sums, by
// dynamic programming over (items, parts); on equal spreads the last split point wins
// (`if dp_cost[i, j] >= cost`). Returns the parts + 1 boundaries. n <= parts falls back to
// partition_uniform's min(p, n).
std::vector<size_t> partition_balanced(const std::vector<double>& weights, size_t parts) {
  const size_t n = weights.size();
  std::vector<size_t> bounds(parts + 1, 0);
  if (n <= parts) {
    for (size_t p = 0; p <= parts; ++p) {
      bounds[p] = std::min(p, n);
    }
    return bounds;
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t width = parts + 1;
  std::vector<double> best_max((n + 1) * width, kInf);
  std::vector<double> best_min((n + 1) * width, kInf);
  std::vector<double> best_cost((n + 1) * width, kInf);
  std::vector<size_t> position((n + 1) * width, 0);
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + weights[i];
  }
  best_max[0] = 0.0;
  best_cost[0] = 0.0;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= std::min(i, parts); ++j) {
      for (size_t k = 0; k < i; ++k) {
        const double part = prefix[i] - prefix[k];
        const double max_sum = std::max(best_max[k * width + j - 1], part);
        const double min_sum = std::min(best_min[k * width + j - 1], part);
        const double cost = max_sum - min_sum;
        if (best_cost[i * width + j] >= cost) {
          best_cost[i * width + j] = cost;
          best_max[i * width + j] = max_sum;
          best_min[i * width + j] = min_sum;
          position[i * width + j] = k;
        }
      }
    }
  }
  bounds[parts] = n;
  for (size_t j = parts; j >= 1; --j) {
    bounds[j - 1] = position[bounds[j] * width + j];
  }
  return bounds;
}

// A GPT pipeline's layer specs as DeepSpeed models build them (GPT-NeoX gpt2_model.py,
// Megatron-DeepSpeed gpt_model.py GPTModelPipe): the embedding, the transformer layers, the
// final norm and the LM head (a TiedLayerSpec with tied embeddings, counted again by
// _count_layer_params, which builds every LayerSpec). Function specs between them weigh 0 under
// every method and move no transformer layer, so they are left out. Per tensor-parallel rank:
// _count_layer_params counts the rank's own (vocab- and tp-sharded) parameters.
//
// One method's weights of those specs, in compact form: the embedding, num_layers transformer
// layers (the first dense_layers weigh `dense`, the rest `moe`; with a moe_layers pattern each
// layer by its entry), the final norm and the LM head.
// "parameters": each spec's parameters; "type:transformer": 1 per transformer layer;
// "type:transformer|embedding": also 1 for the embedding, and for the LM head when it is the tied
// embedding (Megatron-DeepSpeed's TiedLayerSpec "embed" of EmbeddingPipe at both ends).
struct SpecWeights {
  double embedding = 0;
  double dense = 0;
  double moe = 0;
  int64_t num_layers = 0;
  int64_t dense_layers = 0;
  std::vector<int> moe_layers;  // the model's pattern, empty for a dense prefix
  double norm = 0;
  double head = 0;
  auto operator<=>(const SpecWeights&) const = default;

  std::vector<double> expanded() const {
    std::vector<double> weights{embedding};
    for (int64_t layer = 0; layer < num_layers; ++layer) {
      const bool moe_layer =
          moe_layers.empty() ? layer >= dense_layers : moe_layers[static_cast<size_t>(layer)] != 0;
      weights.push_back(moe_layer ? moe : dense);
    }
    weights.push_back(norm);
    weights.push_back(head);
    return weights;
  }
};

SpecWeights spec_weights(const models::TransformerConfig& model, int64_t tp,
                         DeepSpeedPartition method, const PlanOptions& options) {
  SpecWeights w;
  w.num_layers = model.num_layers;
  w.dense_layers =
      model.is_moe() ? std::min(model.first_dense_layers, model.num_layers) : model.num_layers;
  w.moe_layers = model.moe_layers;
  switch (method) {
    case DeepSpeedPartition::kTypeTransformer:
      w.dense = w.moe = 1;
      return w;
    case DeepSpeedPartition::kTypeTransformerEmbedding:
      w.dense = w.moe = 1;
      w.embedding = 1;
      w.head = model.tied_embeddings ? 1 : 0;
      return w;
    case DeepSpeedPartition::kParameters:
      break;
  }
  Layout one_stage;
  one_stage.tp = tp;
  const StageParameters embedding = stage_embedding_parameters(model, one_stage, 0, options);
  w.embedding = static_cast<double>(embedding.sharded + embedding.replicated);
  const auto total = [](const LayerParameters& p) {
    return static_cast<double>(p.sharded + p.replicated + p.expert);
  };
  w.dense = total(layer_parameters(model, tp));
  w.moe = model.is_moe() ? total(layer_parameters(model, tp, true)) : w.dense;
  w.norm = static_cast<double>(norm_parameters(model));
  w.head = static_cast<double>(padded_vocab_size(model, tp, options) / tp * model.hidden_size);
  return w;
}

// Transformer layers per stage for the boundaries of a partition of the specs (spec i is a
// transformer layer for 1 <= i <= num_layers).
std::vector<int64_t> layers_per_stage(const std::vector<size_t>& bounds, int64_t num_layers) {
  const auto layers_before = [num_layers](size_t spec) {
    return std::clamp<int64_t>(static_cast<int64_t>(spec) - 1, 0, num_layers);
  };
  std::vector<int64_t> layers;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    layers.push_back(layers_before(bounds[s + 1]) - layers_before(bounds[s]));
  }
  return layers;
}

}  // namespace

std::vector<int64_t> deepspeed_stage_layers(const models::TransformerConfig& model, int64_t tp,
                                            int64_t pp, DeepSpeedPartition method,
                                            const PlanOptions& options) {
  // The search asks once per layout, and the partition is O(specs^2 pp): remembered per thread,
  // keyed by the O(1) weights, so a hit costs no pass over the layers.
  thread_local std::map<std::pair<SpecWeights, int64_t>, std::vector<int64_t>> known;
  auto key = std::make_pair(spec_weights(model, tp, method, options), pp);
  if (const auto found = known.find(key); found != known.end()) {
    return found->second;
  }
  std::vector<int64_t> layers = layers_per_stage(
      partition_balanced(key.first.expanded(), static_cast<size_t>(pp)), model.num_layers);
  if (known.size() > 256) {
    known.clear();
  }
  known.emplace(key, layers);
  return layers;
}

std::vector<std::vector<int64_t>> deepspeed_stage_splits(const models::TransformerConfig& model,
                                                         int64_t tp, int64_t pp,
                                                         const PlanOptions& options) {
  std::vector<std::vector<int64_t>> splits;
  for (DeepSpeedPartition method : kDeepSpeedPartitions) {
    std::vector<int64_t> split = deepspeed_stage_layers(model, tp, pp, method, options);
    const bool every_stage_has_a_layer =
        std::all_of(split.begin(), split.end(), [](int64_t n) { return n > 0; });
    split = canonical_stage_layers(split);
    if (every_stage_has_a_layer && std::find(splits.begin(), splits.end(), split) == splits.end()) {
      splits.push_back(split);
    }
  }
  return splits;
}

std::optional<DeepSpeedPartition> deepspeed_partition_of(const models::TransformerConfig& model,
                                                         const Layout& layout,
                                                         const PlanOptions& options) {
  for (DeepSpeedPartition method : kDeepSpeedPartitions) {
    if (canonical_stage_layers(deepspeed_stage_layers(model, layout.tp, layout.pp, method,
                                                      options)) == layout.stage_layers) {
      return method;
    }
  }
  return std::nullopt;
}

std::string to_string(DeepSpeedPartition method) {
  switch (method) {
    case DeepSpeedPartition::kTypeTransformer:
      return "type:transformer";
    case DeepSpeedPartition::kParameters:
      return "parameters";
    case DeepSpeedPartition::kTypeTransformerEmbedding:
      return "type:transformer|embedding";
  }
  return "?";
}

}  // namespace meshplan::planner
