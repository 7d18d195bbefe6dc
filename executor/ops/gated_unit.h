#pragma once
// A gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer", eqs. 5-6):
// y = act(gate) * up on rows [gate (F) | up (F)] of (N, 2F), as the first MLP projection writes
// them. The backward adds (+=) into dinp: d gate = dout up act'(gate), d up = dout act(gate).
// `Act` gives the gate's activation as static value(x) and derivative(x); SwiGLU
// (ops/swiglu.cpp) and GeGLU (ops/geglu.cpp) instantiate it.
//
// Shape letters: N rows (T*B tokens), F ffn channels on this rank.

#include <cstdint>

namespace meshplan::executor {

/// out (N, F) = act(gate) * up; inp (N, 2F).
template <typename Act, typename Real>
void gated_unit_forward(Real* out, const Real* inp, int N, int F) {
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* y = out + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      y[i] = Act::value(gate[i]) * up[i];
    }
  }
}

/// dinp (N, 2F) +=; inp (N, 2F), dout (N, F).
template <typename Act, typename Real>
void gated_unit_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F) {
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* dgate = dinp + static_cast<int64_t>(n) * 2 * F;
    Real* dup = dgate + F;
    const Real* dy = dout + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      dgate[i] += dy[i] * up[i] * Act::derivative(gate[i]);
      dup[i] += dy[i] * Act::value(gate[i]);
    }
  }
}

}  // namespace meshplan::executor
