#pragma once
// RMSNorm (Zhang and Sennrich 2019, eq. 4): y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) +
// eps), no bias. The forward saves rstd; the backward adds (+=) into dinp and dweight.
//
// Shape letters: N rows (T*B tokens), C channels.

namespace meshplan::executor {

/// out (N, C); saves rstd (N); inp (N, C), weight (C). Epsilon: kNormEpsilon (layernorm.h).
template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C);
/// dinp (N, C) +=, dweight (C) +=; dout (N, C), inp, weight, saved rstd.
template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                      const Real* weight, const Real* rstd, int N, int C);

}  // namespace meshplan::executor
