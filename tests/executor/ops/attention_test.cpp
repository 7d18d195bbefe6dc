#include "ops/attention.h"

#include <doctest/doctest.h>

#include <cmath>

#include "ops/gradient_check.h"

namespace meshplan::executor {
namespace {

using testing::dot;
using testing::gradient_error;
using testing::max_relative_difference;
using testing::random_vector;
using testing::to_float;

TEST_CASE("attention at the first position returns that position's value") {
  // Causal: position 0 attends only to itself, so its output is its own value vector.
  const int T = 3, B = 1, NH = 2, KVH = 1, HS = 2, row = (NH + 2 * KVH) * HS;
  const std::vector<double> qkv = random_vector(T * B * row, 1);
  std::vector<double> out(T * B * NH * HS), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS);
  for (int h = 0; h < NH; h++) {  // both query heads share kv head 0: value at offset 3 * HS
    CHECK(out[h * HS + 0] ==
          doctest::Approx(qkv[3 * HS + 0]).epsilon(1e-12).scale(0));  // rounding only
    CHECK(out[h * HS + 1] == doctest::Approx(qkv[3 * HS + 1]).epsilon(1e-12).scale(0));
  }
  CHECK(att[1] == 0.0);  // row 0 of head 0: nothing above the diagonal
}

TEST_CASE("attention with equal keys averages the visible values") {
  // All keys zero: every visible score is 0, so row t averages values 0..t.
  const int T = 3, NH = 1, KVH = 1, HS = 1, row = 3;
  std::vector<double> qkv = {0.5, 0, 3, 0.5, 0, 6, 0.5, 0, 9};  // rows {q, k, v}
  std::vector<double> out(T), att(T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, 1, NH, KVH, HS);
  CHECK(out[0] == doctest::Approx(3.0).epsilon(1e-12).scale(0));  // 3
  CHECK(out[1] == doctest::Approx(4.5).epsilon(1e-12).scale(0));  // (3 + 6) / 2
  CHECK(out[2] == doctest::Approx(6.0).epsilon(1e-12).scale(0));  // (3 + 6 + 9) / 3
  (void)row;
}

TEST_CASE("attention_backward matches finite differences (grouped-query, B = 2)") {
  const int T = 4, B = 2, NH = 4, KVH = 2, HS = 3, row = (NH + 2 * KVH) * HS;
  const std::vector<double> qkv0 = random_vector(T * B * row, 2),
                            dy = random_vector(T * B * NH * HS, 3);
  auto loss = [&](const std::vector<double>& qkv) {
    std::vector<double> out(T * B * NH * HS), att(B * NH * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS);
    return dot(out, dy);
  };
  std::vector<double> out(T * B * NH * HS), att(B * NH * T * T), scratch(T * T);
  attention_forward(out.data(), att.data(), qkv0.data(), T, B, NH, KVH, HS);
  std::vector<double> dqkv(T * B * row, 0.0);
  attention_backward(dqkv.data(), scratch.data(), dy.data(), att.data(), qkv0.data(), T, B, NH, KVH,
                     HS);
  // Tolerance 1e-7: see gradient_check.h.
  CHECK(gradient_error(loss, qkv0, dqkv) < 1e-7);
}

TEST_CASE("recomputed probabilities equal the saved ones (selective recompute)") {
  const int T = 5, B = 2, NH = 2, KVH = 1, HS = 4, row = (NH + 2 * KVH) * HS;
  const auto qkv = to_float(random_vector(T * B * row, 4));
  std::vector<float> out(T * B * NH * HS), saved(B * NH * T * T), again(B * NH * T * T);
  attention_forward(out.data(), saved.data(), qkv.data(), T, B, NH, KVH, HS);
  attention_probs_forward(again.data(), qkv.data(), T, B, NH, KVH, HS);
  CHECK(saved == again);  // the same code on the same inputs: bitwise equal
}

TEST_CASE("attention Eigen path equals the plain-loop reference in float") {
  const int T = 7, B = 3, NH = 4, KVH = 2, HS = 5, row = (NH + 2 * KVH) * HS;
  const auto qkv = to_float(random_vector(T * B * row, 5));
  const auto dy = to_float(random_vector(T * B * NH * HS, 6));
  std::vector<float> out(T * B * NH * HS), out_ref(T * B * NH * HS);
  std::vector<float> att(B * NH * T * T), att_ref(B * NH * T * T), scratch(T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS);
  attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), T, B, NH, KVH, HS);
  // 1e-5: float sums of at most 7 terms in a different order (a few ulp, ~1e-7), with margin.
  CHECK(max_relative_difference(att, att_ref) < 1e-5);
  CHECK(max_relative_difference(out, out_ref) < 1e-5);
  std::vector<float> dqkv(T * B * row, 0.0f), dqkv_ref(T * B * row, 0.0f);
  attention_backward(dqkv.data(), scratch.data(), dy.data(), att.data(), qkv.data(), T, B, NH, KVH,
                     HS);
  attention_backward_reference(dqkv_ref.data(), dy.data(), att.data(), qkv.data(), T, B, NH, KVH,
                               HS);
  CHECK(max_relative_difference(dqkv, dqkv_ref) < 1e-5);  // as above
}

