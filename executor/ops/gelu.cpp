#include "ops/gelu.h"

#include <cmath>

namespace meshplan::executor {

namespace {
// sqrt(2 / pi) and the cubic coefficient, Hendrycks and Gimpel 2016, Sec. 2.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int N) {
  const Real scale = static_cast<Real>(kGeluScale);
  const Real cubic = static_cast<Real>(kGeluCubic);
  for (int i = 0; i < N; i++) {
    const Real x = inp[i];
    out[i] = Real(0.5) * x * (Real(1) + std::tanh(scale * (x + cubic * x * x * x)));
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int N) {
  const Real scale = static_cast<Real>(kGeluScale);
  const Real cubic = static_cast<Real>(kGeluCubic);
  for (int i = 0; i < N; i++) {
    const Real x = inp[i];
    const Real u = scale * (x + cubic * x * x * x);
    const Real tanh_u = std::tanh(u);
    const Real sech2 = Real(1) - tanh_u * tanh_u;
    const Real du = scale * (Real(1) + Real(3) * cubic * x * x);
    dinp[i] += (Real(0.5) * (Real(1) + tanh_u) + Real(0.5) * x * sech2 * du) * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int);
template void gelu_backward<float>(float*, const float*, const float*, int);
template void gelu_forward<double>(double*, const double*, int);
template void gelu_backward<double>(double*, const double*, const double*, int);

}  // namespace meshplan::executor
