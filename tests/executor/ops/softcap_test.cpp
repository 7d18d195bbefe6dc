#include "ops/softcap.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("softcap: c tanh(x / c), bounded by c, the identity near 0") {
  // Gemma 2's final cap c = 30: 30 tanh(60 / 30) = 30 x 0.964028 = 28.92; 30 tanh(0.03 / 30)
  // = 0.03 to 1e-9 relative (tanh(u) = u - u^3 / 3: 3e-7 of 0.001).
  std::vector<double> x = {60.0, -60.0, 0.03, 0.0, 1e6};
  softcap_forward(x.data(), static_cast<int64_t>(x.size()), 30.0);
  CHECK(x[0] == doctest::Approx(30.0 * std::tanh(2.0)).epsilon(1e-12).scale(0));
  CHECK(x[0] == doctest::Approx(28.9208).epsilon(1e-5).scale(0));  // the hand figure
  CHECK(x[1] == -x[0]);
  CHECK(x[2] == doctest::Approx(0.03).epsilon(1e-6).scale(0));  // u^2 / 3 = 3e-7 relative
  CHECK(x[3] == 0.0);
  CHECK(x[4] == 30.0);  // saturated: tanh(33333) rounds to 1
}

TEST_CASE("softcap: backward matches finite differences across the curve") {
  // x of std 3 against c = 2: |x| / c spans the linear part, the bend and saturation.
  const int64_t N = 64;
  const double c = 2.0;
  const std::vector<double> x0 = random_vector(N, 1, 3.0), w = random_vector(N, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y = x;
    softcap_forward(y.data(), N, c);
    return dot(y, w);
  };
  std::vector<double> y = x0;
  softcap_forward(y.data(), N, c);
  std::vector<double> dx = w;  // dL/dy = w, turned into dL/dx in place
  softcap_backward(dx.data(), y.data(), N, c);
  CHECK(gradient_error(loss, x0, dx) < 1e-7);  // gradient_check.h's tolerance
  // float runs the same formula: 1 - (y / c)^2 at y = c tanh(1) is 1 - tanh^2(1) = 0.419974.
  std::vector<float> yf = {static_cast<float>(c * std::tanh(1.0))}, df = {1.0f};
  softcap_backward(df.data(), yf.data(), 1, c);
  CHECK(df[0] == doctest::Approx(0.419974).epsilon(1e-5).scale(0));  // the hand figure, 6 digits
}

}  // namespace
}  // namespace meshplan::executor