TEST_CASE("sliding window W = 1: every output is its own value vector") {
  // Query t attends keys t - W < j <= t: only itself, softmax of one score is 1.
  const int T = 5, B = 2, NH = 4, KVH = 2, HS = 3, row = (NH + 2 * KVH) * HS;
  const std::vector<double> qkv = random_vector(T * B * row, 7);
  std::vector<double> out(T * B * NH * HS), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS, 1);
  for (int t = 0; t < T; t++) {
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const int kv = h / (NH / KVH);
        for (int i = 0; i < HS; i++) {
          const double value = qkv[(t * B + b) * row + (NH + KVH + kv) * HS + i];
          CHECK(out[(t * B + b) * NH * HS + h * HS + i] ==
                doctest::Approx(value).epsilon(1e-12).scale(0));
        }
      }
    }
  }
  for (int t = 0; t < T; t++) {  // head 0 of sequence 0: P is the identity
    for (int j = 0; j < T; j++) {
      CHECK(att[t * T + j] == (t == j ? 1.0 : 0.0));
    }
  }
}

TEST_CASE("sliding window W = 2 with equal keys averages the last two values") {
  // All keys zero: row t averages values max(0, t - 1)..t.
  const int T = 4, NH = 1, KVH = 1, HS = 1;
  const std::vector<double> qkv = {0.5, 0, 3, 0.5, 0, 6, 0.5, 0, 9, 0.5, 0, 12};  // {q, k, v}
  std::vector<double> out(T), att(T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, 1, NH, KVH, HS, 2);
  CHECK(out[0] == doctest::Approx(3.0).epsilon(1e-12).scale(0));   // 3
  CHECK(out[1] == doctest::Approx(4.5).epsilon(1e-12).scale(0));   // (3 + 6) / 2
  CHECK(out[2] == doctest::Approx(7.5).epsilon(1e-12).scale(0));   // (6 + 9) / 2, not 6
  CHECK(out[3] == doctest::Approx(10.5).epsilon(1e-12).scale(0));  // (9 + 12) / 2
  CHECK(att[3 * T + 1] == 0.0);  // key 1 is left of query 3's window
}

TEST_CASE("a window of T or more is full causal attention, bitwise") {
  const int T = 6, B = 2, NH = 2, KVH = 1, HS = 4, row = (NH + 2 * KVH) * HS;
  const auto qkv = to_float(random_vector(T * B * row, 8));
  std::vector<float> full(T * B * NH * HS), wide(T * B * NH * HS);
  std::vector<float> att(B * NH * T * T), att_wide(B * NH * T * T);
  attention_forward(full.data(), att.data(), qkv.data(), T, B, NH, KVH, HS);
  attention_forward(wide.data(), att_wide.data(), qkv.data(), T, B, NH, KVH, HS, T);
  CHECK(full == wide);
  attention_forward(wide.data(), att_wide.data(), qkv.data(), T, B, NH, KVH, HS, 3);
  CHECK(full != wide);  // a shorter window changes the rows t >= 3
}

