#pragma once
// AdamW (Loshchilov and Hutter 2019, Algorithm 2, with Adam's bias correction from Kingma and Ba
// 2015, Algorithm 1), fp32 state:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
// Decoupled weight decay on every parameter (as llm.c's gpt2_update).
//
// Shape letters: N parameters (a contiguous slice of the flat parameter buffer).

#include <cstdint>

namespace meshplan::executor {

struct AdamWConfig {
  double learning_rate = 1e-3;  // constant, no schedule
  double beta1 = 0.9;           // Kingma and Ba 2015, Sec. 2 default
  double beta2 = 0.95;          // GPT-3 (Brown et al. 2020, App. B)
  double epsilon = 1e-8;        // Kingma and Ba 2015, Sec. 2 default
  double weight_decay = 0.1;    // GPT-3 (Brown et al. 2020, App. B)
};

/// The AdamW `execute` runs: a constant learning_rate, and the default decay unless the plan's
/// options.weight_decay is false (then none).
AdamWConfig executor_adamw_config(double learning_rate, bool plan_weight_decay);

/// Updates params (N), m (N), v (N) in place from grads (N); step t counts from 1.
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, int64_t t,
                  const AdamWConfig& config);

}  // namespace meshplan::executor
