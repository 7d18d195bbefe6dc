#include "ops/linear.h"

#include <cstdint>

#include "ops/eigen_maps.h"
#include "ops/gemm_clock.h"

namespace meshplan::executor {

template <typename Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C,
                    int OC) {
  const GemmClock clock;
  MatrixMap<Real> y(out, N, OC);
  y.noalias() = ConstMatrixMap<Real>(inp, N, C) * ConstMatrixMap<Real>(weight, OC, C).transpose();
  if (bias != nullptr) {
    y.rowwise() += ConstVectorMap<Real>(bias, OC).transpose();
  }
}

template <typename Real>
void linear_backward_input(Real* dinp, const Real* dout, const Real* weight, int N, int C, int OC) {
  const GemmClock clock;
  MatrixMap<Real>(dinp, N, C).noalias() +=
      ConstMatrixMap<Real>(dout, N, OC) * ConstMatrixMap<Real>(weight, OC, C);
}

template <typename Real>
void linear_backward_weight(Real* dweight, Real* dbias, const Real* dout, const Real* inp, int N,
                            int C, int OC) {
  const GemmClock clock;
  ConstMatrixMap<Real> dy(dout, N, OC);
  MatrixMap<Real>(dweight, OC, C).noalias() += dy.transpose() * ConstMatrixMap<Real>(inp, N, C);
  if (dbias != nullptr) {
    VectorMap<Real>(dbias, OC) += dy.colwise().sum().transpose();
  }
}

void linear_forward_reference(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC) {
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) {
      float value = bias != nullptr ? bias[o] : 0.0f;
      for (int i = 0; i < C; i++) {
        value += inp[static_cast<int64_t>(n) * C + i] * weight[static_cast<int64_t>(o) * C + i];
      }
      out[static_cast<int64_t>(n) * OC + o] = value;
    }
  }
}

void linear_backward_input_reference(float* dinp, const float* dout, const float* weight, int N,
                                     int C, int OC) {
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) {
      const float d = dout[static_cast<int64_t>(n) * OC + o];
      for (int i = 0; i < C; i++) {
        dinp[static_cast<int64_t>(n) * C + i] += weight[static_cast<int64_t>(o) * C + i] * d;
      }
    }
  }
}

void linear_backward_weight_reference(float* dweight, float* dbias, const float* dout,
                                      const float* inp, int N, int C, int OC) {
  for (int o = 0; o < OC; o++) {
    for (int n = 0; n < N; n++) {
      const float d = dout[static_cast<int64_t>(n) * OC + o];
      if (dbias != nullptr) {
        dbias[o] += d;
      }
      for (int i = 0; i < C; i++) {
        dweight[static_cast<int64_t>(o) * C + i] += inp[static_cast<int64_t>(n) * C + i] * d;
      }
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void linear_backward_input<float>(float*, const float*, const float*, int, int, int);
template void linear_backward_weight<float>(float*, float*, const float*, const float*, int, int,
                                            int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void linear_backward_input<double>(double*, const double*, const double*, int, int, int);
template void linear_backward_weight<double>(double*, double*, const double*, const double*, int,
                                             int, int);

}  // namespace meshplan::executor
