#include "ops/adamw.h"

#include <doctest/doctest.h>

namespace meshplan::executor {
namespace {

TEST_CASE("adamw: two steps worked by hand") {
  AdamWConfig config;
  config.learning_rate = 0.1;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.epsilon = 1e-8;
  config.weight_decay = 0.1;
  float p = 1.0f, m = 0.0f, v = 0.0f;
  // Step 1, g = 0.5: m = 0.05, v = 0.05 * 0.25 = 0.0125; m_hat = 0.05 / 0.1 = 0.5,
  // v_hat = 0.0125 / 0.05 = 0.25; p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.1 * 1) = 0.890000002.
  float g = 0.5f;
  adamw_update(&p, &m, &v, &g, 1, 1, config);
  CHECK(m == doctest::Approx(0.05).epsilon(1e-6).scale(0));  // fp32 rounding of the state
  CHECK(v == doctest::Approx(0.0125).epsilon(1e-6).scale(0));
  CHECK(p == doctest::Approx(0.890000002).epsilon(1e-6).scale(0));
  // Step 2, g = -0.25: m = 0.045 - 0.025 = 0.02, v = 0.011875 + 0.003125 = 0.015;
  // m_hat = 0.02 / 0.19 = 0.1052632, v_hat = 0.015 / 0.0975 = 0.1538462, sqrt = 0.3922323;
  // p = 0.89 - 0.1 (0.1052632 / 0.3922323 + 0.1 * 0.89) = 0.8542631.
  g = -0.25f;
  adamw_update(&p, &m, &v, &g, 1, 2, config);
  CHECK(m == doctest::Approx(0.02).epsilon(1e-6).scale(0));  // fp32 rounding
  CHECK(v == doctest::Approx(0.015).epsilon(1e-6).scale(0));
  CHECK(p == doctest::Approx(0.8542630578558273).epsilon(1e-6).scale(0));
}

TEST_CASE("adamw: zero gradient still decays the weight") {
  // m = v = 0 stay 0, so p -= lr wd p: 2 - 0.01 * 0.5 * 2 = 1.99.
  AdamWConfig config;
  config.learning_rate = 0.01;
  config.weight_decay = 0.5;
  float p = 2.0f, m = 0.0f, v = 0.0f, g = 0.0f;
  adamw_update(&p, &m, &v, &g, 1, 1, config);
  CHECK(p == doctest::Approx(1.99).epsilon(1e-6).scale(0));  // fp32 rounding
}

TEST_CASE("adamw: execute's config follows the plan's weight_decay option") {
  // Decay on (the plan default): GPT-3's 0.1; options.weight_decay false: none, so a zero
  // gradient leaves the weight where it is.
  CHECK(executor_adamw_config(0.01, true).weight_decay == 0.1);
  const AdamWConfig no_decay = executor_adamw_config(0.01, false);
  CHECK(no_decay.weight_decay == 0.0);
  CHECK(no_decay.learning_rate == 0.01);
  float p = 2.0f, m = 0.0f, v = 0.0f, g = 0.0f;
  adamw_update(&p, &m, &v, &g, 1, 1, no_decay);
  CHECK(p == 2.0f);
}

}  // namespace
}  // namespace meshplan::executor
