#include "data_source.h"

#include <fmt/format.h>

#include <vector>

#include "meshplan/errors.h"
#include "splitmix64.h"

namespace meshplan::executor {

namespace {

class SyntheticSource : public TokenSource {
 public:
  explicit SyntheticSource(int64_t vocab_size) : vocab_size_(vocab_size) {}
  void sample(int64_t index, int T, int32_t* tokens) const override {
    const uint64_t h = splitmix64(static_cast<uint64_t>(index));  // a hash of the sample index
    const int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(vocab_size_));
    const int64_t stride = 1 + static_cast<int64_t>((h >> 32) % 7);
    for (int t = 0; t <= T; t++) {
      tokens[t] = static_cast<int32_t>((start + t * stride) % vocab_size_);
    }
  }

 private:
  int64_t vocab_size_;
};

class TextSource : public TokenSource {
 public:
  explicit TextSource(std::string text) : text_(std::move(text)) {}
  void sample(int64_t index, int T, int32_t* tokens) const override {
    const uint64_t span = text_.size() - static_cast<uint64_t>(T);  // offsets 0 .. size - T - 1
    const uint64_t offset = splitmix64(static_cast<uint64_t>(index) ^ 0x7465787473616d70ULL) % span;
    for (int t = 0; t <= T; t++) {
      tokens[t] = static_cast<uint8_t>(text_[offset + static_cast<uint64_t>(t)]);
    }
  }

 private:
  std::string text_;
};

}  // namespace

std::unique_ptr<TokenSource> make_synthetic_source(int64_t vocab_size) {
  return std::make_unique<SyntheticSource>(vocab_size);
}

std::unique_ptr<TokenSource> make_text_source(std::string text, const std::string& source,
                                              int64_t vocab_size, int T) {
  if (vocab_size < 256) {
    throw InputError(
        fmt::format("{}: byte-level text needs vocab_size >= 256 ({})", source, vocab_size));
  }
  if (static_cast<int64_t>(text.size()) < T + 2) {
    throw InputError(fmt::format("{}: text shorter than one sequence plus its target ({} < {})",
                                 source, text.size(), T + 2));
  }
  return std::make_unique<TextSource>(std::move(text));
}

void fill_micro_batch(const TokenSource& data, int64_t first_sample, int S,
                      const std::vector<int>& positions, int B, int32_t* tokens, int32_t* targets) {
  std::vector<int32_t> sample(static_cast<size_t>(S) + 1);
  const int T = static_cast<int>(positions.size());
  for (int b = 0; b < B; b++) {
    data.sample(first_sample + b, S, sample.data());
    for (int t = 0; t < T; t++) {
      if (tokens != nullptr) {
        tokens[t * B + b] = sample[positions[t]];
      }
      if (targets != nullptr) {
        targets[t * B + b] = sample[positions[t] + 1];
      }
    }
  }
}

}  // namespace meshplan::executor
