#include "ops/rmsnorm.h"

#include <cmath>
#include <cstdint>

#include "ops/layernorm.h"

namespace meshplan::executor {

template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C) {
  for (int n = 0; n < N; n++) {
    const Real* x = inp + static_cast<int64_t>(n) * C;
    Real square_sum = 0;
    for (int i = 0; i < C; i++) {
      square_sum += x[i] * x[i];
    }
    const Real s = Real(1) / std::sqrt(square_sum / C + static_cast<Real>(kNormEpsilon));
    Real* y = out + static_cast<int64_t>(n) * C;
    for (int i = 0; i < C; i++) {
      y[i] = x[i] * s * weight[i];
    }
    rstd[n] = s;
  }
}

template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                      const Real* weight, const Real* rstd, int N, int C) {
  // y_i = w_i x_i r with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C and, with
  // g = w * dy: dx_j = r (g_j - x_j r^2 mean(g x)).
  for (int n = 0; n < N; n++) {
    const Real* dy = dout + static_cast<int64_t>(n) * C;
    const Real* x = inp + static_cast<int64_t>(n) * C;
    Real* dx = dinp + static_cast<int64_t>(n) * C;
    const Real s = rstd[n];
    Real g_x_mean = 0;
    for (int i = 0; i < C; i++) {
      g_x_mean += weight[i] * dy[i] * x[i];
    }
    g_x_mean /= C;
    for (int i = 0; i < C; i++) {
      dweight[i] += dy[i] * x[i] * s;
      dx[i] += s * (weight[i] * dy[i] - x[i] * s * s * g_x_mean);
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int);

}  // namespace meshplan::executor
