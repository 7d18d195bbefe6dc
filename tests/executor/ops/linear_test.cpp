#include "ops/linear.h"

#include <doctest/doctest.h>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::max_relative_difference;
using testing::random_vector;
using testing::to_float;

TEST_CASE("linear_forward computes inp W^T + b") {
  // inp {1, 2}, W = [[1, 0], [3, 4], [0, 1]], b = {0, 1, 2}:
  // out = {1*1 + 2*0, 1*3 + 2*4 + 1, 1*0 + 2*1 + 2} = {1, 12, 4}.
  const std::vector<double> inp = {1, 2}, weight = {1, 0, 3, 4, 0, 1}, bias = {0, 1, 2};
  std::vector<double> out(3);
  linear_forward(out.data(), inp.data(), weight.data(), bias.data(), 1, 2, 3);
  CHECK(out == std::vector<double>{1, 12, 4});
}

TEST_CASE("linear backward (input and weight) matches finite differences") {
  const int N = 4, C = 5, OC = 3;
  const std::vector<double> x0 = random_vector(N * C, 1), w0 = random_vector(OC * C, 2),
                            b0 = random_vector(OC, 3), dy = random_vector(N * OC, 4);
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>& b) {
    std::vector<double> out(N * OC);
    linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return dot(out, dy);
  };
  std::vector<double> dx(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  linear_backward_input(dx.data(), dy.data(), w0.data(), N, C, OC);
  linear_backward_weight(dw.data(), db.data(), dy.data(), x0.data(), N, C, OC);
  // Tolerances 1e-7: see gradient_check.h.
  CHECK(gradient_error([&](const auto& x) { return loss(x, w0, b0); }, x0, dx) < 1e-7);
  CHECK(gradient_error([&](const auto& w) { return loss(x0, w, b0); }, w0, dw) < 1e-7);
  CHECK(gradient_error([&](const auto& b) { return loss(x0, w0, b); }, b0, db) < 1e-7);
}

TEST_CASE("linear Eigen GEMM path equals the plain-loop reference in float") {
  const int N = 37, C = 29, OC = 41;  // odd sizes, off Eigen's block boundaries
  const auto x = to_float(random_vector(N * C, 5)), w = to_float(random_vector(OC * C, 6)),
             b = to_float(random_vector(OC, 7)), dy = to_float(random_vector(N * OC, 8));
  std::vector<float> out(N * OC), out_ref(N * OC);
  linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  linear_forward_reference(out_ref.data(), x.data(), w.data(), b.data(), N, C, OC);
  // 1e-5: fp32 dot products of length <= 37 summed in a different order differ by a few ulp
  // (~1e-7 relative) times sqrt(length); 1e-5 leaves a wide margin and catches any index error.
  CHECK(max_relative_difference(out, out_ref) < 1e-5);
  std::vector<float> dx(N * C, 0.5f), dx_ref(N * C, 0.5f);  // both add into the same start
  linear_backward_input(dx.data(), dy.data(), w.data(), N, C, OC);
  linear_backward_input_reference(dx_ref.data(), dy.data(), w.data(), N, C, OC);
  CHECK(max_relative_difference(dx, dx_ref) < 1e-5);  // as above
  std::vector<float> dw(OC * C, 0.0f), dw_ref(OC * C, 0.0f), db(OC, 0.0f), db_ref(OC, 0.0f);
  linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), N, C, OC);
  linear_backward_weight_reference(dw_ref.data(), db_ref.data(), dy.data(), x.data(), N, C, OC);
  CHECK(max_relative_difference(dw, dw_ref) < 1e-5);  // as above
  CHECK(max_relative_difference(db, db_ref) < 1e-5);
}

}  // namespace
}  // namespace meshplan::executor
