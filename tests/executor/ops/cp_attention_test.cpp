#include "ops/cp_attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::max_relative_difference;
using testing::random_vector;
using testing::to_float;

// The sequence split over two context-parallel ranks equals the whole-sequence reference: S 8 in
// 4 chunks of 2, rank 0 holding chunks 0 and 3 (positions 0, 1, 6, 7), rank 1 chunks 1 and 2
// (2, 3, 4, 5). Each rank's rows of out, of the probabilities and of dQ must be the reference's
// rows at its positions; dK and dV summed over the two ranks must be the reference's. At the
// default scale 1 / sqrt(HS) and at another (MLA under YaRN multiplies it by mscale^2).
void check_two_ranks_against_reference(double scale) {
  CAPTURE(scale);
  const int S = 8, T = 4, B = 2, NH = 4, KVH = 2, HS = 3, row = (NH + 2 * KVH) * HS;
  const AttentionScores scores{scale, 0.0};
  const int KV = 2 * KVH * HS;
  const auto qkv = to_float(random_vector(S * B * row, 11));
  const auto dy = to_float(random_vector(S * B * NH * HS, 12));
  std::vector<float> out_ref(S * B * NH * HS), att_ref(B * NH * S * S), dqkv_ref(S * B * row, 0.0f);
  attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), S, B, NH, KVH, HS, 0,
                              scores);
  attention_backward_reference(dqkv_ref.data(), dy.data(), att_ref.data(), qkv.data(), S, B, NH,
                               KVH, HS, scores);
  std::vector<float> kv(S * B * KV);  // every position's K and V, as the ring gathers them
  for (int r = 0; r < S * B; r++) {
    std::copy_n(qkv.data() + r * row + NH * HS, KV, kv.data() + r * KV);
  }
  const int positions[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
  std::vector<float> dkv(S * B * KV, 0.0f);
  std::vector<float> dqkv(S * B * row, 0.0f);  // assembled: Q parts by position, K/V from dkv
  std::vector<float> out(S * B * NH * HS), att(B * NH * S * S);
  for (const auto& pos : positions) {
    std::vector<float> qkv_local(T * B * row), dy_local(T * B * NH * HS);
    for (int t = 0; t < T; t++) {
      for (int b = 0; b < B; b++) {
        std::copy_n(qkv.data() + (pos[t] * B + b) * row, row, qkv_local.data() + (t * B + b) * row);
        std::copy_n(dy.data() + (pos[t] * B + b) * NH * HS, NH * HS,
                    dy_local.data() + (t * B + b) * NH * HS);
      }
    }
    std::vector<float> out_local(T * B * NH * HS), att_local(B * NH * T * S);
    std::vector<float> dqkv_local(T * B * row, 0.0f);
    cp_attention_forward(out_local.data(), att_local.data(), qkv_local.data(), kv.data(), pos, T, S,
                         B, NH, KVH, HS, static_cast<float>(scale));
    cp_attention_backward(dqkv_local.data(), dkv.data(), dy_local.data(), att_local.data(),
                          qkv_local.data(), kv.data(), pos, T, S, B, NH, KVH, HS,
                          static_cast<float>(scale));
    for (int t = 0; t < T; t++) {
      for (int b = 0; b < B; b++) {
        std::copy_n(out_local.data() + (t * B + b) * NH * HS, NH * HS,
                    out.data() + (pos[t] * B + b) * NH * HS);
        std::copy_n(dqkv_local.data() + (t * B + b) * row, NH * HS,
                    dqkv.data() + (pos[t] * B + b) * row);
      }
      for (int bh = 0; bh < B * NH; bh++) {
        std::copy_n(att_local.data() + (bh * T + t) * S, S, att.data() + (bh * S + pos[t]) * S);
      }
    }
  }
  for (int r = 0; r < S * B; r++) {
    std::copy_n(dkv.data() + r * KV, KV, dqkv.data() + r * row + NH * HS);
  }
  // 1e-5: float sums of at most 8 terms in another order (a few ulp), with margin.
  CHECK(max_relative_difference(att, att_ref) < 1e-5);
  CHECK(max_relative_difference(out, out_ref) < 1e-5);
  CHECK(max_relative_difference(dqkv, dqkv_ref) < 1e-5);
}

TEST_CASE("cp attention over two ranks' chunks equals the plain-loop reference") {
  check_two_ranks_against_reference(1.0 / std::sqrt(3.0));
  // (0.1 ln 40 + 1)^2 / sqrt(3): DeepSeek-V3's factor 40 at mscale_all_dim 1.
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  check_two_ranks_against_reference(mscale * mscale / std::sqrt(3.0));
}

}  // namespace
}  // namespace meshplan::executor
