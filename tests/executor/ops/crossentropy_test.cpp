#include "ops/crossentropy.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

// The whole decomposition on one shard holding the full vocabulary (no reduction needed).
std::vector<double> full_losses(const std::vector<double>& logits,
                                const std::vector<int32_t>& targets, int N, int V,
                                std::vector<double>* maxes, std::vector<double>* sumexp) {
  std::vector<double> target_logits(N), losses(N);
  maxes->assign(N, 0.0);
  sumexp->assign(N, 0.0);
  crossentropy_local_max(maxes->data(), logits.data(), N, V);
  crossentropy_local_target_sumexp(target_logits.data(), sumexp->data(), logits.data(),
                                   maxes->data(), targets.data(), N, V, 0);
  crossentropy_forward(losses.data(), maxes->data(), target_logits.data(), sumexp->data(), N);
  return losses;
}

TEST_CASE("cross-entropy of equal logits is log V") {
  // Uniform softmax over V = 8: probability 1/8 for the target, loss log 8.
  const std::vector<double> logits(2 * 8, 0.25);
  const std::vector<int32_t> targets = {3, 7};
  std::vector<double> maxes, sumexp;
  const auto losses = full_losses(logits, targets, 2, 8, &maxes, &sumexp);
  CHECK(losses[0] == doctest::Approx(std::log(8.0)).epsilon(1e-12).scale(0));  // rounding only
  CHECK(losses[1] == doctest::Approx(std::log(8.0)).epsilon(1e-12).scale(0));
}

TEST_CASE("cross-entropy backward matches finite differences") {
  const int N = 4, V = 7;
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  const std::vector<double> z0 = random_vector(N * V, 1, 3.0), dl = random_vector(N, 2);
  auto loss = [&](const std::vector<double>& z) {
    std::vector<double> maxes, sumexp;
    return dot(full_losses(z, targets, N, V, &maxes, &sumexp), dl);
  };
  std::vector<double> maxes, sumexp;
  full_losses(z0, targets, N, V, &maxes, &sumexp);
  std::vector<double> dz(N * V, 0.0);
  crossentropy_backward(dz.data(), dl.data(), z0.data(), maxes.data(), sumexp.data(),
                        targets.data(), N, V, 0);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, z0, dz) < 1e-7);
}

TEST_CASE("vocab-parallel decomposition over two shards equals the full cross-entropy") {
  // Shard r holds vocabulary [r V/2, (r+1) V/2); the three reductions (max, sum, sum) are done
  // here by hand on the two shards' local results, as the all-reduces would.
  const int N = 5, V = 10, half = V / 2;
  const std::vector<int32_t> targets = {0, 9, 4, 5, 2};
  const std::vector<double> z = random_vector(N * V, 3, 4.0), dl = random_vector(N, 4);
  std::vector<double> full_maxes, full_sumexp;
  const auto expected = full_losses(z, targets, N, V, &full_maxes, &full_sumexp);
  std::vector<double> full_dz(N * V, 0.0);
  crossentropy_backward(full_dz.data(), dl.data(), z.data(), full_maxes.data(), full_sumexp.data(),
                        targets.data(), N, V, 0);

  std::vector<std::vector<double>> shards(2, std::vector<double>(N * half));
  for (int r = 0; r < 2; r++) {
    for (int n = 0; n < N; n++) {
      std::copy_n(z.begin() + n * V + r * half, half, shards[r].begin() + n * half);
    }
  }
  std::vector<double> maxes(N), local_max(N), target_logits(N, 0.0), sumexp(N, 0.0);
  crossentropy_local_max(maxes.data(), shards[0].data(), N, half);
  crossentropy_local_max(local_max.data(), shards[1].data(), N, half);
  for (int n = 0; n < N; n++) {
    maxes[n] = std::max(maxes[n], local_max[n]);  // all-reduce MAX
  }
  for (int r = 0; r < 2; r++) {
    std::vector<double> local_target(N), local_sumexp(N);
    crossentropy_local_target_sumexp(local_target.data(), local_sumexp.data(), shards[r].data(),
                                     maxes.data(), targets.data(), N, half, r * half);
    for (int n = 0; n < N; n++) {
      target_logits[n] += local_target[n];  // all-reduce SUM
      sumexp[n] += local_sumexp[n];         // all-reduce SUM
    }
  }
  std::vector<double> losses(N);
  crossentropy_forward(losses.data(), maxes.data(), target_logits.data(), sumexp.data(), N);
  for (int n = 0; n < N; n++) {
    // Same terms, summed in two halves: equal up to double rounding.
    CHECK(losses[n] == doctest::Approx(expected[n]).epsilon(1e-12).scale(0));
  }
  for (int r = 0; r < 2; r++) {
    std::vector<double> dz(N * half, 0.0);
    crossentropy_backward(dz.data(), dl.data(), shards[r].data(), maxes.data(), sumexp.data(),
                          targets.data(), N, half, r * half);
    for (int n = 0; n < N; n++) {
      for (int v = 0; v < half; v++) {
        CHECK(dz[n * half + v] ==
              doctest::Approx(full_dz[n * V + r * half + v]).epsilon(1e-12).scale(0));
      }
    }
  }
}

}  // namespace
}  // namespace meshplan::executor
