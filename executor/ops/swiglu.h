#pragma once
// SwiGLU (Shazeer 2020, eq. 6): y = silu(gate) * up, silu(x) = x sigmoid(x). The first MLP
// projection produces gate and up side by side in one row; the backward adds (+=) into dinp.
// `options`: gpt-oss's offset on up and clamp on both inputs (ops/gated_unit.h).
//
// Shape letters: N rows (T*B tokens), F ffn channels on this rank.

#include "ops/gated_unit.h"

namespace meshplan::executor {

/// out (N, F) = silu(gate) * up; inp (N, 2F) rows [gate (F) | up (F)].
template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options = {});
/// dinp (N, 2F) +=; inp (N, 2F), dout (N, F).
template <typename Real>
void swiglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                     GatedUnitOptions options = {});

}  // namespace meshplan::executor
