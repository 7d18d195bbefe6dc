#pragma once
// GeGLU (Shazeer 2020, "GLU Variants Improve Transformer", eq. 5): y = gelu(gate) * up, GELU in
// its tanh form (ops/gelu.h; Gemma's hidden_activation "gelu_pytorch_tanh"). The first MLP
// projection produces gate and up side by side in one row, as for SwiGLU (ops/swiglu.h); the
// backward adds (+=) into dinp. `options`: gpt-oss's offset on up and clamp on both inputs
// (ops/gated_unit.h).
//
// Shape letters: N rows (T*B tokens), F ffn channels on this rank.

#include "ops/gated_unit.h"

namespace meshplan::executor {

/// out (N, F) = gelu(gate) * up; inp (N, 2F) rows [gate (F) | up (F)].
template <typename Real>
void geglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options = {});
/// dinp (N, 2F) +=: d gate = dout up gelu'(gate), d up = dout gelu(gate); inp (N, 2F),
/// dout (N, F).
template <typename Real>
void geglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                    GatedUnitOptions options = {});

}  // namespace meshplan::executor
