#include "ops/rope.h"

#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "meshplan/models.h"

namespace meshplan::executor {

namespace {

// Rotates each (x[i], x[i + R/2]) pair of a head's first R = rotary_dim channels by `sign` *
// angle(t, i), angle = pos f_i, f_i = base^(-2i/R) scaled (models::rope_inverse_frequency), and
// multiplies it by the scaling's amplitude A (models::rope_attention_factor: YaRN's, else 1).
template <typename Real>
void rotate(Real* qk, int T, int B, int num_heads, int row_stride, int HS, int rotary_dim,
            double base, const models::RopeScaling* scaling, double sign, const int* positions) {
  const int R = rotary_dim == 0 ? HS : rotary_dim;
  assert(R % 2 == 0 && R <= HS);
  const int half = R / 2;
  const models::RopeScaling layer_scaling = scaling != nullptr ? *scaling : models::RopeScaling{};
  std::vector<double> inverse_frequencies(static_cast<size_t>(half));
  for (int i = 0; i < half; i++) {
    inverse_frequencies[i] = models::rope_inverse_frequency(base, i, R, layer_scaling);
  }
  // YaRN multiplies cos and sin by its attention factor (1 for the other types).
  const double amplitude = models::rope_attention_factor(layer_scaling);
  std::vector<Real> cosines(static_cast<size_t>(half));
  std::vector<Real> sines(static_cast<size_t>(half));
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < half; i++) {
      const double angle = (positions ? positions[t] : t) * inverse_frequencies[i];
      cosines[i] = static_cast<Real>(amplitude * std::cos(angle));
      sines[i] = static_cast<Real>(sign * amplitude * std::sin(angle));
    }
    for (int b = 0; b < B; b++) {
      Real* row = qk + (static_cast<int64_t>(t) * B + b) * row_stride;
      for (int head = 0; head < num_heads; head++) {
        Real* x = row + static_cast<int64_t>(head) * HS;
        for (int i = 0; i < half; i++) {
          const Real x1 = x[i];
          const Real x2 = x[i + half];
          x[i] = x1 * cosines[i] - x2 * sines[i];
          x[i + half] = x1 * sines[i] + x2 * cosines[i];
        }
      }
    }
  }
}

}  // namespace

template <typename Real>
void rope_forward(Real* qk, int T, int B, int num_heads, int row_stride, int HS,
                  const int* positions, int rotary_dim, double base,
                  const models::RopeScaling* scaling) {
  rotate(qk, T, B, num_heads, row_stride, HS, rotary_dim, base, scaling, 1.0, positions);
}

template <typename Real>
void rope_backward(Real* dqk, int T, int B, int num_heads, int row_stride, int HS,
                   const int* positions, int rotary_dim, double base,
                   const models::RopeScaling* scaling) {
  // A R is A times an orthogonal rotation: its transpose is A times the rotation by the opposite
  // angle.
  rotate(dqk, T, B, num_heads, row_stride, HS, rotary_dim, base, scaling, -1.0, positions);
}

template void rope_forward<float>(float*, int, int, int, int, int, const int*, int, double,
                                  const models::RopeScaling*);
template void rope_backward<float>(float*, int, int, int, int, int, const int*, int, double,
                                   const models::RopeScaling*);
template void rope_forward<double>(double*, int, int, int, int, int, const int*, int, double,
                                   const models::RopeScaling*);
template void rope_backward<double>(double*, int, int, int, int, int, const int*, int, double,
                                    const models::RopeScaling*);

}  // namespace meshplan::executor
