#include "ops/cp_attention.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace meshplan::executor {

void cp_attention_forward(float* out, float* att, const float* qkv, const float* kv,
                          const int* positions, int T, int S, int B, int NH, int KVH, int HS,
                          float scale) {
  const int QKV = (NH + 2 * KVH) * HS;
  const int KV = 2 * KVH * HS;
  const int group = NH / KVH;
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int k_off = (h / group) * HS;
      const int v_off = KVH * HS + k_off;
      for (int t = 0; t < T; t++) {
        const float* q = qkv + (static_cast<int64_t>(t) * B + b) * QKV + h * HS;
        float* row = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * S;
        const int last = positions[t];
        float max_score = -std::numeric_limits<float>::infinity();
        for (int s = 0; s <= last; s++) {
          const float* k = kv + (static_cast<int64_t>(s) * B + b) * KV + k_off;
          float dot = 0.0f;
          for (int i = 0; i < HS; i++) {
            dot += q[i] * k[i];
          }
          row[s] = dot * scale;
          max_score = std::max(max_score, row[s]);
        }
        float sum = 0.0f;
        for (int s = 0; s <= last; s++) {
          row[s] = std::exp(row[s] - max_score);
          sum += row[s];
        }
        for (int s = 0; s < S; s++) {
          row[s] = s <= last ? row[s] / sum : 0.0f;
        }
        float* o = out + (static_cast<int64_t>(t) * B + b) * NH * HS + h * HS;
        for (int i = 0; i < HS; i++) {
          o[i] = 0.0f;
        }
        for (int s = 0; s <= last; s++) {
          const float* v = kv + (static_cast<int64_t>(s) * B + b) * KV + v_off;
          for (int i = 0; i < HS; i++) {
            o[i] += row[s] * v[i];
          }
        }
      }
    }
  }
}

void cp_attention_backward(float* dqkv, float* dkv, const float* dout, const float* att,
                           const float* qkv, const float* kv, const int* positions, int T, int S,
                           int B, int NH, int KVH, int HS, float scale) {
  const int QKV = (NH + 2 * KVH) * HS;
  const int KV = 2 * KVH * HS;
  const int group = NH / KVH;
  std::vector<float> dp(static_cast<size_t>(S));
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int k_off = (h / group) * HS;
      const int v_off = KVH * HS + k_off;
      for (int t = 0; t < T; t++) {
        const int64_t q_row = (static_cast<int64_t>(t) * B + b);
        const float* q = qkv + q_row * QKV + h * HS;
        float* dq = dqkv + q_row * QKV + h * HS;
        const float* d_o = dout + q_row * NH * HS + h * HS;
        const float* p = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * S;
        const int last = positions[t];
        // dP = dout V^T, dV += P^T dout; softmax backward dS = P (dP - sum P dP).
        float p_dp = 0.0f;
        for (int s = 0; s <= last; s++) {
          const int64_t kv_row = static_cast<int64_t>(s) * B + b;
          const float* v = kv + kv_row * KV + v_off;
          float* dv = dkv + kv_row * KV + v_off;
          float dot = 0.0f;
          for (int i = 0; i < HS; i++) {
            dot += d_o[i] * v[i];
            dv[i] += p[s] * d_o[i];
          }
          dp[s] = dot;
          p_dp += p[s] * dot;
        }
        for (int s = 0; s <= last; s++) {
          const int64_t kv_row = static_cast<int64_t>(s) * B + b;
          const float ds = p[s] * (dp[s] - p_dp) * scale;
          const float* k = kv + kv_row * KV + k_off;
          float* dk = dkv + kv_row * KV + k_off;
          for (int i = 0; i < HS; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

}  // namespace meshplan::executor
