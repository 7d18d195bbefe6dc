#include "ops/quick_geglu.h"

#include <cmath>

#include "ops/gated_unit.h"

namespace meshplan::executor {

namespace {
// quick_gelu(x) = x s with s = sigmoid(alpha x); d/dx = s + alpha x s (1 - s).
struct QuickGelu {
  template <typename Real>
  static Real sigmoid(Real x) {
    return Real(1) / (Real(1) + std::exp(-static_cast<Real>(kQuickGeluAlpha) * x));
  }
  template <typename Real>
  static Real value(Real x) {
    return x * sigmoid(x);
  }
  template <typename Real>
  static Real derivative(Real x) {
    const Real s = sigmoid(x);
    return s + static_cast<Real>(kQuickGeluAlpha) * x * s * (Real(1) - s);
  }
};
}  // namespace

template <typename Real>
void quick_geglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options) {
  gated_unit_forward<QuickGelu>(out, inp, N, F, options);
}

template <typename Real>
void quick_geglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                          GatedUnitOptions options) {
  gated_unit_backward<QuickGelu>(dinp, inp, dout, N, F, options);
}

template void quick_geglu_forward<float>(float*, const float*, int, int, GatedUnitOptions);
template void quick_geglu_backward<float>(float*, const float*, const float*, int, int,
                                          GatedUnitOptions);
template void quick_geglu_forward<double>(double*, const double*, int, int, GatedUnitOptions);
template void quick_geglu_backward<double>(double*, const double*, const double*, int, int,
                                           GatedUnitOptions);

}  // namespace meshplan::executor
