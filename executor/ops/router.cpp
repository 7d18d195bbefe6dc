#include "router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace meshplan::executor {

template <typename Real>
void router_forward(Real* probs, int* experts, Real* scores, const Real* logits, int N, int E,
                    int K) {
  std::vector<int> order(static_cast<size_t>(E));
  for (int n = 0; n < N; n++) {
    const Real* row = logits + static_cast<int64_t>(n) * E;
    const Real maxval = *std::max_element(row, row + E);
    double sum = 0;
    for (int e = 0; e < E; e++) {
      sum += std::exp(static_cast<double>(row[e] - maxval));
    }
    for (int e = 0; e < E; e++) {
      scores[static_cast<int64_t>(n) * E + e] =
          static_cast<Real>(std::exp(static_cast<double>(row[e] - maxval)) / sum);
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
      probs[static_cast<int64_t>(n) * K + k] =
          static_cast<Real>(std::exp(static_cast<double>(row[order[k]] - row[order[0]])) / top_sum);
    }
  }
}

template <typename Real>
void router_backward(Real* dlogits, const Real* dprobs, const Real* probs, const int* experts,
                     int N, int E, int K) {
  for (int n = 0; n < N; n++) {
    const Real* p = probs + static_cast<int64_t>(n) * K;
    const Real* dp = dprobs + static_cast<int64_t>(n) * K;
    // Softmax backward over the k chosen logits: dz_i = p_i (dp_i - sum_j p_j dp_j).
    double dot = 0;
    for (int k = 0; k < K; k++) {
      dot += static_cast<double>(p[k]) * dp[k];
    }
    for (int k = 0; k < K; k++) {
      const int e = experts[static_cast<int64_t>(n) * K + k];
      dlogits[static_cast<int64_t>(n) * E + e] += static_cast<Real>(p[k] * (dp[k] - dot));
    }
  }
}

template <typename Real>
double load_balancing_loss(const Real* scores, const Real* f, int N, int E, double scale) {
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

template <typename Real>
void load_balancing_backward(Real* dlogits, const Real* scores, const Real* f, int N, int E,
                             double scale) {
  for (int n = 0; n < N; n++) {
    const Real* s = scores + static_cast<int64_t>(n) * E;
    // d loss / d s_e = scale f_e; through the softmax: dz_e = s_e (ds_e - sum_j s_j ds_j).
    double dot = 0;
    for (int e = 0; e < E; e++) {
      dot += static_cast<double>(s[e]) * scale * f[e];
    }
    for (int e = 0; e < E; e++) {
      dlogits[static_cast<int64_t>(n) * E + e] += static_cast<Real>(s[e] * (scale * f[e] - dot));
    }
  }
}

template <typename Real>
void sigmoid_aux_scores(Real* scores, Real* sigmoids, const Real* logits, int N, int E) {
  for (int n = 0; n < N; n++) {
    const int64_t row = static_cast<int64_t>(n) * E;
    double sum = 0;
    for (int e = 0; e < E; e++) {
      sigmoids[row + e] =
          static_cast<Real>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[row + e]))));
      sum += sigmoids[row + e];
    }
    for (int e = 0; e < E; e++) {
      scores[row + e] = static_cast<Real>(sigmoids[row + e] / (sum + 1e-20));
    }
  }
}

template <typename Real>
void load_balancing_backward_sigmoid(Real* dlogits, const Real* scores, const Real* sigmoids,
                                     const Real* f, int N, int E, double scale) {
  for (int n = 0; n < N; n++) {
    const int64_t row = static_cast<int64_t>(n) * E;
    // s_e = sigma_e / Z: ds_e / dz_k = sigma_k (1 - sigma_k) (delta_ek - s_e) / Z, and
    // sigma_k / Z = s_k.
    double dot = 0;
    for (int e = 0; e < E; e++) {
      dot += static_cast<double>(scores[row + e]) * scale * f[e];
    }
    for (int e = 0; e < E; e++) {
      dlogits[row + e] +=
          static_cast<Real>(scores[row + e] * (1.0 - sigmoids[row + e]) * (scale * f[e] - dot));
    }
  }
}

template void router_forward<float>(float*, int*, float*, const float*, int, int, int);
template void router_backward<float>(float*, const float*, const float*, const int*, int, int, int);
template double load_balancing_loss<float>(const float*, const float*, int, int, double);
template void load_balancing_backward<float>(float*, const float*, const float*, int, int, double);
template void router_forward<double>(double*, int*, double*, const double*, int, int, int);
template void router_backward<double>(double*, const double*, const double*, const int*, int, int,
                                      int);
template double load_balancing_loss<double>(const double*, const double*, int, int, double);
template void load_balancing_backward<double>(double*, const double*, const double*, int, int,
                                              double);
template void sigmoid_aux_scores<float>(float*, float*, const float*, int, int);
template void sigmoid_aux_scores<double>(double*, double*, const double*, int, int);
template void load_balancing_backward_sigmoid<float>(float*, const float*, const float*,
                                                     const float*, int, int, double);
template void load_balancing_backward_sigmoid<double>(double*, const double*, const double*,
                                                      const double*, int, int, double);

}  // namespace meshplan::executor
