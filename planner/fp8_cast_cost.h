#pragma once
// Private: Transformer Engine's FP8 casts around the linear GEMMs (--precision fp8).

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

/// HBM bytes (read plus written) of one layer's FP8 casts and transposes for one micro-batch on
/// one rank, forward and backward; zero unless options.gemm_precision is fp8.
struct Fp8CastBytes {
  double forward = 0;
  double backward = 0;
};
Fp8CastBytes fp8_cast_bytes(const models::TransformerConfig& model, const Layout& layout,
                            const PlanOptions& options, const Shape& x, bool moe_layer);

}  // namespace meshplan::planner
