#include "ops/rope.h"

#include <doctest/doctest.h>

#include <cmath>

#include "meshplan/models.h"
#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::random_vector;

TEST_CASE("rope turns position t by t radians in the first pair") {
  // T = 2, B = 1, one head of HS = 2: pair (x0, x1) turns by t * 10000^0 = t radians.
  std::vector<double> qk = {1, 0, 1, 0};
  rope_forward(qk.data(), 2, 1, 1, 2, 2);
  CHECK(qk[0] == 1.0);  // position 0: cos 0 = 1
  CHECK(qk[1] == 0.0);  // sin 0 = 0
  CHECK(qk[2] == doctest::Approx(std::cos(1.0)).scale(0));
  CHECK(qk[3] == doctest::Approx(std::sin(1.0)).scale(0));
}

TEST_CASE("rope turns pair i by t base^(-2i/R) radians for the base given (rope_theta)") {
  // T = 3, one head of HS = 4: pairs (x0, x2) and (x1, x3); pair 1 turns by t * base^(-1/2).
  // Llama 3's base 500000: position 2 turns pair 1 by 2 / sqrt(500000) radians.
  const double base = 500000.0;
  std::vector<double> qk(3 * 4, 0.0);
  for (int t = 0; t < 3; t++) {
    qk[t * 4 + 0] = 1.0;
    qk[t * 4 + 1] = 1.0;
  }
  rope_forward(qk.data(), 3, 1, 1, 4, 4, nullptr, 0, base);
  const double angle = 2.0 / std::sqrt(base);
  CHECK(qk[8 + 1] == doctest::Approx(std::cos(angle)).scale(0));
  CHECK(qk[8 + 3] == doctest::Approx(std::sin(angle)).scale(0));
  CHECK(qk[8 + 0] == doctest::Approx(std::cos(2.0)).scale(0));  // pair 0: base^0 = 1
  // The default base turns the same pair by 2 / 100.
  std::vector<double> default_base(3 * 4, 0.0);
  default_base[8 + 1] = 1.0;
  rope_forward(default_base.data(), 3, 1, 1, 4, 4);
  CHECK(default_base[8 + 3] == doctest::Approx(std::sin(0.02)).scale(0));
  // The backward turns back by the same base.
  rope_backward(qk.data(), 3, 1, 1, 4, 4, nullptr, 0, base);
  CHECK(qk[8 + 1] == doctest::Approx(1.0).scale(0));
  CHECK(std::abs(qk[8 + 3]) < 1e-12);
}

TEST_CASE("linear scaling by F turns position F t as the unscaled rope turns position t") {
  // Chen et al. 2023, Eq. 4: positions read as m / F. T = 4 rows at positions 0, 3, 6, 9 with
  // F = 3 against rows at positions 0, 1, 2, 3 unscaled; HS 8, two heads, B 2, base 10000.
  const models::RopeScaling linear3{models::RopeScalingType::kLinear, 3.0, 1.0, 4.0, 8192};
  const std::vector<double> before = random_vector(4 * 2 * 16, 3);
  std::vector<double> scaled = before;
  std::vector<double> plain = before;
  const int stretched[4] = {0, 3, 6, 9};
  rope_forward(scaled.data(), 4, 2, 2, 16, 8, stretched, 0, kRopeBase, &linear3);
  rope_forward(plain.data(), 4, 2, 2, 16, 8);
  for (size_t i = 0; i < before.size(); i++) {
    CAPTURE(i);
    CHECK(scaled[i] == doctest::Approx(plain[i]).epsilon(1e-12).scale(0));
  }
  rope_backward(scaled.data(), 4, 2, 2, 16, 8, stretched, 0, kRopeBase, &linear3);
  for (size_t i = 0; i < before.size(); i++) {
    CHECK(scaled[i] == doctest::Approx(before[i]).epsilon(1e-12).scale(0));
  }
}

TEST_CASE("llama3 scaling keeps the short wavelengths, divides the long ones, blends between") {
  // HS 8 at base 10000: pairs turn by 1, 0.1, 0.01, 0.001 rad per position, wavelengths 6.28,
  // 62.8, 628 and 6283. Bands of an original context of 100 (high 4: 25, low 1: 100), factor 2:
  // pair 0 kept, pairs 2 and 3 halved, pair 1 blended with s = (100 / 62.83 - 1) / 3.
  const models::RopeScaling bands{models::RopeScalingType::kLlama3, 2.0, 1.0, 4.0, 100};
  const double s = (100.0 / (2.0 * std::acos(-1.0) / 0.1) - 1.0) / 3.0;
  const double expected[4] = {1.0, (1.0 - s) * 0.1 / 2.0 + s * 0.1, 0.01 / 2.0, 0.001 / 2.0};
  const int T = 50;
  std::vector<double> qk(static_cast<size_t>(T) * 8, 0.0);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < 4; i++) {
      qk[t * 8 + i] = 1.0;  // each pair (x_i, x_{i+4}) starts at (1, 0)
    }
  }
  rope_forward(qk.data(), T, 1, 1, 8, 8, nullptr, 0, kRopeBase, &bands);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < 4; i++) {
      CAPTURE(t);
      CAPTURE(i);
      CHECK(std::abs(qk[t * 8 + i] - std::cos(t * expected[i])) < 1e-12);
      CHECK(std::abs(qk[t * 8 + i + 4] - std::sin(t * expected[i])) < 1e-12);
    }
  }
}

