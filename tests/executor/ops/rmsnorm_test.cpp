#include "ops/rmsnorm.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("rmsnorm of {3, 4} divides by sqrt(12.5)") {
  // mean of squares (9 + 16) / 2 = 12.5.
  const std::vector<double> x = {3, 4}, weight = {1, 2};
  std::vector<double> out(2), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), 1, 2);
  const double s = 1.0 / std::sqrt(12.5 + 1e-5);
  CHECK(out[0] == doctest::Approx(3.0 * s).epsilon(1e-12).scale(0));  // rounding only
  CHECK(out[1] == doctest::Approx(8.0 * s).epsilon(1e-12).scale(0));
}

TEST_CASE("rmsnorm_backward matches finite differences for inp and weight") {
  const int N = 4, C = 6;
  const std::vector<double> x0 = random_vector(N * C, 5), w0 = random_vector(C, 6),
                            dy = random_vector(N * C, 7);
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w) {
    std::vector<double> out(N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
    return dot(out, dy);
  };
  std::vector<double> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x0.data(), w0.data(), N, C);
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x0.data(), w0.data(), rstd.data(), N, C);
  // Tolerances 1e-7: see gradient_check.h.
  CHECK(gradient_error([&](const auto& x) { return loss(x, w0); }, x0, dx) < 1e-7);
  CHECK(gradient_error([&](const auto& w) { return loss(x0, w); }, w0, dw) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
