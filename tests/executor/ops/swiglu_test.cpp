#include "ops/swiglu.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("swiglu multiplies silu(gate) by up") {
  // F = 2, row [gate0, gate1 | up0, up1] = [0, 2 | 5, 3]:
  // silu(0) * 5 = 0, silu(2) * 3 = 2 / (1 + e^-2) * 3.
  const std::vector<double> inp = {0, 2, 5, 3};
  std::vector<double> out(2);
  swiglu_forward(out.data(), inp.data(), 1, 2);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == doctest::Approx(6.0 / (1.0 + std::exp(-2.0))).epsilon(1e-12).scale(0));
}

TEST_CASE("swiglu_backward matches finite differences") {
  const int N = 3, F = 4;
  const std::vector<double> x0 = random_vector(N * 2 * F, 1, 2.0), dy = random_vector(N * F, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N * F);
    swiglu_forward(y.data(), x.data(), N, F);
    return dot(y, dy);
  };
  std::vector<double> dx(N * 2 * F, 0.0);
  swiglu_backward(dx.data(), x0.data(), dy.data(), N, F);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, x0, dx) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
