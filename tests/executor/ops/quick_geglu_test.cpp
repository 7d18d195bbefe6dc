#include "ops/quick_geglu.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/geglu.h"
#include "ops/gradient_check.h"
#include "ops/swiglu.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST_CASE("quick geglu multiplies gate sigmoid(1.702 gate) by up") {
  // F = 2, row [gate0, gate1 | up0, up1] = [0, 1.5 | 5, 3]: 0 and 1.5 sigmoid(2.553) 3.
  const std::vector<double> inp = {0, 1.5, 5, 3};
  std::vector<double> out(2);
  quick_geglu_forward(out.data(), inp.data(), 1, 2);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == doctest::Approx(4.5 * sigmoid(1.702 * 1.5)).epsilon(1e-12).scale(0));  // ~4.3
}

TEST_CASE("gpt-oss's unit: gate clamped to <= c, up to [-c, c], then act(gate) (up + offset)") {
  // transformers GptOssExperts with limit c = 1 and offset 1, F = 4, one row
  // [gate | up] = [2, -3, 0.5, -0.25 | 4, -0.5, -2, 0.75]:
  //   gate -> [1, -3, 0.5, -0.25] (clamped above only), up -> [1, -0.5, -1, 0.75].
  const std::vector<double> inp = {2, -3, 0.5, -0.25, 4, -0.5, -2, 0.75};
  const GatedUnitOptions gpt_oss{1.0, 1.0};
  std::vector<double> out(4);
  quick_geglu_forward(out.data(), inp.data(), 1, 4, gpt_oss);
  const double gate[] = {1, -3, 0.5, -0.25}, up[] = {1, -0.5, -1, 0.75};
  for (const int i : {0, 1, 3}) {
    CAPTURE(i);
    const double expected = gate[i] * sigmoid(1.702 * gate[i]) * (up[i] + 1.0);
    CHECK(out[i] == doctest::Approx(expected).epsilon(1e-12).scale(0));  // double rounding
  }
  CHECK(out[2] == 0.0);  // up clamped to -1, plus the offset 1
  // The gradient: zero into a clamped gate (entry 0) and a clamped up (entries 0 and 2); the
  // gate clamps from above only, so -3 passes.
  const std::vector<double> dy = {1, 1, 1, 1};
  std::vector<double> dx(8, 0.0);
  quick_geglu_backward(dx.data(), inp.data(), dy.data(), 1, 4, gpt_oss);
  CHECK(dx[0] == 0.0);
  CHECK(dx[4] == 0.0);
  CHECK(dx[6] == 0.0);
  CHECK(dx[1] != 0.0);
  CHECK(dx[5] == doctest::Approx(-3 * sigmoid(-3 * 1.702)).epsilon(1e-12).scale(0));  // act(-3)
  // At the bounds the gradient passes (torch.clamp's backward): gate = c and up = c, up = -c.
  const std::vector<double> at_bounds = {1, 0.5, 1, -1};  // F = 2: [1, 0.5 | 1, -1]
  std::vector<double> d_bounds(4, 0.0);
  const std::vector<double> ones = {1, 1};
  quick_geglu_backward(d_bounds.data(), at_bounds.data(), ones.data(), 1, 2, gpt_oss);
  CHECK(d_bounds[0] != 0.0);
  CHECK(d_bounds[2] == doctest::Approx(sigmoid(1.702)).epsilon(1e-12).scale(0));  // act(1)
  CHECK(d_bounds[3] == doctest::Approx(0.5 * sigmoid(0.851)).epsilon(1e-12).scale(0));
}

// Each gated activation with gpt-oss's offset and a clamp that binds on about a third of the
// entries (inputs of std 2 against c = 2: 14 of 48 here), against central differences.
template <typename Forward, typename Backward>
void check_variant_gradient(Forward forward, Backward backward) {
  const int N = 4, F = 6;
  const std::vector<double> x0 = random_vector(N * 2 * F, 41, 2.0), dy = random_vector(N * F, 42);
  const GatedUnitOptions options{1.0, 2.0};
  int clamped = 0;
  for (int n = 0; n < N; n++) {
    for (int i = 0; i < 2 * F; i++) {
      const double x = x0[n * 2 * F + i];
      const bool gate = i < F;
      clamped += (gate ? x > 2.0 : std::abs(x) > 2.0) ? 1 : 0;
      // No input within the differences' step of a bound, where the unit has a kink.
      CHECK(std::abs(std::abs(x) - 2.0) > 1e-3);
    }
  }
  CHECK(clamped >= 8);  // measured: 14 of 48
  CHECK(clamped < N * 2 * F / 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N * F);
    forward(y.data(), x.data(), N, F, options);
    return dot(y, dy);
  };
  std::vector<double> dx(N * 2 * F, 0.0);
  backward(dx.data(), x0.data(), dy.data(), N, F, options);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, x0, dx) < 1e-7);
}

TEST_CASE("quick geglu's backward matches finite differences, plain and with offset and clamp") {
  const int N = 3, F = 4;
  const std::vector<double> x0 = random_vector(N * 2 * F, 1, 2.0), dy = random_vector(N * F, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N * F);
    quick_geglu_forward(y.data(), x.data(), N, F);
    return dot(y, dy);
  };
  std::vector<double> dx(N * 2 * F, 0.0);
  quick_geglu_backward(dx.data(), x0.data(), dy.data(), N, F);
  CHECK(gradient_error(loss, x0, dx) < 1e-7);
  check_variant_gradient(quick_geglu_forward<double>, quick_geglu_backward<double>);
}

TEST_CASE("swiglu and geglu take the offset and clamp too (finite differences)") {
  check_variant_gradient(swiglu_forward<double>, swiglu_backward<double>);
  check_variant_gradient(geglu_forward<double>, geglu_backward<double>);
}

}  // namespace
}  // namespace meshplan::executor
