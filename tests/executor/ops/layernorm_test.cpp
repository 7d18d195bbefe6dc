#include "ops/layernorm.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("layernorm of {1, 3} is {-1, 1} scaled and shifted") {
  // mean 2, variance 1, so xhat = {-1, 1} (up to eps = 1e-5: rstd = 1/sqrt(1 + 1e-5)).
  const std::vector<double> x = {1, 3}, weight = {2, 3}, bias = {10, 20};
  std::vector<double> out(2), mean(1), rstd(1);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), 1,
                    2);
  const double s = 1.0 / std::sqrt(1.0 + 1e-5);
  CHECK(mean[0] == 2.0);
  CHECK(out[0] == doctest::Approx(10.0 - 2.0 * s).epsilon(1e-12).scale(0));  // rounding only
  CHECK(out[1] == doctest::Approx(20.0 + 3.0 * s).epsilon(1e-12).scale(0));
}

TEST_CASE("layernorm_backward matches finite differences for inp, weight and bias") {
  const int N = 3, C = 5;
  const std::vector<double> x0 = random_vector(N * C, 1), w0 = random_vector(C, 2),
                            b0 = random_vector(C, 3), dy = random_vector(N * C, 4);
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b) {
    std::vector<double> out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, dy);
  };
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x0.data(), w0.data(), b0.data(), N, C);
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x0.data(), w0.data(), mean.data(),
                     rstd.data(), N, C);
  // Tolerances 1e-7: see gradient_check.h.
  CHECK(gradient_error([&](const auto& x) { return loss(x, w0, b0); }, x0, dx) < 1e-7);
  CHECK(gradient_error([&](const auto& w) { return loss(x0, w, b0); }, w0, dw) < 1e-7);
  CHECK(gradient_error([&](const auto& b) { return loss(x0, w0, b); }, b0, db) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
