#include "ops/gelu.h"

namespace meshplan::executor {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int N) {
  for (int i = 0; i < N; i++) {
    out[i] = gelu_value(inp[i]);
  }
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int N) {
  for (int i = 0; i < N; i++) {
    dinp[i] += gelu_derivative(inp[i]) * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int);
template void gelu_backward<float>(float*, const float*, const float*, int);
template void gelu_forward<double>(double*, const double*, int);
template void gelu_backward<double>(double*, const double*, const double*, int);

}  // namespace meshplan::executor
