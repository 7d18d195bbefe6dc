// The MLA heads' output against a plain double-precision transcription of DeepSeek-V2's
// equations (Sec. 2.1, eqs. 9-19 with the decoupled RoPE key) on one rank: the compressed
// latents, their RMSNorms, the per-head [nope | rope] queries and keys with one rotary key shared
// by all heads, causal softmax at 1 / sqrt(d_n + d_r), values d_v wide. The backward is checked
// against finite differences with the whole model (trainer_test.cpp).
#include "mla_attention.h"

#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#include "one_rank.h"
#include "ops/layernorm.h"
#include "ops/rope.h"

namespace meshplan::executor {
namespace {

using Matrix = std::vector<double>;  // row-major

std::vector<float> random_floats(size_t size, double scale, std::mt19937* generator) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> v(size);
  for (float& x : v) {
    x = static_cast<float>(normal(*generator));
  }
  return v;
}

// out (rows, OC) = in (rows, C) W^T for W (OC, C) starting at row `first` of `w`.
Matrix project(const Matrix& in, const std::vector<float>& w, int first, int rows, int C, int OC) {
  Matrix out(static_cast<size_t>(rows) * OC, 0.0);
  for (int n = 0; n < rows; n++) {
    for (int o = 0; o < OC; o++) {
      for (int c = 0; c < C; c++) {
        out[n * OC + o] += in[n * C + c] * w[static_cast<size_t>(first + o) * C + c];
      }
    }
  }
  return out;
}

// RMSNorm of each row (Zhang and Sennrich 2019, eq. 4) with gain g.
Matrix rms_norm(Matrix x, const std::vector<float>& g, int rows, int C) {
  for (int n = 0; n < rows; n++) {
    double square_sum = 0;
    for (int c = 0; c < C; c++) {
      square_sum += x[n * C + c] * x[n * C + c];
    }
    const double r = 1.0 / std::sqrt(square_sum / C + kNormEpsilon);
    for (int c = 0; c < C; c++) {
      x[n * C + c] *= r * g[c];
    }
  }
  return x;
}

// Half-split RoPE (Su et al. 2021, eq. 34) of the DR values at x, position t.
void rotate(double* x, int t, int DR) {
  for (int i = 0; i < DR / 2; i++) {
    const double angle = t * std::pow(kRopeBase, -2.0 * i / DR);
    const double a = x[i];
    const double b = x[i + DR / 2];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + DR / 2] = a * std::sin(angle) + b * std::cos(angle);
  }
}

// The heads' output (N, a d_v) by DeepSeek-V2's equations, rows sequence-first (t B + b).
Matrix reference(const ShardDims& d, const std::vector<float>& x_in,
                 const std::vector<std::vector<float>>& tensors) {
  const int N = d.N, C = d.C, H = d.NH, DN = d.DN, DR = d.DR, DV = d.DV, HQ = DN + DR;
  const Matrix x(x_in.begin(), x_in.end());
  // tensors: q_down, q_norm, q_up, kv_down, kv_norm, kv_up, as the LayerWeights point to them.
  const Matrix q =
      d.RQ > 0 ? project(rms_norm(project(x, tensors[0], 0, N, C, d.RQ), tensors[1], N, d.RQ),
                         tensors[2], 0, N, d.RQ, H * HQ)
               : project(x, tensors[2], 0, N, C, H * HQ);
  const Matrix kv = project(rms_norm(project(x, tensors[3], 0, N, C, d.RKV), tensors[4], N, d.RKV),
                            tensors[5], 0, N, d.RKV, H * (DN + DV));
  Matrix k_rope = project(x, tensors[3], d.RKV, N, C, DR);  // rows RKV.. of W_DKV
  Matrix q_rot = q;
  for (int n = 0; n < N; n++) {
    const int t = n / d.B;
    rotate(&k_rope[n * DR], t, DR);
    for (int h = 0; h < H; h++) {
      rotate(&q_rot[n * H * HQ + h * HQ + DN], t, DR);
    }
  }
  Matrix out(static_cast<size_t>(N) * H * DV, 0.0);
  for (int b = 0; b < d.B; b++) {
    for (int h = 0; h < H; h++) {
      for (int t = 0; t < d.T; t++) {
        const int n = t * d.B + b;
        std::vector<double> p(static_cast<size_t>(t + 1));
        double maximum = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const int m = j * d.B + b;
          double score = 0;
          for (int i = 0; i < DN; i++) {  // q_nope . k_nope
            score += q_rot[n * H * HQ + h * HQ + i] * kv[m * H * (DN + DV) + h * (DN + DV) + i];
          }
          for (int i = 0; i < DR; i++) {  // q_rope . k_rope, the key shared by all heads
            score += q_rot[n * H * HQ + h * HQ + DN + i] * k_rope[m * DR + i];
          }
          p[j] = score / std::sqrt(static_cast<double>(HQ));
          maximum = std::max(maximum, p[j]);
        }
        double sum = 0;
        for (double& value : p) {
          value = std::exp(value - maximum);
          sum += value;
        }
        for (int j = 0; j <= t; j++) {
          const int m = j * d.B + b;
          for (int i = 0; i < DV; i++) {
            out[n * H * DV + h * DV + i] +=
                p[j] / sum * kv[m * H * (DN + DV) + h * (DN + DV) + DN + i];
          }
        }
      }
    }
  }
  return out;
}

