#pragma once
// Private planner helpers shared by the cost model's files.

#include <cstdint>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

struct LayerParameters {
  int64_t sharded = 0;     // split over tp ranks (count per rank)
  int64_t replicated = 0;  // identical on every tp rank (norms, row-parallel biases)
};
using StageParameters = LayerParameters;

int64_t norm_parameters(const models::TransformerConfig& model);
LayerParameters layer_parameters(const models::TransformerConfig& model, int64_t tp);
StageParameters stage_parameters(const models::TransformerConfig& model, const Layout& layout,
                                 int64_t stage);

/// The shape letters of one micro-batch on one rank, as doubles for cost formulas:
/// t tp, T tokens (micro_batch * s / cp: rank_micro_batch_tokens), h, d, a, g, f, s, e element
/// bytes, sp the sequence split (t with sequence parallelism, else 1), fc1 the first MLP
/// projection's columns (f, 2f SwiGLU).
struct Shape {
  double t, tokens, h, d, a, g, f, s, e, sp, fc1;
};
Shape shape_of(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
               const Layout& layout);

/// Forward matmul FLOPs of one layer for `tokens` tokens, whole (not divided by tp).
struct LayerFlops {
  double qkv = 0;        // 2 T h (a + 2g) d
  double attention = 0;  // scores and attention-times-values: 2 * 2 T s a d
  double output = 0;     // 2 T a d h
  double mlp = 0;        // 2 T h f * (2 gelu | 3 swiglu)
  double total() const { return qkv + attention + output + mlp; }
};
LayerFlops layer_forward_flops(const models::TransformerConfig& model, double tokens);
/// LM head forward FLOPs: 2 T h V.
double lm_head_forward_flops(const models::TransformerConfig& model, double tokens);

/// Element sizes: weights/activations/communication, and gradients (ZeRO's K=12 accounting
/// keeps gradients in the compute precision).
int64_t element_bytes(const models::ClusterConfig& cluster);

}  // namespace meshplan::planner
