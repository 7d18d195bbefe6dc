#include "ops/adamw.h"

#include <cmath>

namespace meshplan::executor {

AdamWConfig executor_adamw_config(double learning_rate, bool plan_weight_decay) {
  AdamWConfig config;
  config.learning_rate = learning_rate;
  if (!plan_weight_decay) {
    config.weight_decay = 0.0;
  }
  return config;
}

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, int64_t t,
                  const AdamWConfig& config) {
  const float beta1 = static_cast<float>(config.beta1);
  const float beta2 = static_cast<float>(config.beta2);
  const float correction1 = static_cast<float>(1.0 - std::pow(config.beta1, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(config.beta2, t));
  const float learning_rate = static_cast<float>(config.learning_rate);
  const float epsilon = static_cast<float>(config.epsilon);
  const float weight_decay = static_cast<float>(config.weight_decay);
  for (int64_t i = 0; i < N; i++) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float m_hat = m[i] / correction1;
    const float v_hat = v[i] / correction2;
    params[i] -= learning_rate * (m_hat / (std::sqrt(v_hat) + epsilon) + weight_decay * params[i]);
  }
}

}  // namespace meshplan::executor
