#include "ops/residual.h"

#include "ops/eigen_maps.h"

namespace meshplan::executor {

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int N) {
  VectorMap<Real>(out, N) = ConstVectorMap<Real>(inp1, N) + ConstVectorMap<Real>(inp2, N);
}

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int N) {
  ConstVectorMap<Real> dy(dout, N);
  VectorMap<Real>(dinp1, N) += dy;
  VectorMap<Real>(dinp2, N) += dy;
}

template void residual_forward<float>(float*, const float*, const float*, int);
template void residual_backward<float>(float*, float*, const float*, int);
template void residual_forward<double>(double*, const double*, const double*, int);
template void residual_backward<double>(double*, double*, const double*, int);

}  // namespace meshplan::executor
