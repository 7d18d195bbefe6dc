#pragma once
// Logit soft-capping (Gemma 2: Gemma Team 2024, Sec. 2; transformers modeling_gemma2.py
// Gemma2ForCausalLM.forward on the final logits): y = c tanh(x / c), elementwise, in place. The
// backward needs only y: d/dx c tanh(x / c) = 1 - tanh^2(x / c) = 1 - (y / c)^2, so it scales
// the output gradient in place, turning it into the input gradient. Elementwise, so a vocabulary
// shard is capped on its own rank (no communication under tp).
//
// Shape letters: N elements.

#include <cstdint>

namespace meshplan::executor {

/// x (N) = c tanh(x / c); c > 0.
template <typename Real>
void softcap_forward(Real* x, int64_t N, double c);
/// dx (N) *= 1 - (y / c)^2 for y (N) the forward's output: dy in, dx out.
template <typename Real>
void softcap_backward(Real* dx, const Real* y, int64_t N, double c);

}  // namespace meshplan::executor
