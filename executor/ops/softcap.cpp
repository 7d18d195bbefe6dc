#include "ops/softcap.h"

#include <cmath>

#include "ops/eigen_maps.h"

namespace meshplan::executor {

template <typename Real>
void softcap_forward(Real* x, int64_t N, double c) {
  const Real cap = static_cast<Real>(c);
  VectorMap<Real> v(x, N);
  v = (v / cap).array().tanh() * cap;
}

template <typename Real>
void softcap_backward(Real* dx, const Real* y, int64_t N, double c) {
  const Real cap = static_cast<Real>(c);
  ConstVectorMap<Real> u(y, N);
  VectorMap<Real>(dx, N).array() *= Real(1) - (u / cap).array().square();
}

template void softcap_forward<float>(float*, int64_t, double);
template void softcap_backward<float>(float*, const float*, int64_t, double);
template void softcap_forward<double>(double*, int64_t, double);
template void softcap_backward<double>(double*, const double*, int64_t, double);

}  // namespace meshplan::executor
