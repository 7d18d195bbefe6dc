#pragma once
// Residual connection (He et al. 2016): out = inp1 + inp2. The backward adds (+=) dout into
// both input gradients.
//
// Shape letters: N elements.

namespace meshplan::executor {

/// out (N) = inp1 (N) + inp2 (N).
template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int N);
/// dinp1 (N) += dout, dinp2 (N) += dout.
template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int N);

}  // namespace meshplan::executor
