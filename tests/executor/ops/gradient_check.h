#pragma once
// Finite-difference checks for the executor's ops, in double precision: the kernels are
// templates, so the same code runs in double here and its backward is compared with central
// differences of its forward, (L(x + h) - L(x - h)) / 2h, whose truncation error is O(h^2).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace meshplan::executor::testing {

/// Deterministic normal values with standard deviation `scale`.
inline std::vector<double> random_vector(size_t size, uint32_t seed, double scale = 1.0) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(size);
  for (double& value : values) {
    value = normal(generator);
  }
  return values;
}

inline std::vector<float> to_float(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); i++) {
    sum += a[i] * b[i];
  }
  return sum;
}

/// Largest |analytic - numeric| over the elements of x, divided by max(1, largest |numeric|):
/// `loss` maps x to a scalar (the tests use L = sum_i w_i out_i with fixed random w, whose
/// gradient with respect to the op's output is w).
inline double gradient_error(const std::function<double(const std::vector<double>&)>& loss,
                             std::vector<double> x, const std::vector<double>& analytic) {
  // h = 1e-6: truncation ~ h^2 = 1e-12, rounding ~ 1e-16 / h = 1e-10, both far under the
  // tolerances the tests use (1e-7).
  const double h = 1e-6;
  double max_error = 0;
  double max_gradient = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss(x);
    x[i] = saved - h;
    const double minus = loss(x);
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    max_error = std::max(max_error, std::abs(numeric - analytic[i]));
    max_gradient = std::max(max_gradient, std::abs(numeric));
  }
  return max_error / std::max(1.0, max_gradient);
}

/// Largest |a - b| / max(1, |b|) over two float buffers.
inline double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) /
                                std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

}  // namespace meshplan::executor::testing
