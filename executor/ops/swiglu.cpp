#include "ops/swiglu.h"

#include <cmath>

#include "ops/gated_unit.h"

namespace meshplan::executor {

namespace {
// silu(x) = x sigmoid(x); d silu(x)/dx = s (1 + x (1 - s)) with s = sigmoid(x).
struct Silu {
  template <typename Real>
  static Real sigmoid(Real x) {
    return Real(1) / (Real(1) + std::exp(-x));
  }
  template <typename Real>
  static Real value(Real x) {
    return x * sigmoid(x);
  }
  template <typename Real>
  static Real derivative(Real x) {
    const Real s = sigmoid(x);
    return s * (Real(1) + x * (Real(1) - s));
  }
};
}  // namespace

template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options) {
  gated_unit_forward<Silu>(out, inp, N, F, options);
}

template <typename Real>
void swiglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                     GatedUnitOptions options) {
  gated_unit_backward<Silu>(dinp, inp, dout, N, F, options);
}

template void swiglu_forward<float>(float*, const float*, int, int, GatedUnitOptions);
template void swiglu_backward<float>(float*, const float*, const float*, int, int,
                                     GatedUnitOptions);
template void swiglu_forward<double>(double*, const double*, int, int, GatedUnitOptions);
template void swiglu_backward<double>(double*, const double*, const double*, int, int,
                                      GatedUnitOptions);

}  // namespace meshplan::executor
