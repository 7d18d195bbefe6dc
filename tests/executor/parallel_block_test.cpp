// The parallel block (model.parallel_residual; GPT-NeoX's gpt_j_residual) on one rank, against
// the sequential block with one branch switched off. With the MLP's fc2 (weights and bias) zero
// the sequential block is x + A(x), A = proj(attn(norm1(x))); with the attention's proj zero its
// MLP reads norm2(x + 0) and it is x + M(x), M = fc2(mlp(norm2(x))). The parallel block is
// x + A(x) + M(x) = seq_A(x) + seq_M(x) - x, and its input gradient likewise
// dout + A'(x)^T dout + M'(x)^T dout. The weight gradients are checked against finite
// differences with the whole model (trainer_test.cpp).
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#include "one_rank.h"
#include "transformer_layer.h"

namespace meshplan::executor {
namespace {

std::vector<float> random_floats(size_t size, double scale, double mean, std::mt19937* generator) {
  std::normal_distribution<double> normal(mean, scale);
  std::vector<float> v(size);
  for (float& x : v) {
    x = static_cast<float>(normal(*generator));
  }
  return v;
}

// One layer's tensors of small_gpt2_model (LayerNorm, GELU, every bias) and views of them, each
// filled by fill(size, mean): the weights around (mean) 1 for the norm gains, else 0.
struct OwnedWeights {
  std::vector<std::vector<float>> storage;
  LayerWeights w;
};

template <typename Fill>
OwnedWeights layer_tensors(const ShardDims& d, Fill fill) {
  OwnedWeights owned;
  owned.storage.reserve(12);
  const auto make = [&](size_t size, double mean = 0.0) {
    owned.storage.push_back(fill(size, mean));
    return owned.storage.back().data();
  };
  const auto C = static_cast<size_t>(d.C);
  const auto QKV = static_cast<size_t>(d.QKV);
  const auto FC1 = static_cast<size_t>(d.FC1);
  owned.w = LayerWeights{.ln1_w = make(C, 1.0),
                         .ln1_b = make(C),
                         .qkv_w = make(QKV * C),
                         .qkv_b = make(QKV),
                         .proj_w = make(C * static_cast<size_t>(d.AO)),
                         .proj_b = make(C),
                         .ln2_w = make(C, 1.0),
                         .ln2_b = make(C),
                         .fc1_w = make(FC1 * C),
                         .fc1_b = make(FC1),
                         .fc2_w = make(C * static_cast<size_t>(d.F)),
                         .fc2_b = make(C),
                         .rope_scaling = {}};
  return owned;
}

struct LayerRun {
  std::vector<float> out;
  std::vector<float> dinp;
};

// Forward and input-gradient backward of one layer of `model` on one rank.
LayerRun run_layer(const models::TransformerConfig& model, const LayerWeights& w,
                   const std::vector<float>& x, const std::vector<float>& dout) {
  testing::OneRank rank(model);
  const ShardDims& d = rank.dims;
  const RankContext ctx = rank.context();
  const size_t rows = static_cast<size_t>(d.N_local) * d.C;
  LayerRun run{std::vector<float>(rows), std::vector<float>(rows, 0.0f)};
  // Gradients accumulate (+=) into zeroed buffers of the weights' shapes.
  OwnedWeights grads =
      layer_tensors(d, [](size_t size, double) { return std::vector<float>(size, 0.0f); });
  LayerActivations acts;
  layer_forward(run.out.data(), &acts, x.data(), w, /*save_probabilities=*/true, ctx);
  layer_backward_input(run.dinp.data(), grads.w, &acts, dout.data(), x.data(), w, ctx);
  layer_backward_weight(grads.w, &acts, ctx);
  return run;
}

double largest_difference(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); i++) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

TEST_CASE("parallel block: x + A(x) + M(x), from the sequential block's two branches") {
  models::TransformerConfig sequential = testing::small_gpt2_model();
  models::TransformerConfig parallel = sequential;
  parallel.parallel_residual = true;
  const ShardDims d = testing::OneRank(sequential).dims;
  std::mt19937 generator(7);
  // Weights of std 0.3 (the C-wide norm parameters and output biases 0.1): both branches matter.
  OwnedWeights weights = layer_tensors(d, [&](size_t size, double mean) {
    return random_floats(size, size == static_cast<size_t>(d.C) ? 0.1 : 0.3, mean, &generator);
  });
  const size_t rows = static_cast<size_t>(d.N) * d.C;
  const std::vector<float> x = random_floats(rows, 1.0, 0.0, &generator);
  const std::vector<float> dout = random_floats(rows, 1.0, 0.0, &generator);

  const LayerRun both = run_layer(parallel, weights.w, x, dout);
  const LayerRun chained = run_layer(sequential, weights.w, x, dout);

  // The attention branch alone: the MLP's output projection and its bias zeroed.
  const std::vector<float> fc2_w(weights.w.fc2_w, weights.w.fc2_w + static_cast<size_t>(d.C) * d.F);
  const std::vector<float> fc2_b(weights.w.fc2_b, weights.w.fc2_b + d.C);
  std::fill(weights.w.fc2_w, weights.w.fc2_w + fc2_w.size(), 0.0f);
  std::fill(weights.w.fc2_b, weights.w.fc2_b + fc2_b.size(), 0.0f);
  const LayerRun attention_only = run_layer(sequential, weights.w, x, dout);
  std::copy(fc2_w.begin(), fc2_w.end(), weights.w.fc2_w);
  std::copy(fc2_b.begin(), fc2_b.end(), weights.w.fc2_b);
  // The MLP branch alone: the attention's output projection and its bias zeroed.
  std::fill(weights.w.proj_w, weights.w.proj_w + static_cast<size_t>(d.C) * d.AO, 0.0f);
  std::fill(weights.w.proj_b, weights.w.proj_b + d.C, 0.0f);
  const LayerRun mlp_only = run_layer(sequential, weights.w, x, dout);

  std::vector<double> expected_out(rows), expected_dinp(rows);
  for (size_t i = 0; i < rows; i++) {
    expected_out[i] = static_cast<double>(attention_only.out[i]) + mlp_only.out[i] - x[i];
    expected_dinp[i] = static_cast<double>(attention_only.dinp[i]) + mlp_only.dinp[i] - dout[i];
  }
  const double out_difference = largest_difference(both.out, expected_out);
  const double dinp_difference = largest_difference(both.dinp, expected_dinp);
  MESSAGE("largest output difference " << out_difference << ", input gradient " << dinp_difference);
  CHECK(out_difference < 1e-4);
  CHECK(dinp_difference < 1e-4);
  // And it is another function than the sequential block: the MLP reads norm2(x), not
  // norm2(x + A(x)).
  std::vector<double> chained_out(chained.out.begin(), chained.out.end());
  CHECK(largest_difference(both.out, chained_out) > 1e-2);
}

}  // namespace
}  // namespace meshplan::executor
