#include "router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace meshplan::executor {

void router_forward(float* probs, int* experts, float* scores, const float* logits, int N, int E,
                    int K) {
  std::vector<int> order(static_cast<size_t>(E));
  for (int n = 0; n < N; n++) {
    const float* row = logits + static_cast<int64_t>(n) * E;
    const float maxval = *std::max_element(row, row + E);
    double sum = 0;
    for (int e = 0; e < E; e++) {
      sum += std::exp(static_cast<double>(row[e] - maxval));
    }
    for (int e = 0; e < E; e++) {
      scores[static_cast<int64_t>(n) * E + e] =
          static_cast<float>(std::exp(static_cast<double>(row[e] - maxval)) / sum);
    }
    // torch.topk order: largest first; stable on ties (lower expert first).
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [row](int a, int b) { return row[a] > row[b]; });
    double top_sum = 0;
    for (int k = 0; k < K; k++) {
      top_sum += std::exp(static_cast<double>(row[order[k]] - row[order[0]]));
    }
    for (int k = 0; k < K; k++) {
      experts[static_cast<int64_t>(n) * K + k] = order[k];
      probs[static_cast<int64_t>(n) * K + k] = static_cast<float>(
          std::exp(static_cast<double>(row[order[k]] - row[order[0]])) / top_sum);
    }
  }
}

void router_backward(float* dlogits, const float* dprobs, const float* probs, const int* experts,
                     int N, int E, int K) {
  for (int n = 0; n < N; n++) {
    const float* p = probs + static_cast<int64_t>(n) * K;
    const float* dp = dprobs + static_cast<int64_t>(n) * K;
    // Softmax backward over the k chosen logits: dz_i = p_i (dp_i - sum_j p_j dp_j).
    double dot = 0;
    for (int k = 0; k < K; k++) {
      dot += static_cast<double>(p[k]) * dp[k];
    }
    for (int k = 0; k < K; k++) {
      const int e = experts[static_cast<int64_t>(n) * K + k];
      dlogits[static_cast<int64_t>(n) * E + e] += static_cast<float>(p[k] * (dp[k] - dot));
    }
  }
}

double load_balancing_loss(const float* scores, const float* f, int N, int E, double scale) {
  double loss = 0;
  for (int e = 0; e < E; e++) {
    double column = 0;
    for (int n = 0; n < N; n++) {
      column += scores[static_cast<int64_t>(n) * E + e];
    }
    loss += column * f[e];
  }
  return loss * scale;
}

void load_balancing_backward(float* dlogits, const float* scores, const float* f, int N, int E,
                             double scale) {
  for (int n = 0; n < N; n++) {
    const float* s = scores + static_cast<int64_t>(n) * E;
    // d loss / d s_e = scale f_e; through the softmax: dz_e = s_e (ds_e - sum_j s_j ds_j).
    double dot = 0;
    for (int e = 0; e < E; e++) {
      dot += static_cast<double>(s[e]) * scale * f[e];
    }
    for (int e = 0; e < E; e++) {
      dlogits[static_cast<int64_t>(n) * E + e] += static_cast<float>(s[e] * (scale * f[e] - dot));
    }
  }
}

}  // namespace meshplan::executor
