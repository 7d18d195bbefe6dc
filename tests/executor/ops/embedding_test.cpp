#include "ops/embedding.h"

#include <doctest/doctest.h>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("embedding_forward looks up rows and zeroes tokens outside the shard") {
  // wte rows of a shard holding tokens 2 and 3, C = 2.
  const std::vector<double> wte = {1, 2, 3, 4};
  const std::vector<int32_t> tokens = {3, 0, 2};
  std::vector<double> out(6, -1.0);
  embedding_forward(out.data(), tokens.data(), wte.data(), 3, 2, /*vocab_start=*/2, /*V=*/2);
  // Token 3 is shard row 1 = {3, 4}; token 0 is outside the shard; token 2 is row 0 = {1, 2}.
  CHECK(out == std::vector<double>{3, 4, 0, 0, 1, 2});
}

TEST_CASE("vocab-parallel shards sum to the full embedding lookup") {
  const int N = 6, C = 3, V = 8;
  const std::vector<double> wte = random_vector(V * C, 1);
  const std::vector<int32_t> tokens = {0, 7, 3, 4, 4, 1};
  std::vector<double> full(N * C), shard0(N * C), shard1(N * C);
  embedding_forward(full.data(), tokens.data(), wte.data(), N, C, 0, V);
  embedding_forward(shard0.data(), tokens.data(), wte.data(), N, C, 0, V / 2);
  embedding_forward(shard1.data(), tokens.data(), wte.data() + V / 2 * C, N, C, V / 2, V / 2);
  for (int i = 0; i < N * C; i++) {
    // Exactly one shard holds each token, the other adds an exact 0.
    CHECK(shard0[i] + shard1[i] == full[i]);
  }
}

TEST_CASE("embedding_backward matches finite differences, shard-local") {
  const int N = 5, C = 3, V = 4, vocab_start = 2;
  const std::vector<int32_t> tokens = {2, 5, 0, 2, 3};  // token 0 falls outside [2, 6)
  const std::vector<double> w = random_vector(N * C, 2);
  auto loss = [&](const std::vector<double>& wte) {
    std::vector<double> out(N * C);
    embedding_forward(out.data(), tokens.data(), wte.data(), N, C, vocab_start, V);
    return dot(out, w);
  };
  std::vector<double> dwte(V * C, 0.0);
  embedding_backward(dwte.data(), w.data(), tokens.data(), N, C, vocab_start, V);
  // Tolerance 1e-7: see gradient_check.h (the loss is linear, so only rounding remains).
  CHECK(gradient_error(loss, random_vector(V * C, 3), dwte) < 1e-7);
}

TEST_CASE("position_forward adds the table row of each position from t0") {
  // T = 2, B = 2, C = 1, table rows {10, 20, 30}; t0 = 1 reads rows 1 and 2.
  const std::vector<double> wpe = {10, 20, 30};
  std::vector<double> out = {1, 2, 3, 4};
  position_forward(out.data(), wpe.data(), 2, 2, 1, 1);
  CHECK(out == std::vector<double>{21, 22, 33, 34});
}

TEST_CASE("position_backward matches finite differences") {
  const int T = 3, B = 2, C = 4, positions = 5, t0 = 1;
  const std::vector<double> w = random_vector(T * B * C, 4);
  const std::vector<double> base = random_vector(T * B * C, 5);
  auto loss = [&](const std::vector<double>& wpe) {
    std::vector<double> out = base;
    position_forward(out.data(), wpe.data(), T, B, C, t0);
    return dot(out, w);
  };
  std::vector<double> dwpe(positions * C, 0.0);
  position_backward(dwpe.data(), w.data(), T, B, C, t0);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, random_vector(positions * C, 6), dwpe) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
