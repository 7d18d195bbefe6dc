#include "ops/swiglu.h"

#include <cmath>
#include <cstdint>

namespace meshplan::executor {

template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F) {
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* y = out + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      const Real sigmoid = Real(1) / (Real(1) + std::exp(-gate[i]));
      y[i] = gate[i] * sigmoid * up[i];
    }
  }
}

template <typename Real>
void swiglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F) {
  // d silu(x)/dx = s (1 + x (1 - s)) with s = sigmoid(x).
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* dgate = dinp + static_cast<int64_t>(n) * 2 * F;
    Real* dup = dgate + F;
    const Real* dy = dout + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      const Real sigmoid = Real(1) / (Real(1) + std::exp(-gate[i]));
      const Real silu = gate[i] * sigmoid;
      dgate[i] += dy[i] * up[i] * sigmoid * (Real(1) + gate[i] * (Real(1) - sigmoid));
      dup[i] += dy[i] * silu;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace meshplan::executor
