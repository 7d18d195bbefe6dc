#pragma once
// Quick GeGLU: y = quick_gelu(gate) * up, quick_gelu(x) = x sigmoid(1.702 x), the sigmoid
// approximation of GELU (Hendrycks and Gimpel 2016, Sec. 2; gpt-oss: transformers GptOssExperts,
// alpha 1.702; Megatron-Core --quick-geglu). The first MLP projection produces gate and up side
// by side in one row, as for SwiGLU (ops/swiglu.h); the backward adds (+=) into dinp.
// `options`: gpt-oss's offset on up and clamp on both inputs (ops/gated_unit.h; gpt-oss 1.0
// and 7.0).
//
// Shape letters: N rows (T*B tokens), F ffn channels on this rank.

#include "ops/gated_unit.h"

namespace meshplan::executor {

/// The sigmoid's slope in quick_gelu(x) = x sigmoid(1.702 x).
inline constexpr double kQuickGeluAlpha = 1.702;

/// out (N, F) = quick_gelu(gate) * (up + offset), clamped first under a clamp; inp (N, 2F) rows
/// [gate (F) | up (F)].
template <typename Real>
void quick_geglu_forward(Real* out, const Real* inp, int N, int F, GatedUnitOptions options = {});
/// dinp (N, 2F) +=; inp (N, 2F), dout (N, F).
template <typename Real>
void quick_geglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F,
                          GatedUnitOptions options = {});

}  // namespace meshplan::executor
