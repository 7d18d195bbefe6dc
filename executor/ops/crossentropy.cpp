#include "ops/crossentropy.h"

#include <algorithm>
#include <cmath>

namespace meshplan::executor {

template <typename Real>
void crossentropy_local_max(Real* maxes, const Real* logits, int N, int V) {
  for (int n = 0; n < N; n++) {
    const Real* z = logits + static_cast<int64_t>(n) * V;
    maxes[n] = *std::max_element(z, z + V);
  }
}

template <typename Real>
void crossentropy_local_target_sumexp(Real* target_logits, Real* sumexp, const Real* logits,
                                      const Real* maxes, const int32_t* targets, int N, int V,
                                      int vocab_start) {
  for (int n = 0; n < N; n++) {
    const Real* z = logits + static_cast<int64_t>(n) * V;
    const int target = targets[n] - vocab_start;
    target_logits[n] = target >= 0 && target < V ? z[target] : Real(0);
    Real sum = 0;
    for (int v = 0; v < V; v++) {
      sum += std::exp(z[v] - maxes[n]);
    }
    sumexp[n] = sum;
  }
}

template <typename Real>
void crossentropy_forward(Real* losses, const Real* maxes, const Real* target_logits,
                          const Real* sumexp, int N) {
  for (int n = 0; n < N; n++) {
    losses[n] = std::log(sumexp[n]) + maxes[n] - target_logits[n];
  }
}

template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* dlosses, const Real* logits,
                           const Real* maxes, const Real* sumexp, const int32_t* targets, int N,
                           int V, int vocab_start) {
  for (int n = 0; n < N; n++) {
    const Real* z = logits + static_cast<int64_t>(n) * V;
    Real* dz = dlogits + static_cast<int64_t>(n) * V;
    const Real inverse = Real(1) / sumexp[n];
    const int target = targets[n] - vocab_start;
    for (int v = 0; v < V; v++) {
      const Real probability = std::exp(z[v] - maxes[n]) * inverse;
      dz[v] += dlosses[n] * (probability - (v == target ? Real(1) : Real(0)));
    }
  }
}

#define MESHPLAN_INSTANTIATE(Real)                                                             \
  template void crossentropy_local_max<Real>(Real*, const Real*, int, int);                    \
  template void crossentropy_local_target_sumexp<Real>(Real*, Real*, const Real*, const Real*, \
                                                       const int32_t*, int, int, int);         \
  template void crossentropy_forward<Real>(Real*, const Real*, const Real*, const Real*, int); \
  template void crossentropy_backward<Real>(Real*, const Real*, const Real*, const Real*,      \
                                            const Real*, const int32_t*, int, int, int);
MESHPLAN_INSTANTIATE(float)
MESHPLAN_INSTANTIATE(double)
#undef MESHPLAN_INSTANTIATE

}  // namespace meshplan::executor
