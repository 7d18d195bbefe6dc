#include "ops/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/eigen_maps.h"
#include "ops/gemm_clock.h"

namespace meshplan::executor {

namespace {

// Start of head `head` of sequence b in a sequence-first buffer whose rows are `row` wide.
inline int64_t head_offset(int b, int head, int row, int HS) {
  return static_cast<int64_t>(b) * row + static_cast<int64_t>(head) * HS;
}

// The first key query t attends: 0 for full causal attention, t - W + 1 under a window W.
inline int first_key(int t, int W) {
  return W > 0 ? std::max(0, t - W + 1) : 0;
}

template <typename Real>
Real score_scale(AttentionScores scores, int HS) {
  return scores.scale > 0.0 ? static_cast<Real>(scores.scale)
                            : Real(1) / std::sqrt(static_cast<Real>(HS));
}

// Each row's softmax over its keys, and over the sink logit `sink` too when not nullptr (its
// probability is left out of the row).
template <typename Real>
void causal_softmax_rows(Real* scores, int T, int W, const Real* sink) {
  for (int t = 0; t < T; t++) {
    Real* row = scores + static_cast<int64_t>(t) * T;
    const int first = first_key(t, W);
    Real maximum = row[first];
    for (int j = first + 1; j <= t; j++) {
      maximum = std::max(maximum, row[j]);
    }
    if (sink != nullptr) {
      maximum = std::max(maximum, *sink);
    }
    Real sum = sink != nullptr ? std::exp(*sink - maximum) : Real(0);
    for (int j = first; j <= t; j++) {
      row[j] = std::exp(row[j] - maximum);
      sum += row[j];
    }
    const Real inverse = Real(1) / sum;
    for (int j = first; j <= t; j++) {
      row[j] *= inverse;
    }
    std::fill(row, row + first, Real(0));
    std::fill(row + t + 1, row + T, Real(0));
  }
}

}  // namespace

template <typename Real>
void attention_probs_forward(Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                             int W, AttentionScores mod, const std::type_identity_t<Real>* sinks) {
  assert(NH % KVH == 0);
  const int row = (NH + 2 * KVH) * HS;
  const Real scale = score_scale<Real>(mod, HS);
  const Real cap = static_cast<Real>(mod.softcap);
  const Eigen::OuterStride<> stride(static_cast<int64_t>(B) * row);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int kv = h / (NH / KVH);
      ConstStridedMap<Real> q(qkv + head_offset(b, h, row, HS), T, HS, stride);
      ConstStridedMap<Real> k(qkv + head_offset(b, NH + kv, row, HS), T, HS, stride);
      Real* scores = att + (static_cast<int64_t>(b) * NH + h) * T * T;
      {
        const GemmClock clock;
        MatrixMap<Real>(scores, T, T).noalias() = (q * k.transpose()) * scale;
      }
      if (cap > 0) {  // c tanh(x / c) on the causal entries; the rest are masked below
        for (int t = 0; t < T; t++) {
          Real* score_row = scores + static_cast<int64_t>(t) * T;
          for (int j = first_key(t, W); j <= t; j++) {
            score_row[j] = cap * std::tanh(score_row[j] / cap);
          }
        }
      }
      causal_softmax_rows(scores, T, W, sinks != nullptr ? sinks + h : nullptr);
    }
  }
}

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int T, int B, int NH, int KVH, int HS,
                       int W, AttentionScores mod, const std::type_identity_t<Real>* sinks) {
  attention_probs_forward(att, qkv, T, B, NH, KVH, HS, W, mod, sinks);
  const int row = (NH + 2 * KVH) * HS;
  const Eigen::OuterStride<> in_stride(static_cast<int64_t>(B) * row);
  const Eigen::OuterStride<> out_stride(static_cast<int64_t>(B) * NH * HS);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int kv = h / (NH / KVH);
      ConstStridedMap<Real> v(qkv + head_offset(b, NH + KVH + kv, row, HS), T, HS, in_stride);
      ConstMatrixMap<Real> p(att + (static_cast<int64_t>(b) * NH + h) * T * T, T, T);
      const GemmClock clock;
      StridedMap<Real>(out + head_offset(b, h, NH * HS, HS), T, HS, out_stride).noalias() = p * v;
    }
  }
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* att,
                        const Real* qkv, int T, int B, int NH, int KVH, int HS, AttentionScores mod,
                        std::type_identity_t<Real>* dsinks) {
  const int row = (NH + 2 * KVH) * HS;
  const Real scale = score_scale<Real>(mod, HS);
  const Real cap = static_cast<Real>(mod.softcap);
  // The soft-cap's input scale Q K^T, recomputed per head (T, T).
  Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> raw;
  const Eigen::OuterStride<> in_stride(static_cast<int64_t>(B) * row);
  const Eigen::OuterStride<> out_stride(static_cast<int64_t>(B) * NH * HS);
  MatrixMap<Real> dp(scratch, T, T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int kv = h / (NH / KVH);
      ConstStridedMap<Real> q(qkv + head_offset(b, h, row, HS), T, HS, in_stride);
      ConstStridedMap<Real> k(qkv + head_offset(b, NH + kv, row, HS), T, HS, in_stride);
      ConstStridedMap<Real> v(qkv + head_offset(b, NH + KVH + kv, row, HS), T, HS, in_stride);
      StridedMap<Real> dq(dqkv + head_offset(b, h, row, HS), T, HS, in_stride);
      StridedMap<Real> dk(dqkv + head_offset(b, NH + kv, row, HS), T, HS, in_stride);
      StridedMap<Real> dv(dqkv + head_offset(b, NH + KVH + kv, row, HS), T, HS, in_stride);
      ConstStridedMap<Real> dy(dout + head_offset(b, h, NH * HS, HS), T, HS, out_stride);
      ConstMatrixMap<Real> p(att + (static_cast<int64_t>(b) * NH + h) * T * T, T, T);
      // out = P V: dV += P^T dout, dP = dout V^T.
      {
        const GemmClock clock;
        dv.noalias() += p.transpose() * dy;
        dp.noalias() = dy * v.transpose();
      }
      if (cap > 0) {
        const GemmClock clock;
        raw.noalias() = (q * k.transpose()) * scale;
      }
      // Softmax: dS = P o (dP - rowsum(P o dP)); P is zero above the diagonal, so is dS. Under
      // the cap, dS is multiplied by d/dx c tanh(x / c) = 1 - tanh^2(x / c) at x = raw. A sink
      // (no value, dP 0) takes -p_sink rowsum(P o dP), p_sink = 1 - rowsum(P).
      for (int t = 0; t < T; t++) {
        Real dot = 0;
        Real mass = 0;
        for (int j = 0; j <= t; j++) {
          dot += p(t, j) * dp(t, j);
          mass += p(t, j);
        }
        if (dsinks != nullptr) {
          dsinks[h] -= (Real(1) - mass) * dot;
        }
        for (int j = 0; j < T; j++) {
          Real ds = j <= t ? p(t, j) * (dp(t, j) - dot) * scale : Real(0);
          if (cap > 0 && j <= t) {
            const Real u = std::tanh(raw(t, j) / cap);
            ds *= Real(1) - u * u;
          }
          dp(t, j) = ds;
        }
      }
      // S = scale Q K^T: dQ += scale dS K, dK += scale dS^T Q (scale folded into dp above).
      const GemmClock clock;
      dq.noalias() += dp * k;
      dk.noalias() += dp.transpose() * q;
    }
  }
}