void check_against_reference(const models::TransformerConfig& model) {
  testing::OneRank rank(model);
  const ShardDims& d = rank.dims;
  const RankContext ctx = rank.context();
  std::mt19937 generator(11);
  // Weights of std 0.3 (not 0.02) so the scores spread and the softmax is far from uniform.
  std::vector<std::vector<float>> tensors = {
      random_floats(static_cast<size_t>(d.RQ) * d.C, 0.3, &generator),
      random_floats(static_cast<size_t>(d.RQ), 0.3, &generator),
      random_floats(static_cast<size_t>(d.QUP) * (d.RQ > 0 ? d.RQ : d.C), 0.3, &generator),
      random_floats(static_cast<size_t>(d.RKV + d.DR) * d.C, 0.3, &generator),
      random_floats(static_cast<size_t>(d.RKV), 0.3, &generator),
      random_floats(static_cast<size_t>(d.KVUP) * d.RKV, 0.3, &generator)};
  for (float& g : tensors[1]) {
    g += 1.0f;  // norm gains around 1
  }
  for (float& g : tensors[4]) {
    g += 1.0f;
  }
  LayerWeights w;
  w.q_down_w = d.RQ > 0 ? tensors[0].data() : nullptr;
  w.q_norm_w = d.RQ > 0 ? tensors[1].data() : nullptr;
  w.q_up_w = tensors[2].data();
  w.kv_down_w = tensors[3].data();
  w.kv_norm_w = tensors[4].data();
  w.kv_up_w = tensors[5].data();
  const std::vector<float> x = random_floats(static_cast<size_t>(d.N) * d.C, 1.0, &generator);
  std::vector<float> out(static_cast<size_t>(d.N) * d.AO);
  MlaActivations acts;
  mla_forward(out.data(), &acts, x.data(), w, /*save_probabilities=*/true, ctx);
  const Matrix expected = reference(d, x, tensors);
  REQUIRE(expected.size() == out.size());
  double worst = 0;
  for (size_t i = 0; i < out.size(); i++) {
    worst = std::max(worst, std::abs(out[i] - expected[i]));
  }
  MESSAGE("largest difference from the double-precision equations " << worst);
  // fp32 against double over a few hundred products of O(1) terms: ~1e-6; 1e-5 bounds it.
  CHECK(worst < 1e-5);
}

TEST_CASE("MLA heads equal DeepSeek-V2's equations (compressed queries; v_head 2 < qk head 8)") {
  check_against_reference(testing::small_mla_model());
}

TEST_CASE("MLA heads equal DeepSeek-V2's equations (uncompressed queries, q_lora_rank 0)") {
  models::TransformerConfig model = testing::small_mla_model();
  model.q_lora_rank = 0;
  check_against_reference(model);
}

}  // namespace
}  // namespace meshplan::executor
