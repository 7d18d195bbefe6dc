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

#include "process_groups.h"
#include "shard_dims.h"
#include "tiny_plan.h"
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

// One layer's weights of small_gpt2_model (LayerNorm, GELU, every bias), random.
struct OwnedWeights {
  std::vector<std::vector<float>> storage;
  LayerWeights w;
};

OwnedWeights random_weights(const ShardDims& d, std::mt19937* generator) {
  OwnedWeights owned;
  owned.storage.reserve(12);
  const auto make = [&](size_t size, double scale, double mean = 0.0) {
    owned.storage.push_back(random_floats(size, scale, mean, generator));
    return owned.storage.back().data();
  };
  const auto C = static_cast<size_t>(d.C);
  owned.w.ln1_w = make(C, 0.1, 1.0);
  owned.w.ln1_b = make(C, 0.1);
  owned.w.qkv_w = make(static_cast<size_t>(d.QKV) * C, 0.3);
  owned.w.qkv_b = make(static_cast<size_t>(d.QKV), 0.1);
  owned.w.proj_w = make(C * static_cast<size_t>(d.AO), 0.3);
  owned.w.proj_b = make(C, 0.1);
  owned.w.ln2_w = make(C, 0.1, 1.0);
  owned.w.ln2_b = make(C, 0.1);
  owned.w.fc1_w = make(static_cast<size_t>(d.FC1) * C, 0.3);
  owned.w.fc1_b = make(static_cast<size_t>(d.FC1), 0.1);
  owned.w.fc2_w = make(C * static_cast<size_t>(d.F), 0.3);
  owned.w.fc2_b = make(C, 0.1);
  return owned;
}

struct LayerRun {
  std::vector<float> out;
  std::vector<float> dinp;
};

// Forward and input-gradient backward of one layer of `model` on one rank.
LayerRun run_layer(const models::TransformerConfig& model, const LayerWeights& w,
                   const std::vector<float>& x, const std::vector<float>& dout) {
  const planner::Plan plan =
      testing::make_plan(model, testing::make_layout(1, 1, 1, /*micro_batch=*/2, 4));
  const ShardDims d = make_shard_dims(plan, 0);
  ProcessGroups groups(plan.layout, false, MPI_COMM_SELF, 60.0);
  MemoryTracker memory;
  const RankContext ctx{d, groups, memory};
  const size_t rows = static_cast<size_t>(d.N_local) * d.C;
  LayerRun run{std::vector<float>(rows), std::vector<float>(rows, 0.0f)};
  // Gradients accumulate (+=) into zeroed buffers of the weights' shapes.
  std::vector<std::vector<float>> grad_storage;
  LayerWeights grads;
  const auto zeros = [&](size_t size) {
    grad_storage.emplace_back(size, 0.0f);
    return grad_storage.back().data();
  };
  grad_storage.reserve(12);
  const auto C = static_cast<size_t>(d.C);
  grads.ln1_w = zeros(C);
  grads.ln1_b = zeros(C);
  grads.qkv_w = zeros(static_cast<size_t>(d.QKV) * C);
  grads.qkv_b = zeros(static_cast<size_t>(d.QKV));
  grads.proj_w = zeros(C * static_cast<size_t>(d.AO));
  grads.proj_b = zeros(C);
  grads.ln2_w = zeros(C);
  grads.ln2_b = zeros(C);
  grads.fc1_w = zeros(static_cast<size_t>(d.FC1) * C);
  grads.fc1_b = zeros(static_cast<size_t>(d.FC1));
  grads.fc2_w = zeros(C * static_cast<size_t>(d.F));
  grads.fc2_b = zeros(C);
  LayerActivations acts;
  layer_forward(run.out.data(), &acts, x.data(), w, /*save_probabilities=*/true, ctx);
  layer_backward_input(run.dinp.data(), grads, &acts, dout.data(), x.data(), w, ctx);
  layer_backward_weight(grads, &acts, ctx);
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
  const planner::Plan plan =
      testing::make_plan(sequential, testing::make_layout(1, 1, 1, /*micro_batch=*/2, 4));
  const ShardDims d = make_shard_dims(plan, 0);
  std::mt19937 generator(7);
  OwnedWeights weights = random_weights(d, &generator);
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
