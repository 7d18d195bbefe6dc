#pragma once
// Private: Transformer Engine's FP8 casts around the linear GEMMs (--precision fp8).

#include "linear_gemms.h"

namespace meshplan::planner {

/// HBM bytes (read plus written) of one layer's FP8 casts and transposes for one micro-batch on
/// one rank, forward and backward, around its linear GEMMs (layer_linear_gemms); norm_tokens:
/// the rows a norm writes (T / t under sequence parallelism, else T).
struct Fp8CastBytes {
  double forward = 0;
  double backward = 0;
};
Fp8CastBytes fp8_cast_bytes(const LinearGemms& gemms, bool sequence_parallel, double norm_tokens);

}  // namespace meshplan::planner
