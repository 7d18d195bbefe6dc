#include "ops/geglu.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("geglu multiplies gelu(gate), tanh form, by up") {
  // F = 2, row [gate0, gate1 | up0, up1] = [0, 1 | 5, 3]: gelu(0) * 5 = 0 and
  // gelu(1) * 3 = 3/2 (1 + tanh(sqrt(2/pi) (1 + 0.044715))) (Hendrycks and Gimpel 2016, Sec. 2).
  const std::vector<double> inp = {0, 1, 5, 3};
  std::vector<double> out(2);
  geglu_forward(out.data(), inp.data(), 1, 2);
  const double u = std::sqrt(2.0 / M_PI) * (1.0 + 0.044715);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == doctest::Approx(1.5 * (1 + std::tanh(u))).epsilon(1e-12).scale(0));  // ~2.52
}

TEST_CASE("geglu_backward matches finite differences") {
  const int N = 3, F = 4;
  const std::vector<double> x0 = random_vector(N * 2 * F, 1, 2.0), dy = random_vector(N * F, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N * F);
    geglu_forward(y.data(), x.data(), N, F);
    return dot(y, dy);
  };
  std::vector<double> dx(N * 2 * F, 0.0);
  geglu_backward(dx.data(), x0.data(), dy.data(), N, F);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, x0, dx) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
