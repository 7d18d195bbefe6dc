#include "ops/geglu.h"

#include "ops/gated_unit.h"
#include "ops/gelu.h"

namespace meshplan::executor {

namespace {
// GELU in its tanh form (ops/gelu.h).
struct Gelu {
  template <typename Real>
  static Real value(Real x) {
    return gelu_value(x);
  }
  template <typename Real>
  static Real derivative(Real x) {
    return gelu_derivative(x);
  }
};
}  // namespace

template <typename Real>
void geglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options) {
  gated_unit_forward<Gelu>(out, inp, N, F, options);
}

template <typename Real>
void geglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                    GatedUnitOptions options) {
  gated_unit_backward<Gelu>(dinp, inp, dout, N, F, options);
}

template void geglu_forward<float>(float*, const float*, int, int, GatedUnitOptions);
template void geglu_backward<float>(float*, const float*, const float*, int, int, GatedUnitOptions);
template void geglu_forward<double>(double*, const double*, int, int, GatedUnitOptions);
template void geglu_backward<double>(double*, const double*, const double*, int, int,
                                     GatedUnitOptions);

}  // namespace meshplan::executor
