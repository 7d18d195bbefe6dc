#pragma once
// The model's normalisation, LayerNorm or RMSNorm as the plan says, behind one call. RMSNorm has
// no bias and saves no mean: `bias`, `dbias` and `mean` are unused (may be null) for it. With
// model.norm_unit_offset (Gemma's RMSNorm) the scale is (1 + weight): the kernels run with that
// gain, and since d(1 + w)/dw = 1 the weight's gradient is the gain's.
//
// Shape letters: N rows, C channels.

#include <vector>

#include "meshplan/models.h"
#include "ops/layernorm.h"
#include "ops/rmsnorm.h"

namespace meshplan::executor {

/// The gain the kernels scale by: `weight` (C) itself, or 1 + weight into `storage`.
inline const float* norm_gain(const models::TransformerConfig& model, const float* weight, int C,
                              std::vector<float>* storage) {
  if (!model.norm_unit_offset) {
    return weight;
  }
  storage->resize(static_cast<size_t>(C));
  for (int c = 0; c < C; c++) {
    (*storage)[static_cast<size_t>(c)] = 1.0f + weight[c];
  }
  return storage->data();
}

inline void norm_forward(const models::TransformerConfig& model, float* out, float* mean,
                         float* rstd, const float* inp, const float* weight, const float* bias,
                         int N, int C) {
  std::vector<float> storage;
  const float* gain = norm_gain(model, weight, C, &storage);
  if (model.norm == models::Norm::kLayerNorm) {
    layernorm_forward(out, mean, rstd, inp, gain, bias, N, C);
  } else {
    rmsnorm_forward(out, rstd, inp, gain, N, C);
  }
}

inline void norm_backward(const models::TransformerConfig& model, float* dinp, float* dweight,
                          float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C) {
  std::vector<float> storage;
  const float* gain = norm_gain(model, weight, C, &storage);
  if (model.norm == models::Norm::kLayerNorm) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, gain, mean, rstd, N, C);
  } else {
    rmsnorm_backward(dinp, dweight, dout, inp, gain, rstd, N, C);
  }
}

}  // namespace meshplan::executor
