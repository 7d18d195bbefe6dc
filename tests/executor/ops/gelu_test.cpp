#include "ops/gelu.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("gelu at 0, 1 and -1 follows the tanh formula") {
  const std::vector<double> x = {0, 1, -1};
  std::vector<double> y(3);
  gelu_forward(y.data(), x.data(), 3);
  // x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) with sqrt(2/pi) = 0.7978845608...
  const double u = std::sqrt(2.0 / M_PI) * (1.0 + 0.044715);
  CHECK(y[0] == 0.0);
  CHECK(y[1] == doctest::Approx(0.5 * (1 + std::tanh(u))).epsilon(1e-12).scale(0));   // ~0.8412
  CHECK(y[2] == doctest::Approx(-0.5 * (1 - std::tanh(u))).epsilon(1e-12).scale(0));  // ~-0.1588
}

TEST_CASE("gelu_backward matches finite differences") {
  const int N = 20;
  const std::vector<double> x0 = random_vector(N, 1, 2.0), dy = random_vector(N, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N);
    gelu_forward(y.data(), x.data(), N);
    return dot(y, dy);
  };
  std::vector<double> dx(N, 0.0);
  gelu_backward(dx.data(), x0.data(), dy.data(), N);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, x0, dx) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
