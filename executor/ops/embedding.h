#pragma once
// Token embedding, vocab-parallel (Megatron-LM VocabParallelEmbedding, Shoeybi et al. 2019,
// Sec. 3), and the learned position table. Backward adds (+=) into the weight gradients.
//
// Shape letters: N = T*B rows in sequence-first order (row n = t*B + b, as Megatron-LM's
// (s, b, h) layout), T sequence positions, B sequences, C channels, V rows of this rank's vocab
// shard (the shard holds tokens [vocab_start, vocab_start + V)).

#include <cstdint>

namespace meshplan::executor {

/// out (N, C) = wte[inp[n] - vocab_start] for tokens inside the shard, 0 for the others, so the
/// tp shards' outputs sum to the full lookup. inp (N) token ids, wte (V, C).
template <typename Real>
void embedding_forward(Real* out, const int32_t* inp, const Real* wte, int N, int C,
                       int vocab_start, int V);
/// dwte (V, C) += dout rows scattered to their tokens; tokens outside the shard add nothing.
template <typename Real>
void embedding_backward(Real* dwte, const Real* dout, const int32_t* inp, int N, int C,
                        int vocab_start, int V);

/// out (T, B, C) += wpe[t0 + t]: the T rows given start at sequence position t0 (0, or the
/// first position of this rank's shard under sequence parallelism). wpe (max positions, C).
template <typename Real>
void position_forward(Real* out, const Real* wpe, int T, int B, int C, int t0);
/// dwpe (max positions, C) += dout summed over the B sequences, rows t0 .. t0 + T - 1.
template <typename Real>
void position_backward(Real* dwpe, const Real* dout, int T, int B, int C, int t0);

}  // namespace meshplan::executor