void attention_forward_reference(float* out, float* att, const float* qkv, int T, int B, int NH,
                                 int KVH, int HS, int W, AttentionScores mod, const float* sinks) {
  const int row = (NH + 2 * KVH) * HS;
  const float scale = score_scale<float>(mod, HS);
  const float cap = static_cast<float>(mod.softcap);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int kv = h / (NH / KVH);
      float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
      for (int t = 0; t < T; t++) {
        const float* q = qkv + (static_cast<int64_t>(t) * B + b) * row + h * HS;
        const int first = first_key(t, W);
        float maximum = -INFINITY;
        for (int j = first; j <= t; j++) {
          const float* k = qkv + (static_cast<int64_t>(j) * B + b) * row + (NH + kv) * HS;
          float score = 0;
          for (int i = 0; i < HS; i++) {
            score += q[i] * k[i];
          }
          p[t * T + j] = cap > 0 ? cap * std::tanh(score * scale / cap) : score * scale;
          maximum = std::max(maximum, p[t * T + j]);
        }
        if (sinks != nullptr) {
          maximum = std::max(maximum, sinks[h]);
        }
        float sum = sinks != nullptr ? std::exp(sinks[h] - maximum) : 0.0f;
        for (int j = first; j <= t; j++) {
          p[t * T + j] = std::exp(p[t * T + j] - maximum);
          sum += p[t * T + j];
        }
        for (int j = 0; j < T; j++) {
          p[t * T + j] = j >= first && j <= t ? p[t * T + j] / sum : 0.0f;
        }
        float* y = out + (static_cast<int64_t>(t) * B + b) * NH * HS + h * HS;
        for (int i = 0; i < HS; i++) {
          y[i] = 0;
        }
        for (int j = first; j <= t; j++) {
          const float* v = qkv + (static_cast<int64_t>(j) * B + b) * row + (NH + KVH + kv) * HS;
          for (int i = 0; i < HS; i++) {
            y[i] += p[t * T + j] * v[i];
          }
        }
      }
    }
  }
}

