#pragma once
// Training data addressed by global sample index: sample i of step k's global batch is sample
// k * global_batch + i, whatever the layout, so every layout trains on the same batches.
// Micro-batch j of data-parallel rank r holds samples r * (global_batch / dp) + j * micro_batch
// onward (Megatron-LM's order).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meshplan::executor {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// tokens (T + 1) of global sample `index`: T inputs, the last T of them also the targets.
  virtual void sample(int64_t index, int T, int32_t* tokens) const = 0;
};

/// A learnable synthetic stream: sample i is an arithmetic progression modulo V with a start and
/// a stride (1 to 7) drawn from i, so the next token follows from the previous two.
std::unique_ptr<TokenSource> make_synthetic_source(int64_t vocab_size);

/// Byte-level text: token = byte value; sample i is the T + 1 bytes at an offset drawn from i.
/// Throws InputError naming `source` when vocab_size < 256 or the text is shorter than T + 2.
std::unique_ptr<TokenSource> make_text_source(std::string text, const std::string& source,
                                              int64_t vocab_size, int T);

/// tokens and targets (T, B), sequence-first (row t B + b), of the B samples (of S positions)
/// from `first_sample`, at the T sequence `positions` this rank holds (all S without context
/// parallelism).
void fill_micro_batch(const TokenSource& data, int64_t first_sample, int S,
                      const std::vector<int>& positions, int B, int32_t* tokens, int32_t* targets);

}  // namespace meshplan::executor
