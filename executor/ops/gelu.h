#pragma once
// GELU, tanh approximation (Hendrycks and Gimpel 2016, Sec. 2; GPT-2's "gelu_new"):
// y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The backward adds (+=) into dinp.
//
// Shape letters: N elements.

namespace meshplan::executor {

/// out (N) = gelu(inp (N)).
template <typename Real>
void gelu_forward(Real* out, const Real* inp, int N);
/// dinp (N) += gelu'(inp) dout.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int N);

}  // namespace meshplan::executor