void attention_backward_reference(float* dqkv, const float* dout, const float* att,
                                  const float* qkv, int T, int B, int NH, int KVH, int HS,
                                  AttentionScores mod, float* dsinks) {
  const int row = (NH + 2 * KVH) * HS;
  const float scale = score_scale<float>(mod, HS);
  const float cap = static_cast<float>(mod.softcap);
  std::vector<float> dp(static_cast<size_t>(T));
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int kv = h / (NH / KVH);
      const float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
      for (int t = 0; t < T; t++) {
        const float* dy = dout + (static_cast<int64_t>(t) * B + b) * NH * HS + h * HS;
        const int64_t q_at = (static_cast<int64_t>(t) * B + b) * row + h * HS;
        float dot = 0;
        for (int j = 0; j <= t; j++) {
          const int64_t v_at = (static_cast<int64_t>(j) * B + b) * row + (NH + KVH + kv) * HS;
          dp[j] = 0;
          for (int i = 0; i < HS; i++) {
            dp[j] += dy[i] * qkv[v_at + i];
            dqkv[v_at + i] += p[t * T + j] * dy[i];
          }
          dot += p[t * T + j] * dp[j];
        }
        if (dsinks != nullptr) {  // the sink's probability is what the keys' leave of 1
          float p_sink = 1.0f;
          for (int j = 0; j <= t; j++) {
            p_sink -= p[t * T + j];
          }
          dsinks[h] -= p_sink * dot;
        }
        for (int j = 0; j <= t; j++) {
          float ds = p[t * T + j] * (dp[j] - dot) * scale;
          const int64_t k_at = (static_cast<int64_t>(j) * B + b) * row + (NH + kv) * HS;
          if (cap > 0) {  // d/dx c tanh(x / c) = 1 - tanh^2(x / c) at x = scale q . k
            float raw = 0;
            for (int i = 0; i < HS; i++) {
              raw += qkv[q_at + i] * qkv[k_at + i];
            }
            const float u = std::tanh(raw * scale / cap);
            ds *= 1.0f - u * u;
          }
          for (int i = 0; i < HS; i++) {
            dqkv[q_at + i] += ds * qkv[k_at + i];
            dqkv[k_at + i] += ds * qkv[q_at + i];
          }
        }
      }
    }
  }
}

template void attention_probs_forward<float>(float*, const float*, int, int, int, int, int, int,
                                             AttentionScores, const float*);
template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int, int,
                                       AttentionScores, const float*);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int, int, AttentionScores, float*);
template void attention_probs_forward<double>(double*, const double*, int, int, int, int, int, int,
                                              AttentionScores, const double*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, int,
                                        int, AttentionScores, const double*);
template void attention_backward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int, int, AttentionScores,
                                         double*);

}  // namespace meshplan::executor
