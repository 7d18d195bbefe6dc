#include "ops/geglu.h"

#include <cstdint>

#include "ops/gelu.h"

namespace meshplan::executor {

template <typename Real>
void geglu_forward(Real* out, const Real* inp, int N, int F) {
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* y = out + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      y[i] = gelu_value(gate[i]) * up[i];
    }
  }
}

template <typename Real>
void geglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F) {
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* dgate = dinp + static_cast<int64_t>(n) * 2 * F;
    Real* dup = dgate + F;
    const Real* dy = dout + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      dgate[i] += dy[i] * up[i] * gelu_derivative(gate[i]);
      dup[i] += dy[i] * gelu_value(gate[i]);
    }
  }
}

template void geglu_forward<float>(float*, const float*, int, int);
template void geglu_backward<float>(float*, const float*, const float*, int, int);
template void geglu_forward<double>(double*, const double*, int, int);
template void geglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace meshplan::executor
