#include "ops/embedding.h"

#include <algorithm>

#include "ops/eigen_maps.h"

namespace meshplan::executor {

template <typename Real>
void embedding_forward(Real* out, const int32_t* inp, const Real* wte, int N, int C,
                       int vocab_start, int V) {
  for (int n = 0; n < N; n++) {
    Real* out_n = out + static_cast<int64_t>(n) * C;
    const int row = inp[n] - vocab_start;
    if (row >= 0 && row < V) {
      std::copy(wte + static_cast<int64_t>(row) * C, wte + static_cast<int64_t>(row + 1) * C,
                out_n);
    } else {
      std::fill(out_n, out_n + C, Real(0));
    }
  }
}

template <typename Real>
void embedding_backward(Real* dwte, const Real* dout, const int32_t* inp, int N, int C,
                        int vocab_start, int V) {
  for (int n = 0; n < N; n++) {
    const int row = inp[n] - vocab_start;
    if (row < 0 || row >= V) {
      continue;
    }
    VectorMap<Real>(dwte + static_cast<int64_t>(row) * C, C) +=
        ConstVectorMap<Real>(dout + static_cast<int64_t>(n) * C, C);
  }
}

template <typename Real>
void position_forward(Real* out, const Real* wpe, int T, int B, int C, int t0) {
  for (int t = 0; t < T; t++) {
    ConstVectorMap<Real> position(wpe + static_cast<int64_t>(t0 + t) * C, C);
    for (int b = 0; b < B; b++) {
      VectorMap<Real>(out + (static_cast<int64_t>(t) * B + b) * C, C) += position;
    }
  }
}

template <typename Real>
void position_backward(Real* dwpe, const Real* dout, int T, int B, int C, int t0) {
  for (int t = 0; t < T; t++) {
    VectorMap<Real> dposition(dwpe + static_cast<int64_t>(t0 + t) * C, C);
    for (int b = 0; b < B; b++) {
      dposition += ConstVectorMap<Real>(dout + (static_cast<int64_t>(t) * B + b) * C, C);
    }
  }
}

#define MESHPLAN_INSTANTIATE(Real)                                                                \
  template void embedding_forward<Real>(Real*, const int32_t*, const Real*, int, int, int, int);  \
  template void embedding_backward<Real>(Real*, const Real*, const int32_t*, int, int, int, int); \
  template void position_forward<Real>(Real*, const Real*, int, int, int, int);                   \
  template void position_backward<Real>(Real*, const Real*, int, int, int, int);
MESHPLAN_INSTANTIATE(float)
MESHPLAN_INSTANTIATE(double)
#undef MESHPLAN_INSTANTIATE

}  // namespace meshplan::executor