TEST_CASE("windowed attention: Eigen path equals the reference, backward matches differences") {
  const int T = 7, B = 2, NH = 4, KVH = 2, HS = 3, W = 3, row = (NH + 2 * KVH) * HS;
  const auto qkv = to_float(random_vector(T * B * row, 9));
  std::vector<float> out(T * B * NH * HS), out_ref(T * B * NH * HS);
  std::vector<float> att(B * NH * T * T), att_ref(B * NH * T * T), again(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS, W);
  attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), T, B, NH, KVH, HS, W);
  CHECK(max_relative_difference(att, att_ref) < 1e-5);  // as the unwindowed case
  CHECK(max_relative_difference(out, out_ref) < 1e-5);
  attention_probs_forward(again.data(), qkv.data(), T, B, NH, KVH, HS, W);
  CHECK(again == att);  // selective recompute rebuilds the same windowed P
  // The backward takes P: zero outside the window, so its gradient is the window's.
  const std::vector<double> qkv0 = random_vector(T * B * row, 10),
                            dy = random_vector(T * B * NH * HS, 11);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> o(T * B * NH * HS), p(B * NH * T * T);
    attention_forward(o.data(), p.data(), x.data(), T, B, NH, KVH, HS, W);
    return dot(o, dy);
  };
  std::vector<double> o(T * B * NH * HS), p(B * NH * T * T), scratch(T * T);
  attention_forward(o.data(), p.data(), qkv0.data(), T, B, NH, KVH, HS, W);
  std::vector<double> dqkv(T * B * row, 0.0);
  attention_backward(dqkv.data(), scratch.data(), dy.data(), p.data(), qkv0.data(), T, B, NH, KVH,
                     HS);
  CHECK(gradient_error(loss, qkv0, dqkv) < 1e-7);  // gradient_check.h's tolerance
}

TEST_CASE("attention: Gemma 2's scale and soft-cap, forward by hand and backward by differences") {
  const int T = 5, B = 2, NH = 4, KVH = 2, HS = 3, row = (NH + 2 * KVH) * HS;
  // Scores of std ~3 (qkv std 1, 3 dims, scale 1): a cap of 1.5 bends them well off the line.
  const AttentionScores mod{1.0, 1.5};
  const std::vector<double> qkv0 = random_vector(T * B * row, 21),
                            dy = random_vector(T * B * NH * HS, 22);
  std::vector<double> o(T * B * NH * HS), p(B * NH * T * T), scratch(T * T);
  attention_forward(o.data(), p.data(), qkv0.data(), T, B, NH, KVH, HS, 0, mod);
  // Row t = 2 of head 1 (kv head 0) in sequence 1, by hand: softmax over j <= 2 of
  // 1.5 tanh(q . k_j / 1.5).
  const int b = 1, h = 1, t = 2;
  double e[3], sum = 0;
  for (int j = 0; j <= t; j++) {
    double s = 0;
    for (int i = 0; i < HS; i++) {
      s += qkv0[(t * B + b) * row + h * HS + i] * qkv0[(j * B + b) * row + NH * HS + i];
    }
    e[j] = std::exp(1.5 * std::tanh(s / 1.5));
    sum += e[j];
  }
  for (int j = 0; j <= t; j++) {
    CHECK(p[(b * NH + h) * T * T + t * T + j] ==
          doctest::Approx(e[j] / sum).epsilon(1e-12).scale(0));  // double rounding only
  }
  // The default scale is 1 / sqrt(HS): given explicitly it is the same attention.
  std::vector<double> o_default(o.size()), o_explicit(o.size()), p2(p.size());
  attention_forward(o_default.data(), p2.data(), qkv0.data(), T, B, NH, KVH, HS);
  attention_forward(o_explicit.data(), p2.data(), qkv0.data(), T, B, NH, KVH, HS, 0,
                    AttentionScores{1.0 / std::sqrt(3.0), 0.0});
  for (size_t i = 0; i < o_default.size(); i++) {
    CHECK(o_explicit[i] == doctest::Approx(o_default[i]).epsilon(1e-12).scale(0));  // rounding
  }
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out(T * B * NH * HS), probs(B * NH * T * T);
    attention_forward(out.data(), probs.data(), x.data(), T, B, NH, KVH, HS, 0, mod);
    return dot(out, dy);
  };
  std::vector<double> dqkv(T * B * row, 0.0);
  attention_backward(dqkv.data(), scratch.data(), dy.data(), p.data(), qkv0.data(), T, B, NH, KVH,
                     HS, mod);
  CHECK(gradient_error(loss, qkv0, dqkv) < 1e-7);  // gradient_check.h's tolerance
  // And windowed (W = 2): the cap's derivative is taken on the window's entries only.
  auto windowed_loss = [&](const std::vector<double>& x) {
    std::vector<double> out(T * B * NH * HS), probs(B * NH * T * T);
    attention_forward(out.data(), probs.data(), x.data(), T, B, NH, KVH, HS, 2, mod);
    return dot(out, dy);
  };
  attention_forward(o.data(), p.data(), qkv0.data(), T, B, NH, KVH, HS, 2, mod);
  std::vector<double> dqkv_windowed(T * B * row, 0.0);
  attention_backward(dqkv_windowed.data(), scratch.data(), dy.data(), p.data(), qkv0.data(), T, B,
                     NH, KVH, HS, mod);
  CHECK(gradient_error(windowed_loss, qkv0, dqkv_windowed) < 1e-7);
}

