#pragma once
// A gated linear unit (Shazeer 2020, "GLU Variants Improve Transformer", eqs. 5-6):
// y = act(gate) * up on rows [gate (F) | up (F)] of (N, 2F), as the first MLP projection writes
// them. The backward adds (+=) into dinp: d gate = dout up act'(gate), d up = dout act(gate).
// `Act` gives the gate's activation as static value(x) and derivative(x); SwiGLU
// (ops/swiglu.cpp), GeGLU (ops/geglu.cpp) and quick GeGLU (ops/quick_geglu.cpp) instantiate it.
//
// gpt-oss's variants (GatedUnitOptions; TransformerConfig::glu_linear_offset and
// activation_clamp_value), for any activation: with a clamp c > 0 the gate is clamped to <= c
// and up to [-c, c] first, and with an offset o the unit is act(gate) * (up + o), exactly
// transformers' GptOssExperts (`gate.clamp(max=limit)`, `up.clamp(-limit, limit)`,
// `(up + 1) * glu`; Megatron-Core activation_func_clamp_value, glu_linear_offset). Through a
// clamp the gradient passes where the input lies inside it, bounds included (torch.clamp's
// backward), and is zero elsewhere.
//
// Shape letters: N rows (T*B tokens), F ffn channels on this rank.

#include <algorithm>
#include <cstdint>

namespace meshplan::executor {

/// The unit's offset on up and clamp on both inputs: 0 means none.
struct GatedUnitOptions {
  double offset = 0.0;
  double clamp = 0.0;
};

namespace gated_unit_detail {

template <typename Real>
Real clamped_gate(Real gate, Real clamp) {
  return clamp > 0 ? std::min(gate, clamp) : gate;
}
template <typename Real>
Real clamped_up(Real up, Real clamp) {
  return clamp > 0 ? std::clamp(up, -clamp, clamp) : up;
}

}  // namespace gated_unit_detail

/// out (N, F) = act(gate) * (up + offset), both clamped first under a clamp; inp (N, 2F).
template <typename Act, typename Real>
void gated_unit_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options = {}) {
  const Real offset = static_cast<Real>(options.offset);
  const Real clamp = static_cast<Real>(options.clamp);
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* y = out + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      y[i] = Act::value(gated_unit_detail::clamped_gate(gate[i], clamp)) *
             (gated_unit_detail::clamped_up(up[i], clamp) + offset);
    }
  }
}

/// dinp (N, 2F) +=; inp (N, 2F), dout (N, F).
template <typename Act, typename Real>
void gated_unit_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                         GatedUnitOptions options = {}) {
  const Real offset = static_cast<Real>(options.offset);
  const Real clamp = static_cast<Real>(options.clamp);
  for (int n = 0; n < N; n++) {
    const Real* gate = inp + static_cast<int64_t>(n) * 2 * F;
    const Real* up = gate + F;
    Real* dgate = dinp + static_cast<int64_t>(n) * 2 * F;
    Real* dup = dgate + F;
    const Real* dy = dout + static_cast<int64_t>(n) * F;
    for (int i = 0; i < F; i++) {
      const Real g = gated_unit_detail::clamped_gate(gate[i], clamp);
      const Real u = gated_unit_detail::clamped_up(up[i], clamp);
      // The clamps' masks: gate <= c, -c <= up <= c (bounds pass, as torch.clamp's backward).
      if (clamp <= 0 || gate[i] <= clamp) {
        dgate[i] += dy[i] * (u + offset) * Act::derivative(g);
      }
      if (clamp <= 0 || (up[i] >= -clamp && up[i] <= clamp)) {
        dup[i] += dy[i] * Act::value(g);
      }
    }
  }
}

}  // namespace meshplan::executor
