#pragma once
// The model's normalisation, LayerNorm or RMSNorm as the plan says, behind one call. RMSNorm has
// no bias and saves no mean: `bias`, `dbias` and `mean` are unused (may be null) for it.
//
// Shape letters: N rows, C channels.

#include "meshplan/models.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"

namespace meshplan::executor {

inline void norm_forward(models::Norm norm, float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) {
  if (norm == models::Norm::kLayerNorm) {
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  } else {
    rmsnorm_forward(out, rstd, inp, weight, N, C);
  }
}

inline void norm_backward(models::Norm norm, float* dinp, float* dweight, float* dbias,
                          const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C) {
  if (norm == models::Norm::kLayerNorm) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  } else {
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
}

}  // namespace meshplan::executor
