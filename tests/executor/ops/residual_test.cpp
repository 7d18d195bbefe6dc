#include "ops/residual.h"

#include <doctest/doctest.h>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("residual adds and its backward adds dout into both inputs") {
  const int N = 6;
  const std::vector<double> a0 = random_vector(N, 1), b0 = random_vector(N, 2),
                            dy = random_vector(N, 3);
  std::vector<double> out(N);
  residual_forward(out.data(), a0.data(), b0.data(), N);
  CHECK(out[2] == a0[2] + b0[2]);
  auto loss = [&](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> y(N);
    residual_forward(y.data(), a.data(), b.data(), N);
    return dot(y, dy);
  };
  std::vector<double> da(N, 1.0), db(N, 0.0);  // da starts at 1: backward must add, not assign
  residual_backward(da.data(), db.data(), dy.data(), N);
  for (double& value : da) {
    value -= 1.0;
  }
  // Tolerances 1e-7: see gradient_check.h.
  CHECK(gradient_error([&](const auto& a) { return loss(a, b0); }, a0, da) < 1e-7);
  CHECK(gradient_error([&](const auto& b) { return loss(a0, b); }, b0, db) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
