#pragma once
// Softmax cross-entropy over a vocabulary split across tp ranks (Megatron-LM's
// vocab_parallel_cross_entropy, Shoeybi et al. 2019, Sec. 3): no rank ever holds a full row of
// logits. Per row n, with the shard's logits z (V of them):
//   1. local max m_r = max z            -> all-reduce MAX over tp: m
//   2. local target logit z[y] (0 when y is outside the shard) -> all-reduce SUM
//      local sum of exp(z - m)                                 -> all-reduce SUM: S
//   3. loss = log S + m - z[y]
// With one rank the reductions are the identity and this is the ordinary cross-entropy. The
// backward needs only m and S (saved) and adds (+=) into dlogits.
//
// Shape letters: N rows (T*B tokens), V vocabulary entries of this rank's shard, holding tokens
// [vocab_start, vocab_start + V).

#include <cstdint>

namespace meshplan::executor {

/// maxes (N) = row maxima of logits (N, V).
template <typename Real>
void crossentropy_local_max(Real* maxes, const Real* logits, int N, int V);
/// target_logits (N) = logits[n, targets[n] - vocab_start] or 0 outside the shard;
/// sumexp (N) = sum over the shard of exp(logits - maxes) with maxes already global.
template <typename Real>
void crossentropy_local_target_sumexp(Real* target_logits, Real* sumexp, const Real* logits,
                                      const Real* maxes, const int32_t* targets, int N, int V,
                                      int vocab_start);
/// losses (N) = log(sumexp) + maxes - target_logits, all three reduced over the shards.
template <typename Real>
void crossentropy_forward(Real* losses, const Real* maxes, const Real* target_logits,
                          const Real* sumexp, int N);
/// dlogits (N, V) += dlosses[n] (exp(logits - maxes) / sumexp - [v == targets[n]]).
template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* dlosses, const Real* logits,
                           const Real* maxes, const Real* sumexp, const int32_t* targets, int N,
                           int V, int vocab_start);

}  // namespace meshplan::executor
