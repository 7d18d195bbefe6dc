#include "ops/head_norm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/rmsnorm.h"

namespace meshplan::executor {

void head_norm_forward(float* qkv, float* raw, float* rstd, const float* q_gain,
                       const float* k_gain, int N, int NH, int KVH, int HS, int QKV) {
  const int64_t heads = NH + KVH;
  for (int n = 0; n < N; n++) {
    float* row = qkv + static_cast<int64_t>(n) * QKV;
    float* saved = raw + static_cast<int64_t>(n) * heads * HS;
    float* row_rstd = rstd + static_cast<int64_t>(n) * heads;
    std::copy(row, row + heads * HS, saved);
    // Each head is one RMSNorm row of HS channels.
    rmsnorm_forward(row, row_rstd, saved, q_gain, NH, HS);
    rmsnorm_forward(row + static_cast<int64_t>(NH) * HS, row_rstd + NH,
                    saved + static_cast<int64_t>(NH) * HS, k_gain, KVH, HS);
  }
}

void head_norm_backward(float* d_qkv, float* dq_gain, float* dk_gain, const float* raw,
                        const float* rstd, const float* q_gain, const float* k_gain, int N, int NH,
                        int KVH, int HS, int QKV) {
  const int64_t heads = NH + KVH;
  std::vector<float> d_normed(static_cast<size_t>(heads * HS));
  for (int n = 0; n < N; n++) {
    float* row = d_qkv + static_cast<int64_t>(n) * QKV;
    const float* saved = raw + static_cast<int64_t>(n) * heads * HS;
    const float* row_rstd = rstd + static_cast<int64_t>(n) * heads;
    // The row's query and key columns are replaced by the gradient before the norm (the
    // backward adds into a zeroed row).
    std::copy(row, row + heads * HS, d_normed.begin());
    std::fill(row, row + heads * HS, 0.0f);
    rmsnorm_backward(row, dq_gain, d_normed.data(), saved, q_gain, row_rstd, NH, HS);
    rmsnorm_backward(row + static_cast<int64_t>(NH) * HS, dk_gain,
                     d_normed.data() + static_cast<int64_t>(NH) * HS,
                     saved + static_cast<int64_t>(NH) * HS, k_gain, row_rstd + NH, KVH, HS);
  }
}

}  // namespace meshplan::executor