TEST_CASE("attention: the capped, rescaled Eigen path equals the plain-loop reference") {
  const int T = 7, B = 2, NH = 4, KVH = 2, HS = 8, W = 3, row = (NH + 2 * KVH) * HS;
  const AttentionScores mod{0.5, 2.0};  // scores of std ~sqrt(8) x 0.5 = 1.4 against c = 2
  const auto qkv = to_float(random_vector(T * B * row, 31));
  const auto dy = to_float(random_vector(T * B * NH * HS, 32));
  std::vector<float> out(T * B * NH * HS), out_ref(T * B * NH * HS);
  std::vector<float> att(B * NH * T * T), att_ref(B * NH * T * T), scratch(T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS, W, mod);
  attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), T, B, NH, KVH, HS, W,
                              mod);
  CHECK(max_relative_difference(att, att_ref) < 1e-5);  // as the uncapped case
  CHECK(max_relative_difference(out, out_ref) < 1e-5);
  std::vector<float> dqkv(T * B * row, 0.0f), dqkv_ref(T * B * row, 0.0f);
  attention_backward(dqkv.data(), scratch.data(), dy.data(), att.data(), qkv.data(), T, B, NH, KVH,
                     HS, mod);
  attention_backward_reference(dqkv_ref.data(), dy.data(), att.data(), qkv.data(), T, B, NH, KVH,
                               HS, mod);
  CHECK(max_relative_difference(dqkv, dqkv_ref) < 1e-5);  // as the uncapped case
}

TEST_CASE("attention sinks: one logit per head in the softmax's denominator, by hand") {
  // One sequence, T = 3, two query heads on one kv head, HS = 1, scale 1: keys 0 and values
  // 3, 6, 9, so every score is 0 and row t holds t + 1 equal entries beside the sink z_h:
  // p_j = 1 / (t + 1 + e^z_h), out_t = (3 + .. + 3 (t + 1)) p_j.
  const int T = 3, NH = 2, KVH = 1, HS = 1;
  const std::vector<double> qkv = {0.5, -1, 0, 3, 0.5, -1, 0, 6, 0.5, -1, 0, 9};  // {q0 q1 k v}
  const std::vector<double> sinks = {0.7, -1.3};
  std::vector<double> out(T * NH), att(NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), T, 1, NH, KVH, HS, 0,
                    AttentionScores{1.0, 0.0}, sinks.data());
  for (int h = 0; h < NH; h++) {
    for (int t = 0; t < T; t++) {
      CAPTURE(h);
      CAPTURE(t);
      const double p = 1.0 / (t + 1 + std::exp(sinks[h]));
      CHECK(att[h * T * T + t * T] == doctest::Approx(p).epsilon(1e-12).scale(0));
      const double values = 3.0 * (t + 1) * (t + 2) / 2;  // 3 + 6 + .. + 3 (t + 1)
      CHECK(out[t * NH + h] == doctest::Approx(values * p).epsilon(1e-12).scale(0));
    }
  }
  // A sink of -inf is no sink: a very negative one gives the plain attention.
  const std::vector<double> no_sink = {-1e3, -1e3};
  std::vector<double> plain(T * NH), sunk(T * NH);
  attention_forward(plain.data(), att.data(), qkv.data(), T, 1, NH, KVH, HS);
  attention_forward(sunk.data(), att.data(), qkv.data(), T, 1, NH, KVH, HS, 0, {}, no_sink.data());
  CHECK(sunk == plain);
}

