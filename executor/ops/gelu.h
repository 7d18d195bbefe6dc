#pragma once
// GELU, tanh approximation (Hendrycks and Gimpel 2016, Sec. 2; GPT-2's "gelu_new"):
// y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The backward adds (+=) into dinp.
//
// Shape letters: N elements.

#include <cmath>

namespace meshplan::executor {

// sqrt(2 / pi) and the cubic coefficient, Hendrycks and Gimpel 2016, Sec. 2.
inline constexpr double kGeluScale = 0.7978845608028654;
inline constexpr double kGeluCubic = 0.044715;

/// gelu(x), the tanh form; shared by the GELU and GeGLU MLPs.
template <typename Real>
Real gelu_value(Real x) {
  const Real u = static_cast<Real>(kGeluScale) * (x + static_cast<Real>(kGeluCubic) * x * x * x);
  return Real(0.5) * x * (Real(1) + std::tanh(u));
}

/// d gelu(x) / dx = (1 + tanh u) / 2 + x/2 sech^2(u) du/dx, u = sqrt(2/pi) (x + 0.044715 x^3).
template <typename Real>
Real gelu_derivative(Real x) {
  const Real scale = static_cast<Real>(kGeluScale);
  const Real cubic = static_cast<Real>(kGeluCubic);
  const Real tanh_u = std::tanh(scale * (x + cubic * x * x * x));
  const Real sech2 = Real(1) - tanh_u * tanh_u;
  const Real du = scale * (Real(1) + Real(3) * cubic * x * x);
  return Real(0.5) * (Real(1) + tanh_u) + Real(0.5) * x * sech2 * du;
}

/// out (N) = gelu(inp (N)).
template <typename Real>
void gelu_forward(Real* out, const Real* inp, int N);
/// dinp (N) += gelu'(inp) dout.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int N);

}  // namespace meshplan::executor
