#pragma once
// LayerNorm (Ba et al. 2016, eq. 4): y = (x - mean) * rstd * weight + bias over the C channels of
// each row, rstd = 1 / sqrt(var + eps). The forward saves mean and rstd; the backward adds (+=)
// into dinp, dweight and dbias.
//
// Shape letters: N rows (T*B tokens), C channels.

namespace meshplan::executor {

/// Epsilon of LayerNorm and RMSNorm, 1e-5 (PyTorch's LayerNorm default; GPT-2 and Llama-2 use
/// 1e-5 too).
inline constexpr double kNormEpsilon = 1e-5;

/// out (N, C); saves mean (N) and rstd (N); inp (N, C), weight (C), bias (C).
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C);
/// dinp (N, C) +=, dweight (C) +=, dbias (C) +=; dout (N, C), inp, weight, saved mean and rstd.
template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C);

}  // namespace meshplan::executor