TEST_CASE("YaRN turns by its ramped frequencies and scales cos and sin by its attention factor") {
  // HS 8 at base 10000: unscaled pairs turn by 1, 0.1, 0.01, 0.001 rad per position. YaRN over
  // an original context of 100, factor 4: pair r turns R ln(100 / (2 pi r)) / (2 ln 10000)
  // pairs in: 8 ln(100 / 201.06) / 18.42 = -0.30 for beta_fast 32 (kept: 0) and
  // 8 ln(100 / 6.283) / 18.42 = 1.20 for beta_slow 1, truncated to 2. Pair 0 kept, pair 1 half
  // way (f / 8 + f / 2), pairs 2 and 3 over 4. cos and sin carry 0.1 ln 4 + 1.
  models::RopeScaling yarn;
  yarn.type = models::RopeScalingType::kYarn;
  yarn.factor = 4.0;
  yarn.original_max_positions = 100;
  const double amplitude = 0.1 * std::log(4.0) + 1.0;
  const double expected[4] = {1.0, 0.1 / 8.0 + 0.1 / 2.0, 0.01 / 4.0, 0.001 / 4.0};
  const int T = 50;
  std::vector<double> qk(static_cast<size_t>(T) * 8, 0.0);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < 4; i++) {
      qk[t * 8 + i] = 1.0;
    }
  }
  rope_forward(qk.data(), T, 1, 1, 8, 8, nullptr, 0, kRopeBase, &yarn);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < 4; i++) {
      CAPTURE(t);
      CAPTURE(i);
      CHECK(std::abs(qk[t * 8 + i] - amplitude * std::cos(t * expected[i])) < 1e-12);
      CHECK(std::abs(qk[t * 8 + i + 4] - amplitude * std::sin(t * expected[i])) < 1e-12);
    }
  }
  // The backward is the forward's transpose, A R^T: finite differences of <rope(x), w>.
  const int B = 2, heads = 3, HS = 8, row = 4 * HS;
  const std::vector<double> w = random_vector(4 * B * row, 4);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out = x;
    rope_forward(out.data(), 4, B, heads, row, HS, nullptr, 0, kRopeBase, &yarn);
    return dot(out, w);
  };
  std::vector<double> grad = w;
  rope_backward(grad.data(), 4, B, heads, row, HS, nullptr, 0, kRopeBase, &yarn);
  CHECK(gradient_error(loss, random_vector(4 * B * row, 5), grad) < 1e-7);
}

TEST_CASE("rope leaves heads past num_heads (the values) untouched") {
  // Row of 2 rotated heads + 1 value head, HS = 4, T = 3.
  const std::vector<double> before = random_vector(3 * 12, 1);
  std::vector<double> qk = before;
  rope_forward(qk.data(), 3, 1, 2, 12, 4);
  for (int t = 0; t < 3; t++) {
    for (int i = 8; i < 12; i++) {
      CHECK(qk[t * 12 + i] == before[t * 12 + i]);
    }
  }
}

TEST_CASE("rope_backward matches finite differences") {
  const int T = 4, B = 2, heads = 3, HS = 6, row = 4 * HS;
  const std::vector<double> w = random_vector(T * B * row, 2);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out = x;
    rope_forward(out.data(), T, B, heads, row, HS);
    return dot(out, w);
  };
  std::vector<double> grad = w;
  rope_backward(grad.data(), T, B, heads, row, HS);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, random_vector(T * B * row, 3), grad) < 1e-7);
}

TEST_CASE("partial rotary turns the first rotary_dim channels as a head of that width") {
  // One head of HS = 8 at position 3, rotary_dim 4 (rotary_percent 0.5): pairs (0, 2) and (1, 3)
  // turn by 3 x 10000^(-2i/4) (i = 0, 1: 3 and 0.03 radians); channels 4-7 pass through.
  const std::vector<double> before = random_vector(4 * 8, 4);
  std::vector<double> qk = before;
  rope_forward(qk.data(), 4, 1, 1, 8, 8, nullptr, 4);
  const double* x = before.data() + 3 * 8;
  const double* y = qk.data() + 3 * 8;
  for (int i = 0; i < 2; i++) {
    const double angle = 3.0 * std::pow(10000.0, -2.0 * i / 4.0);
    CHECK(y[i] == doctest::Approx(x[i] * std::cos(angle) - x[i + 2] * std::sin(angle)).scale(0));
    CHECK(y[i + 2] ==
          doctest::Approx(x[i] * std::sin(angle) + x[i + 2] * std::cos(angle)).scale(0));
  }
  for (int i = 4; i < 8; i++) {
    CHECK(y[i] == x[i]);
  }
  // rotary_dim 0 and rotary_dim HS are the whole head.
  std::vector<double> whole = before;
  std::vector<double> full = before;
  rope_forward(whole.data(), 4, 1, 1, 8, 8);
  rope_forward(full.data(), 4, 1, 1, 8, 8, nullptr, 8);
  CHECK(whole == full);
}

TEST_CASE("partial rotary's backward matches finite differences") {
  const int T = 4, B = 2, heads = 3, HS = 8, row = 4 * HS, rotary_dim = 4;
  const std::vector<double> w = random_vector(T * B * row, 5);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out = x;
    rope_forward(out.data(), T, B, heads, row, HS, nullptr, rotary_dim);
    return dot(out, w);
  };
  std::vector<double> grad = w;
  rope_backward(grad.data(), T, B, heads, row, HS, nullptr, rotary_dim);
  CHECK(gradient_error(loss, random_vector(T * B * row, 6), grad) < 1e-7);
}

}  // namespace
}  // namespace meshplan::executor
