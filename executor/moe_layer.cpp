#include "moe_layer.h"

#include <algorithm>
#include <cmath>

#include "ops/eigen_maps.h"
#include "ops/linear.h"
#include "ops/mlp_activation.h"
#include "ops/router.h"

namespace meshplan::executor {

namespace {

// Local expert `le`'s slice of an expert bias (E_local, width), nullptr for a model without.
template <typename Pointer>
Pointer expert_bias(Pointer bias, int le, int width) {
  return bias != nullptr ? bias + static_cast<int64_t>(le) * width : nullptr;
}

// The load-balancing loss's factor (ops/router.h): coeff E / (k T^2) times the micro-batch's
// loss weight, T = N cp the micro-batch's tokens over the cp ranks sharing its sequences.
double aux_loss_scale(const ShardDims& d) {
  const double tokens = static_cast<double>(d.N) * d.cp;
  return d.aux_loss_weight * d.E / (d.K * tokens * tokens);
}

// The shared experts' fc1 output and activation (what their backward needs) from x (N, C).
void shared_activations_forward(MoeActivations* a, const float* x, const LayerWeights& w,
                                const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  a->shared_fc1 = ctx.tensor(static_cast<int64_t>(d.N) * d.FC1S);
  linear_forward<float>(a->shared_fc1.data(), x, w.shared_fc1_w, nullptr, d.N, d.C, d.FC1S);
  a->shared_act = ctx.tensor(static_cast<int64_t>(d.N) * d.FS);
  mlp_activation_forward(d.model, a->shared_act.data(), a->shared_fc1.data(), d.N, d.FS);
}

// out (N, C) += the shared experts' MLP of x (N, C).
void shared_forward(float* out, MoeActivations* a, const float* x, const LayerWeights& w,
                    const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  shared_activations_forward(a, x, w, ctx);
  Tensor y = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_forward<float>(y.data(), a->shared_act.data(), w.shared_fc2_w, nullptr, d.N, d.FS, d.C);
  VectorMap<float>(out, y.size()) += ConstVectorMap<float>(y.data(), y.size());
}

// dx (N, C) += through the shared experts; keeps dout and their fc1 gradient for W.
void shared_backward_input(float* dx, MoeActivations* a, const float* dout, const LayerWeights& w,
                           const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  a->d_out = copy_rows(ctx, dout, d.N, d.C);
  Tensor d_act = ctx.tensor(static_cast<int64_t>(d.N) * d.FS);
  linear_backward_input(d_act.data(), dout, w.shared_fc2_w, d.N, d.FS, d.C);
  a->d_shared_fc1 = ctx.tensor(static_cast<int64_t>(d.N) * d.FC1S);
  mlp_activation_backward(d.model, a->d_shared_fc1.data(), a->shared_fc1.data(), d_act.data(), d.N,
                          d.FS);
  linear_backward_input(dx, a->d_shared_fc1.data(), w.shared_fc1_w, d.N, d.C, d.FC1S);
  a->shared_fc1.reset();
}

// Copies row i of `src` to row index[i] of `dst` (scatter), or the reverse (gather).
void move_rows(float* dst, const float* src, const std::vector<int>& index, int C, bool scatter) {
  for (size_t i = 0; i < index.size(); i++) {
    const int64_t from = scatter ? static_cast<int64_t>(i) : index[i];
    const int64_t to = scatter ? index[i] : static_cast<int64_t>(i);
    std::copy_n(src + from * C, C, dst + to * C);
  }
}

// The ep exchange's layout from this rank's token counts (E): token_dispatcher.py preprocess
// all-gathers every ep rank's counts; rows to send to and receive from each ep rank, rows of
// each local expert, and where each received row goes in expert-major order.
void plan_exchange(MoeActivations* a, const std::vector<int64_t>& counts, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  std::vector<int64_t> all_counts(static_cast<size_t>(d.ep) * d.E);
  ctx.groups.all_gather_counts(CommGroup::kEp, all_counts.data(), counts.data(), d.E);
  a->send_rows.assign(static_cast<size_t>(d.ep), 0);
  a->recv_rows.assign(static_cast<size_t>(d.ep), 0);
  a->expert_rows.assign(static_cast<size_t>(d.E_local), 0);
  for (int r = 0; r < d.ep; r++) {
    for (int le = 0; le < d.E_local; le++) {
      a->send_rows[r] += counts[static_cast<size_t>(r * d.E_local + le)];
      const int64_t c = all_counts[static_cast<size_t>(r) * d.E + d.expert0 + le];
      a->recv_rows[r] += c;
      a->expert_rows[le] += c;
    }
  }
  // Received rows come source-major (then local expert); the experts read them expert-major
  // (token_dispatcher.py sort_chunks_by_idxs).
  std::vector<int64_t> next(static_cast<size_t>(d.E_local), 0);
  for (int le = 1; le < d.E_local; le++) {
    next[le] = next[le - 1] + a->expert_rows[le - 1];
  }
  a->sorted_row.clear();
  for (int r = 0; r < d.ep; r++) {
    for (int le = 0; le < d.E_local; le++) {
      const int64_t c = all_counts[static_cast<size_t>(r) * d.E + d.expert0 + le];
      for (int64_t i = 0; i < c; i++) {
        a->sorted_row.push_back(static_cast<int>(next[le]++));
      }
    }
  }
}

// Routing, the permutation and the ep counts: everything but the rows themselves.
void route(MoeActivations* a, const float* x, const LayerWeights& w, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor logits = ctx.tensor(static_cast<int64_t>(d.N) * d.E);
  linear_forward<float>(logits.data(), x, w.router_w, w.router_b, d.N, d.C, d.E);
  a->scores = ctx.tensor(static_cast<int64_t>(d.N) * d.E);
  a->probs = ctx.tensor(static_cast<int64_t>(d.N) * d.K);
  a->experts.assign(static_cast<size_t>(d.N) * d.K, 0);
  router_forward(a->probs.data(), a->experts.data(), a->scores.data(), logits.data(), d.N, d.E,
                 d.K);
  if (d.model.router_probs_on_input) {
    // Llama 4 (transformers Llama4TextMoe; Megatron-Core sigmoid scores at top-1, not
    // renormalised): the chosen expert by the largest logit, as above; its weight the sigmoid of
    // that logit, applied to the token going in (validate_model: K = 1).
    for (int n = 0; n < d.N; n++) {
      const float logit =
          logits[static_cast<int64_t>(n) * d.E + a->experts[static_cast<size_t>(n)]];
      a->probs[n] = 1.0f / (1.0f + std::exp(-logit));
    }
  }
  std::vector<int64_t> counts(static_cast<size_t>(d.E), 0);
  for (const int e : a->experts) {
    counts[static_cast<size_t>(e)]++;
  }
  if (ctx.moe != nullptr) {
    ctx.moe->routed_counts.insert(ctx.moe->routed_counts.end(), counts.begin(), counts.end());
  }
  // Permute expert-major, tokens in order within an expert (moe_utils.py permute).
  a->perm_token.clear();
  a->perm_slot.clear();
  for (int e = 0; e < d.E; e++) {
    for (int n = 0; n < d.N; n++) {
      for (int k = 0; k < d.K; k++) {
        if (a->experts[static_cast<size_t>(n) * d.K + k] == e) {
          a->perm_token.push_back(n);
          a->perm_slot.push_back(k);
        }
      }
    }
  }
  if (d.aux_loss_weight > 0 && d.model.router_probs_on_input) {
    // The sigmoid score function's scores for the loss (moe_utils.py
    // compute_routing_scores_for_aux_loss): sigmoid(logits) normalised over the experts.
    a->sigmoids = ctx.tensor(static_cast<int64_t>(d.N) * d.E);
    sigmoid_aux_scores(a->scores.data(), a->sigmoids.data(), logits.data(), d.N, d.E);
  }
  if (d.aux_loss_weight > 0) {
    // Megatron-Core router.py _apply_aux_loss: counts summed over the ranks sharing the
    // sequences (cp here), T the micro-batch's tokens over them.
    std::vector<int64_t> global = counts;
    ctx.groups.all_reduce_counts(CommGroup::kCp, global.data(), d.E);
    a->counts.assign(global.begin(), global.end());
    a->aux_loss =
        load_balancing_loss(a->scores.data(), a->counts.data(), d.N, d.E, aux_loss_scale(d));
  }
  plan_exchange(a, counts, ctx);
}

// (R, C) rows from the token side (permuted order, N K rows) to the experts (expert-major), or
// back: MPI_Alltoallv over ep (a copy when ep = 1) and the chunk sort.
Tensor exchange(const float* rows, const MoeActivations& a, bool to_experts,
                const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int64_t R = static_cast<int64_t>(a.sorted_row.size());
  const int64_t NK = static_cast<int64_t>(a.perm_token.size());
  if (to_experts) {
    Tensor received = ctx.tensor(R * d.C);
    if (d.ep > 1) {
      ctx.groups.all_to_all_v(CommGroup::kEp, received.data(), a.recv_rows, rows, a.send_rows, d.C);
    } else {
      std::copy_n(rows, R * d.C, received.data());
    }
    Tensor sorted = ctx.tensor(R * d.C);
    move_rows(sorted.data(), received.data(), a.sorted_row, d.C, /*scatter=*/true);
    return sorted;
  }
  Tensor unsorted = ctx.tensor(R * d.C);
  move_rows(unsorted.data(), rows, a.sorted_row, d.C, /*scatter=*/false);
  Tensor back = ctx.tensor(NK * d.C);
  if (d.ep > 1) {
    ctx.groups.all_to_all_v(CommGroup::kEp, back.data(), a.send_rows, unsorted.data(), a.recv_rows,
                            d.C);
  } else {
    std::copy_n(unsorted.data(), NK * d.C, back.data());
  }
  return back;
}

}  // namespace

void moe_forward(float* out, MoeActivations* a, const float* x, const LayerWeights& w,
                 const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  route(a, x, w, ctx);
  const int64_t NK = static_cast<int64_t>(a->perm_token.size());
  Tensor permuted = ctx.tensor(NK * d.C);
  for (int64_t j = 0; j < NK; j++) {
    std::copy_n(x + static_cast<int64_t>(a->perm_token[j]) * d.C, d.C, permuted.data() + j * d.C);
  }
  if (d.model.router_probs_on_input) {
    // Llama4TextMoe: routed_in = hidden_states * router_scores; the outputs are summed unscaled.
    a->token_in = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
    std::copy_n(x, static_cast<int64_t>(d.N) * d.C, a->token_in.data());
    for (int64_t j = 0; j < NK; j++) {
      VectorMap<float>(permuted.data() + j * d.C, d.C) *= a->probs[a->perm_token[j]];
    }
  }
  a->expert_in = exchange(permuted.data(), *a, /*to_experts=*/true, ctx);
  permuted.reset();
  const int64_t R = a->expert_in.size() / d.C;
  a->fc1_out = ctx.tensor(R * d.FC1E);
  a->act_out = ctx.tensor(R * d.FE);
  Tensor expert_out = ctx.tensor(R * d.C);
  int64_t row = 0;
  for (int le = 0; le < d.E_local; le++) {
    const int n = static_cast<int>(a->expert_rows[le]);
    const float* w1 = w.expert_fc1_w + static_cast<int64_t>(le) * d.FC1E * d.C;
    const float* w2 = w.expert_fc2_w + static_cast<int64_t>(le) * d.C * d.FE;
    float* h = a->fc1_out.data() + row * d.FC1E;
    float* act = a->act_out.data() + row * d.FE;
    linear_forward<float>(h, a->expert_in.data() + row * d.C, w1,
                          expert_bias(w.expert_fc1_b, le, d.FC1E), n, d.C, d.FC1E);
    mlp_activation_forward(d.model, act, h, n, d.FE);
    // fc2's bias is part of the expert's output, which the combine weights by its probability
    // (transformers GptOssExperts: `@ down_proj + down_proj_bias`, then `* routing_weights`).
    linear_forward<float>(expert_out.data() + row * d.C, act, w2,
                          expert_bias(w.expert_fc2_b, le, d.C), n, d.FE, d.C);
    row += n;
  }
  a->combined = exchange(expert_out.data(), *a, /*to_experts=*/false, ctx);
  // Combine (moe_utils.py unpermute): out_t = sum of prob * row over t's rows, expert order.
  std::fill(out, out + static_cast<int64_t>(d.N) * d.C, 0.0f);
  for (int64_t j = 0; j < NK; j++) {
    const int n = a->perm_token[j];
    const float p = d.model.router_probs_on_input
                        ? 1.0f
                        : a->probs[static_cast<int64_t>(n) * d.K + a->perm_slot[j]];
    VectorMap<float>(out + static_cast<int64_t>(n) * d.C, d.C) +=
        p * ConstVectorMap<float>(a->combined.data() + j * d.C, d.C);
  }
  if (d.FS > 0) {
    shared_forward(out, a, x, w, ctx);
  }
}

void moe_drop_activation(MoeActivations* a) {
  a->act_out.reset();
}

void moe_drop_shared_experts(MoeActivations* a) {
  a->shared_fc1.reset();
  a->shared_act.reset();
}

void moe_recompute_shared_experts(MoeActivations* a, const float* x, const LayerWeights& w,
                                  const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  shared_activations_forward(a, x, w, ctx);
  // The checkpointed module's output, not needed by the backward: computed as Megatron-Core's
  // checkpoint does, then dropped.
  Tensor y = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_forward<float>(y.data(), a->shared_act.data(), w.shared_fc2_w, nullptr, d.N, d.FS, d.C);
}

void moe_recompute_activation(MoeActivations* a, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int64_t R = a->fc1_out.size() / d.FC1E;
  a->act_out = ctx.tensor(R * d.FE);
  // Row by row, as the forward's per-expert calls (the activation is row-wise).
  mlp_activation_forward(d.model, a->act_out.data(), a->fc1_out.data(), static_cast<int>(R), d.FE);
}

void moe_backward_input(float* dx, MoeActivations* a, const float* dout, const LayerWeights& w,
                        const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int64_t NK = static_cast<int64_t>(a->perm_token.size());
  // Combine backward: each row's gradient p dout_t, and each weight's <dout_t, row>.
  Tensor d_combined = ctx.tensor(NK * d.C);
  Tensor d_probs = ctx.tensor(static_cast<int64_t>(d.N) * d.K);
  const bool on_input = d.model.router_probs_on_input;
  for (int64_t j = 0; j < NK; j++) {
    const int n = a->perm_token[j];
    const int64_t slot = static_cast<int64_t>(n) * d.K + a->perm_slot[j];
    const auto g = ConstVectorMap<float>(dout + static_cast<int64_t>(n) * d.C, d.C);
    VectorMap<float>(d_combined.data() + j * d.C, d.C) = (on_input ? 1.0f : a->probs[slot]) * g;
    d_probs[slot] =
        on_input ? 0.0f : g.dot(ConstVectorMap<float>(a->combined.data() + j * d.C, d.C));
  }
  a->combined.reset();
  a->d_expert_out = exchange(d_combined.data(), *a, /*to_experts=*/true, ctx);
  d_combined.reset();
  const int64_t R = a->d_expert_out.size() / d.C;
  a->d_fc1 = ctx.tensor(R * d.FC1E);
  Tensor d_expert_in = ctx.tensor(R * d.C);
  int64_t row = 0;
  for (int le = 0; le < d.E_local; le++) {
    const int n = static_cast<int>(a->expert_rows[le]);
    const float* w1 = w.expert_fc1_w + static_cast<int64_t>(le) * d.FC1E * d.C;
    const float* w2 = w.expert_fc2_w + static_cast<int64_t>(le) * d.C * d.FE;
    Tensor d_act = ctx.tensor(static_cast<int64_t>(n) * d.FE);
    linear_backward_input(d_act.data(), a->d_expert_out.data() + row * d.C, w2, n, d.FE, d.C);
    float* d_h = a->d_fc1.data() + row * d.FC1E;
    const float* h = a->fc1_out.data() + row * d.FC1E;
    mlp_activation_backward(d.model, d_h, h, d_act.data(), n, d.FE);
    linear_backward_input(d_expert_in.data() + row * d.C, d_h, w1, n, d.C, d.FC1E);
    row += n;
  }
  a->fc1_out.reset();
  const Tensor d_permuted = exchange(d_expert_in.data(), *a, /*to_experts=*/false, ctx);
  for (int64_t j = 0; j < NK; j++) {
    const int n = a->perm_token[j];
    const auto g = ConstVectorMap<float>(d_permuted.data() + j * d.C, d.C);
    if (on_input) {
      // routed_in = x p: dx += p g, dp = <g, x> (K = 1: slot n).
      VectorMap<float>(dx + static_cast<int64_t>(n) * d.C, d.C) += a->probs[n] * g;
      d_probs[n] =
          g.dot(ConstVectorMap<float>(a->token_in.data() + static_cast<int64_t>(n) * d.C, d.C));
    } else {
      VectorMap<float>(dx + static_cast<int64_t>(n) * d.C, d.C) += g;
    }
  }
  a->token_in.reset();
  // Router: through the top-k softmax (or Llama 4's sigmoid of the chosen logit), and the
  // load-balancing loss through the full softmax.
  a->d_logits = ctx.tensor(static_cast<int64_t>(d.N) * d.E);
  if (on_input) {
    for (int n = 0; n < d.N; n++) {
      const float p = a->probs[n];
      a->d_logits[static_cast<int64_t>(n) * d.E + a->experts[static_cast<size_t>(n)]] +=
          d_probs[n] * p * (1.0f - p);
    }
  } else {
    router_backward(a->d_logits.data(), d_probs.data(), a->probs.data(), a->experts.data(), d.N,
                    d.E, d.K);
  }
  if (d.aux_loss_weight > 0) {
    if (on_input) {
      load_balancing_backward_sigmoid(a->d_logits.data(), a->scores.data(), a->sigmoids.data(),
                                      a->counts.data(), d.N, d.E, aux_loss_scale(d));
      a->sigmoids.reset();
    } else {
      load_balancing_backward(a->d_logits.data(), a->scores.data(), a->counts.data(), d.N, d.E,
                              aux_loss_scale(d));
    }
    if (ctx.moe != nullptr) {
      ctx.moe->aux_loss += a->aux_loss;  // once per micro-batch, recompute or not
    }
  }
  linear_backward_input(dx, a->d_logits.data(), w.router_w, d.N, d.C, d.E);
  a->scores.reset();
  if (d.FS > 0) {
    shared_backward_input(dx, a, dout, w, ctx);
  }
}

void moe_backward_weight(LayerWeights& grads, MoeActivations* a, const float* x,
                         const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  linear_backward_weight<float>(grads.router_w, grads.router_b, a->d_logits.data(), x, d.N, d.C,
                                d.E);
  int64_t row = 0;
  for (int le = 0; le < d.E_local; le++) {
    const int n = static_cast<int>(a->expert_rows[le]);
    linear_backward_weight<float>(grads.expert_fc2_w + static_cast<int64_t>(le) * d.C * d.FE,
                                  expert_bias(grads.expert_fc2_b, le, d.C),
                                  a->d_expert_out.data() + row * d.C,
                                  a->act_out.data() + row * d.FE, n, d.FE, d.C);
    linear_backward_weight<float>(grads.expert_fc1_w + static_cast<int64_t>(le) * d.FC1E * d.C,
                                  expert_bias(grads.expert_fc1_b, le, d.FC1E),
                                  a->d_fc1.data() + row * d.FC1E, a->expert_in.data() + row * d.C,
                                  n, d.C, d.FC1E);
    row += n;
  }
  if (d.FS > 0) {
    linear_backward_weight<float>(grads.shared_fc2_w, nullptr, a->d_out.data(),
                                  a->shared_act.data(), d.N, d.FS, d.C);
    linear_backward_weight<float>(grads.shared_fc1_w, nullptr, a->d_shared_fc1.data(), x, d.N, d.C,
                                  d.FC1S);
  }
  *a = MoeActivations{};
}

}  // namespace meshplan::executor