TEST_CASE("attention sinks: the sinks' and qkv's gradients match finite differences") {
  const int T = 5, B = 2, NH = 4, KVH = 2, HS = 3, row = (NH + 2 * KVH) * HS;
  const std::vector<double> qkv0 = random_vector(T * B * row, 51),
                            dy = random_vector(T * B * NH * HS, 52);
  // O(1) sinks, distinct per head: p_sink from ~0.05 to ~0.8 over the rows.
  const std::vector<double> sinks0 = {0.9, -0.4, 1.6, -1.2};
  // Plain, windowed (W = 2), and capped and rescaled (Gemma 2's scores): the sink joins each.
  for (const int W : {0, 2}) {
    for (const AttentionScores mod : {AttentionScores{}, AttentionScores{1.0, 1.5}}) {
      CAPTURE(W);
      CAPTURE(mod.softcap);
      auto forward = [&](const std::vector<double>& qkv, const std::vector<double>& sinks) {
        std::vector<double> out(T * B * NH * HS), probs(B * NH * T * T);
        attention_forward(out.data(), probs.data(), qkv.data(), T, B, NH, KVH, HS, W, mod,
                          sinks.data());
        return dot(out, dy);
      };
      std::vector<double> o(T * B * NH * HS), p(B * NH * T * T), scratch(T * T);
      attention_forward(o.data(), p.data(), qkv0.data(), T, B, NH, KVH, HS, W, mod, sinks0.data());
      std::vector<double> dqkv(T * B * row, 0.0), dsinks(NH, 0.0);
      attention_backward(dqkv.data(), scratch.data(), dy.data(), p.data(), qkv0.data(), T, B, NH,
                         KVH, HS, mod, dsinks.data());
      // Tolerance 1e-7: see gradient_check.h.
      CHECK(gradient_error([&](const std::vector<double>& x) { return forward(x, sinks0); }, qkv0,
                           dqkv) < 1e-7);
      CHECK(gradient_error([&](const std::vector<double>& z) { return forward(qkv0, z); }, sinks0,
                           dsinks) < 1e-7);
      for (int h = 0; h < NH; h++) {
        CHECK(std::abs(dsinks[h]) > 1e-3);  // every head's sink has a gradient of its own
      }
    }
  }
}

TEST_CASE("attention sinks: the Eigen path equals the reference; recompute rebuilds the same P") {
  const int T = 7, B = 2, NH = 4, KVH = 2, HS = 8, W = 3, row = (NH + 2 * KVH) * HS;
  const auto qkv = to_float(random_vector(T * B * row, 61));
  const auto dy = to_float(random_vector(T * B * NH * HS, 62));
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (const int window : {0, W}) {
    CAPTURE(window);
    std::vector<float> out(T * B * NH * HS), out_ref(T * B * NH * HS);
    std::vector<float> att(B * NH * T * T), att_ref(B * NH * T * T), again(B * NH * T * T);
    std::vector<float> scratch(T * T);
    attention_forward(out.data(), att.data(), qkv.data(), T, B, NH, KVH, HS, window, {},
                      sinks.data());
    attention_forward_reference(out_ref.data(), att_ref.data(), qkv.data(), T, B, NH, KVH, HS,
                                window, {}, sinks.data());
    CHECK(max_relative_difference(att, att_ref) < 1e-5);  // as the sinkless case
    CHECK(max_relative_difference(out, out_ref) < 1e-5);
    attention_probs_forward(again.data(), qkv.data(), T, B, NH, KVH, HS, window, {}, sinks.data());
    CHECK(again == att);  // selective recompute: the same code, bitwise
    std::vector<float> dqkv(T * B * row, 0.0f), dqkv_ref(T * B * row, 0.0f);
    std::vector<float> dsinks(NH, 0.0f), dsinks_ref(NH, 0.0f);
    attention_backward(dqkv.data(), scratch.data(), dy.data(), att.data(), qkv.data(), T, B, NH,
                       KVH, HS, {}, dsinks.data());
    attention_backward_reference(dqkv_ref.data(), dy.data(), att.data(), qkv.data(), T, B, NH, KVH,
                                 HS, {}, dsinks_ref.data());
    CHECK(max_relative_difference(dqkv, dqkv_ref) < 1e-5);
    CHECK(max_relative_difference(dsinks, dsinks_ref) < 1e-5);
  }
}

}  // namespace
}  // namespace meshplan::executor
