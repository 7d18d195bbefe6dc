#include "ops/layernorm.h"

#include <cmath>
#include <cstdint>

namespace meshplan::executor {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const Real* x = inp + static_cast<int64_t>(n) * C;
    Real sum = 0;
    for (int i = 0; i < C; i++) {
      sum += x[i];
    }
    const Real m = sum / C;
    Real variance = 0;
    for (int i = 0; i < C; i++) {
      const Real shifted = x[i] - m;
      variance += shifted * shifted;
    }
    variance /= C;
    const Real s = Real(1) / std::sqrt(variance + static_cast<Real>(kNormEpsilon));
    Real* y = out + static_cast<int64_t>(n) * C;
    for (int i = 0; i < C; i++) {
      y[i] = (x[i] - m) * s * weight[i] + bias[i];
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
  // With xhat = (x - mean) rstd and g = weight * dout:
  // dx = rstd (g - mean(g) - xhat mean(g xhat)), as in llm.c's layernorm_backward.
  for (int n = 0; n < N; n++) {
    const Real* dy = dout + static_cast<int64_t>(n) * C;
    const Real* x = inp + static_cast<int64_t>(n) * C;
    Real* dx = dinp + static_cast<int64_t>(n) * C;
    const Real m = mean[n];
    const Real s = rstd[n];
    Real g_mean = 0;
    Real g_xhat_mean = 0;
    for (int i = 0; i < C; i++) {
      const Real xhat = (x[i] - m) * s;
      const Real g = weight[i] * dy[i];
      g_mean += g;
      g_xhat_mean += g * xhat;
    }
    g_mean /= C;
    g_xhat_mean /= C;
    for (int i = 0; i < C; i++) {
      const Real xhat = (x[i] - m) * s;
      const Real g = weight[i] * dy[i];
      dbias[i] += dy[i];
      dweight[i] += xhat * dy[i];
      dx[i] += s * (g - g_mean - xhat * g_xhat_mean);
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace meshplan::executor
