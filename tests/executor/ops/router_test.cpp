#include "ops/router.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("router picks the k largest logits and weights them by their softmax") {
  // E = 3, K = 2, logits [1, 3, 2]: experts 1 then 2, weights e^3 / (e^3 + e^2) = e / (e + 1)
  // and 1 / (e + 1); the full softmax is e^z / (e + e^3 + e^2).
  const std::vector<double> logits = {1, 3, 2};
  std::vector<double> probs(2), scores(3);
  std::vector<int> experts(2);
  router_forward(probs.data(), experts.data(), scores.data(), logits.data(), 1, 3, 2);
  CHECK(experts == std::vector<int>{1, 2});
  const double e = std::exp(1.0);
  CHECK(probs[0] == doctest::Approx(e / (e + 1)).epsilon(1e-12).scale(0));
  CHECK(probs[1] == doctest::Approx(1 / (e + 1)).epsilon(1e-12).scale(0));
  CHECK(scores[1] == doctest::Approx(std::exp(3.0) / (e + std::exp(3.0) + std::exp(2.0))).scale(0));
  // Ties go to the lower expert (torch.topk on equal values, stable here).
  const std::vector<double> tied = {0.5, 0.5, 0.5};
  router_forward(probs.data(), experts.data(), scores.data(), tied.data(), 1, 3, 2);
  CHECK(experts == std::vector<int>{0, 1});
  CHECK(probs[0] == doctest::Approx(0.5).epsilon(1e-12).scale(0));
}

TEST_CASE("load-balancing loss: Switch's E / (k T^2) sum_e P_e f_e at uniform routing is 1") {
  // T = 4 tokens, E = 2, k = 1, scores all 1/2, f = [2, 2]: sum_e P_e f_e = 2 (2 x 2) = 8, and
  // E / (k T^2) = 2 / 16: the balanced minimum, 1 (Fedus et al. 2022, Sec. 2.2).
  const std::vector<double> scores(8, 0.5);
  const std::vector<double> f = {2, 2};
  CHECK(load_balancing_loss(scores.data(), f.data(), 4, 2, 2.0 / 16) ==
        doctest::Approx(1.0).scale(0));
}

TEST_CASE("router_backward and load_balancing_backward match finite differences") {
  const int N = 3, E = 5, K = 2;
  const std::vector<double> z0 = random_vector(N * E, 3, 1.0), dp = random_vector(N * K, 4);
  const std::vector<double> f = {1, 0, 2, 2, 1};  // counts, held fixed (no gradient through f)
  const double scale = 0.3;
  std::vector<double> probs(N * K), scores(N * E);
  std::vector<int> experts(N * K);
  router_forward(probs.data(), experts.data(), scores.data(), z0.data(), N, E, K);
  const std::vector<int> chosen = experts;
  auto loss = [&](const std::vector<double>& z) {
    std::vector<double> p(N * K), s(N * E);
    std::vector<int> x(N * K);
    router_forward(p.data(), x.data(), s.data(), z.data(), N, E, K);
    REQUIRE(x == chosen);  // the perturbation moves no choice
    return dot(p, dp) + load_balancing_loss(s.data(), f.data(), N, E, scale);
  };
  std::vector<double> dz(N * E, 0.0);
  router_backward(dz.data(), dp.data(), probs.data(), experts.data(), N, E, K);
  load_balancing_backward(dz.data(), scores.data(), f.data(), N, E, scale);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, z0, dz) < 1e-7);
}

TEST_CASE("Llama 4's sigmoid auxiliary-loss scores: a closed form, and the backward") {
  // Two experts, logits 0 and ln 3: sigmoids 1/2 and 3/4, normalised 2/5 and 3/5.
  const std::vector<double> z = {0.0, std::log(3.0)};
  std::vector<double> scores(2), sigmoids(2);
  sigmoid_aux_scores(scores.data(), sigmoids.data(), z.data(), 1, 2);
  CHECK(sigmoids[0] == doctest::Approx(0.5).epsilon(1e-15).scale(0));
  CHECK(sigmoids[1] == doctest::Approx(0.75).epsilon(1e-15).scale(0));
  CHECK(scores[0] == doctest::Approx(0.4).epsilon(1e-15).scale(0));
  CHECK(scores[1] == doctest::Approx(0.6).epsilon(1e-15).scale(0));
  // The backward against finite differences of load_balancing_loss over those scores.
  const int N = 3, E = 5;
  const std::vector<double> z0 = random_vector(N * E, 5, 1.0);
  const std::vector<double> f = {1, 0, 2, 2, 1};
  const double scale = 0.3;
  std::vector<double> s0(N * E), sig0(N * E);
  sigmoid_aux_scores(s0.data(), sig0.data(), z0.data(), N, E);
  auto loss = [&](const std::vector<double>& zz) {
    std::vector<double> s(N * E), sig(N * E);
    sigmoid_aux_scores(s.data(), sig.data(), zz.data(), N, E);
    return load_balancing_loss(s.data(), f.data(), N, E, scale);
  };
  std::vector<double> dz(N * E, 0.0);
  load_balancing_backward_sigmoid(dz.data(), s0.data(), sig0.data(), f.data(), N, E, scale);
  CHECK(gradient_error(loss, z0, dz) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
