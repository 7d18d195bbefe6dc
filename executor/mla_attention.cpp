#include "mla_attention.h"

#include <algorithm>

#include "context_parallel.h"
#include "ops/attention.h"
#include "ops/eigen_maps.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace meshplan::executor {

namespace {

// Q K^T's scale, 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim), times YaRN's mscale^2
// (TransformerConfig::attention_scale). MLA has no soft-cap (validate_model).
AttentionScores mla_scores(const ShardDims& d) {
  return {d.model.attention_scale(), 0.0};
}

// Rotates (forward) or turns back (backward) the rotary part of every query head of q (N, QUP),
// half-split pairs as ops/rope.h (Megatron-Core refuses rotary_interleaved with MLA), with the
// layer's base and scaling (LayerWeights::rope_base, rope_scaling).
void rotate_queries(const ShardDims& d, float* q, const LayerWeights& w, bool backward) {
  const int HQ = d.DN + d.DR;
  const int* positions = d.cp > 1 ? d.positions.data() : nullptr;
  for (int h = 0; h < d.NH; h++) {
    float* q_rope = q + static_cast<int64_t>(h) * HQ + d.DN;
    if (backward) {
      rope_backward(q_rope, d.T, d.B, 1, d.QUP, d.DR, positions, 0, w.rope_base, &w.rope_scaling);
    } else {
      rope_forward(q_rope, d.T, d.B, 1, d.QUP, d.DR, positions, 0, w.rope_base, &w.rope_scaling);
    }
  }
}

// The same for the queries and the shared rotary key k_rope (N, DR).
void rotate_queries_and_key(const ShardDims& d, float* q, float* k_rope, const LayerWeights& w,
                            bool backward) {
  rotate_queries(d, q, w, backward);
  const int* positions = d.cp > 1 ? d.positions.data() : nullptr;
  if (backward) {
    rope_backward(k_rope, d.T, d.B, 1, d.DR, d.DR, positions, 0, w.rope_base, &w.rope_scaling);
  } else {
    rope_forward(k_rope, d.T, d.B, 1, d.DR, d.DR, positions, 0, w.rope_base, &w.rope_scaling);
  }
}

// qkv (N, 3 NH HQ) = per head [q | k_nope, k_rope | v, 0]; q (N, QUP), kv (N, KVUP),
// k_rope (N, DR).
void pack_heads(const ShardDims& d, float* qkv, const float* q, const float* kv,
                const float* k_rope) {
  const int HQ = d.DN + d.DR;
  const int row = 3 * d.NH * HQ;
  for (int n = 0; n < d.N; n++) {
    float* out = qkv + static_cast<int64_t>(n) * row;
    std::copy(q + static_cast<int64_t>(n) * d.QUP, q + static_cast<int64_t>(n + 1) * d.QUP, out);
    for (int h = 0; h < d.NH; h++) {
      const float* kv_head = kv + static_cast<int64_t>(n) * d.KVUP + h * (d.DN + d.DV);
      float* k = out + (d.NH + h) * HQ;
      std::copy(kv_head, kv_head + d.DN, k);
      std::copy(k_rope + static_cast<int64_t>(n) * d.DR,
                k_rope + static_cast<int64_t>(n + 1) * d.DR, k + d.DN);
      float* v = out + (2 * d.NH + h) * HQ;
      std::copy(kv_head + d.DN, kv_head + d.DN + d.DV, v);
      std::fill(v + d.DV, v + HQ, 0.0f);
    }
  }
}

// The transpose of pack_heads: d_q (N, QUP), d_kv (N, KVUP) and d_k_rope (N, DR, summed over
// the heads that share it) from d_qkv (N, 3 NH HQ); the padding's gradient is dropped.
void unpack_head_gradients(const ShardDims& d, float* d_q, float* d_kv, float* d_k_rope,
                           const float* d_qkv) {
  const int HQ = d.DN + d.DR;
  const int row = 3 * d.NH * HQ;
  for (int n = 0; n < d.N; n++) {
    const float* in = d_qkv + static_cast<int64_t>(n) * row;
    std::copy(in, in + d.QUP, d_q + static_cast<int64_t>(n) * d.QUP);
    float* k_rope = d_k_rope + static_cast<int64_t>(n) * d.DR;
    for (int h = 0; h < d.NH; h++) {
      float* kv_head = d_kv + static_cast<int64_t>(n) * d.KVUP + h * (d.DN + d.DV);
      const float* k = in + (d.NH + h) * HQ;
      std::copy(k, k + d.DN, kv_head);
      for (int i = 0; i < d.DR; i++) {
        k_rope[i] += k[d.DN + i];
      }
      const float* v = in + (2 * d.NH + h) * HQ;
      std::copy(v, v + d.DV, kv_head + d.DN);
    }
  }
}

// q (N, QUP), before the rotation: the column-parallel up projection of the query latent
// (the normed input x itself when RQ = 0), gathered along the sequence first.
Tensor queries_up(const MlaActivations& a, const float* x, const LayerWeights& w,
                  const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor q = ctx.tensor(static_cast<int64_t>(d.N) * d.QUP);
  Tensor gathered;
  const int width = d.RQ == 0 ? d.C : d.RQ;
  const float* latent = gather_sequence(ctx, d.RQ == 0 ? x : a.q_cn.data(), &gathered, width);
  linear_forward<float>(q.data(), latent, w.q_up_w, nullptr, d.N, width, d.QUP);
  return q;
}

// kv (N, KVUP): the column-parallel up projection of the gathered normed kv latent.
Tensor keys_values_up(const MlaActivations& a, const LayerWeights& w, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor gathered;
  const float* latent = gather_sequence(ctx, a.kv_cn.data(), &gathered, d.RKV);
  Tensor kv = ctx.tensor(static_cast<int64_t>(d.N) * d.KVUP);
  linear_forward<float>(kv.data(), latent, w.kv_up_w, nullptr, d.N, d.RKV, d.KVUP);
  return kv;
}

// q (N, QUP), before the rotation, from the rank's normed input x (N_local, C).
Tensor queries_forward(MlaActivations* a, const float* x, const LayerWeights& w,
                       const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  if (d.RQ > 0) {
    a->q_c = ctx.tensor(static_cast<int64_t>(d.N_local) * d.RQ);
    linear_forward<float>(a->q_c.data(), x, w.q_down_w, nullptr, d.N_local, d.C, d.RQ);
    a->q_cn = ctx.tensor(static_cast<int64_t>(d.N_local) * d.RQ);
    a->q_rstd = ctx.tensor(d.N_local);
    rmsnorm_forward(a->q_cn.data(), a->q_rstd.data(), a->q_c.data(), w.q_norm_w, d.N_local, d.RQ);
  }
  return queries_up(*a, x, w, ctx);
}

}  // namespace

void mla_forward(float* att_out, MlaActivations* a, const float* x, const LayerWeights& w,
                 bool save_probabilities, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int HQ = d.DN + d.DR;
  Tensor q = queries_forward(a, x, w, ctx);
  // The duplicated down projection on the rank's rows: rows [0, RKV) of W_DKV give the latent,
  // rows [RKV, RKV + DR) the rotary key.
  a->kv_c = ctx.tensor(static_cast<int64_t>(d.N_local) * d.RKV);
  linear_forward<float>(a->kv_c.data(), x, w.kv_down_w, nullptr, d.N_local, d.C, d.RKV);
  Tensor k_rope_local = ctx.tensor(static_cast<int64_t>(d.N_local) * d.DR);
  linear_forward<float>(k_rope_local.data(), x, w.kv_down_w + static_cast<int64_t>(d.RKV) * d.C,
                        nullptr, d.N_local, d.C, d.DR);
  a->kv_cn = ctx.tensor(static_cast<int64_t>(d.N_local) * d.RKV);
  a->kv_rstd = ctx.tensor(d.N_local);
  rmsnorm_forward(a->kv_cn.data(), a->kv_rstd.data(), a->kv_c.data(), w.kv_norm_w, d.N_local,
                  d.RKV);
  Tensor kv = keys_values_up(*a, w, ctx);
  Tensor gathered;
  const float* k_rope_full = gather_sequence(ctx, k_rope_local.data(), &gathered, d.DR);
  Tensor k_rope = copy_rows(ctx, k_rope_full, d.N, d.DR);
  gathered.reset();
  k_rope_local.reset();
  rotate_queries_and_key(d, q.data(), k_rope.data(), w, /*backward=*/false);
  a->qkv = ctx.tensor(static_cast<int64_t>(d.N) * 3 * d.NH * HQ);
  pack_heads(d, a->qkv.data(), q.data(), kv.data(), k_rope.data());
  q.reset();
  kv.reset();
  k_rope.reset();
  Tensor padded = ctx.tensor(static_cast<int64_t>(d.N) * d.NH * HQ);
  Tensor att = ctx.tensor(static_cast<int64_t>(d.B) * d.NH * d.T * d.S);
  if (d.cp > 1) {
    // The packed rows are the dense block's fused QKV layout (KVH = NH, HS = HQ): the same ring.
    ring_attention_forward(ctx, padded.data(), att.data(), a->qkv.data());
  } else {
    attention_forward(padded.data(), att.data(), a->qkv.data(), d.T, d.B, d.NH, d.NH, HQ,
                      window_tokens(d, w.windowed), mla_scores(d));
  }
  for (int n = 0; n < d.N; n++) {
    for (int h = 0; h < d.NH; h++) {
      const float* head = padded.data() + (static_cast<int64_t>(n) * d.NH + h) * HQ;
      std::copy(head, head + d.DV, att_out + static_cast<int64_t>(n) * d.AO + h * d.DV);
    }
  }
  if (save_probabilities) {
    a->att = std::move(att);
  }
}

void mla_drop_up_projections(MlaActivations* a, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int HQ = d.DN + d.DR;
  const int row = 3 * d.NH * HQ;
  // Every key head carries the same rotated rotary key (pack_heads): keep head 0's.
  a->k_rope = ctx.tensor(static_cast<int64_t>(d.N) * d.DR);
  for (int n = 0; n < d.N; n++) {
    const float* key = a->qkv.data() + static_cast<int64_t>(n) * row + d.NH * HQ + d.DN;
    std::copy(key, key + d.DR, a->k_rope.data() + static_cast<int64_t>(n) * d.DR);
  }
  a->qkv.reset();
}

void mla_recompute_up_projections(MlaActivations* a, const float* x, const LayerWeights& w,
                                  const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor q = queries_up(*a, x, w, ctx);
  Tensor kv = keys_values_up(*a, w, ctx);
  rotate_queries(d, q.data(), w, /*backward=*/false);
  a->qkv = ctx.tensor(static_cast<int64_t>(d.N) * 3 * d.NH * (d.DN + d.DR));
  pack_heads(d, a->qkv.data(), q.data(), kv.data(), a->k_rope.data());
  a->k_rope.reset();
}

namespace {

// d_qkv (N, 3 NH HQ) from the heads' output gradient d_att_out (N, AO), through the attention
// core (probabilities recomputed when the forward dropped them, under the layer's window W).
Tensor attention_core_backward(MlaActivations* a, const float* d_att_out, int W,
                               const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const int HQ = d.DN + d.DR;
  Tensor padded = ctx.tensor(static_cast<int64_t>(d.N) * d.NH * HQ);
  for (int n = 0; n < d.N; n++) {
    for (int h = 0; h < d.NH; h++) {
      const float* head = d_att_out + static_cast<int64_t>(n) * d.AO + h * d.DV;
      std::copy(head, head + d.DV, padded.data() + (static_cast<int64_t>(n) * d.NH + h) * HQ);
    }
  }
  Tensor d_qkv = ctx.tensor(static_cast<int64_t>(d.N) * 3 * d.NH * HQ);
  if (d.cp > 1) {
    ring_attention_backward(ctx, d_qkv.data(), padded.data(),
                            a->att.empty() ? nullptr : a->att.data(), a->qkv.data());
    return d_qkv;
  }
  Tensor probabilities;
  const float* att = a->att.data();
  if (a->att.empty()) {
    probabilities = ctx.tensor(static_cast<int64_t>(d.B) * d.NH * d.T * d.T);
    attention_probs_forward(probabilities.data(), a->qkv.data(), d.T, d.B, d.NH, d.NH, HQ, W,
                            mla_scores(d));
    att = probabilities.data();
  }
  Tensor scratch = ctx.tensor(static_cast<int64_t>(d.T) * d.T);
  attention_backward(d_qkv.data(), scratch.data(), padded.data(), att, a->qkv.data(), d.T, d.B,
                     d.NH, d.NH, HQ, mla_scores(d));
  return d_qkv;
}

// The down-projected side of B: dx (N_local, C) += through a latent norm and its rows of a
// duplicated down projection. d_latent (N, R) partial over tp is reduced to the rank's rows
// first; the result d_c (N_local, R), the norm's input gradient, is what W needs.
Tensor latent_backward_input(float* dx, float* d_gain, Tensor d_latent, const float* c,
                             const float* gain, const float* rstd, const float* w_down, int R,
                             const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  d_latent = reduce_partial_sums(ctx, std::move(d_latent), R);
  Tensor d_c = ctx.tensor(static_cast<int64_t>(d.N_local) * R);
  rmsnorm_backward(d_c.data(), d_gain, d_latent.data(), c, gain, rstd, d.N_local, R);
  linear_backward_input(dx, d_c.data(), w_down, d.N_local, d.C, R);
  return d_c;
}

}  // namespace

void mla_backward_input(float* dx, LayerWeights& grads, MlaActivations* a, const float* d_att_out,
                        const LayerWeights& w, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor d_qkv = attention_core_backward(a, d_att_out, window_tokens(d, w.windowed), ctx);
  a->att.reset();
  a->d_q = ctx.tensor(static_cast<int64_t>(d.N) * d.QUP);
  a->d_kv = ctx.tensor(static_cast<int64_t>(d.N) * d.KVUP);
  Tensor d_k_rope = ctx.tensor(static_cast<int64_t>(d.N) * d.DR);
  unpack_head_gradients(d, a->d_q.data(), a->d_kv.data(), d_k_rope.data(), d_qkv.data());
  d_qkv.reset();
  a->qkv.reset();
  rotate_queries_and_key(d, a->d_q.data(), d_k_rope.data(), w, /*backward=*/true);
  // Queries.
  if (d.RQ == 0) {
    Tensor d_x = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
    linear_backward_input(d_x.data(), a->d_q.data(), w.q_up_w, d.N, d.C, d.QUP);
    d_x = reduce_partial_sums(ctx, std::move(d_x), d.C);
    VectorMap<float>(dx, d_x.size()) += ConstVectorMap<float>(d_x.data(), d_x.size());
  } else {
    Tensor d_latent = ctx.tensor(static_cast<int64_t>(d.N) * d.RQ);
    linear_backward_input(d_latent.data(), a->d_q.data(), w.q_up_w, d.N, d.RQ, d.QUP);
    a->d_q_c = latent_backward_input(dx, grads.q_norm_w, std::move(d_latent), a->q_c.data(),
                                     w.q_norm_w, a->q_rstd.data(), w.q_down_w, d.RQ, ctx);
  }
  // Keys and values: the latent, then the rotary key, whose gradient sums over every head.
  Tensor d_latent = ctx.tensor(static_cast<int64_t>(d.N) * d.RKV);
  linear_backward_input(d_latent.data(), a->d_kv.data(), w.kv_up_w, d.N, d.RKV, d.KVUP);
  a->d_kv_c = latent_backward_input(dx, grads.kv_norm_w, std::move(d_latent), a->kv_c.data(),
                                    w.kv_norm_w, a->kv_rstd.data(), w.kv_down_w, d.RKV, ctx);
  a->d_k_rope = reduce_partial_sums(ctx, std::move(d_k_rope), d.DR);
  linear_backward_input(dx, a->d_k_rope.data(), w.kv_down_w + static_cast<int64_t>(d.RKV) * d.C,
                        d.N_local, d.C, d.DR);
  a->q_c.reset();
  a->q_rstd.reset();
  a->kv_c.reset();
  a->kv_rstd.reset();
}

void mla_backward_weight(LayerWeights& grads, MlaActivations* a, const float* x,
                         const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor gathered;
  // Under sequence parallelism the up projections' inputs were saved sharded: gather them again
  // (Korthikanti et al. 2022, Sec. 4.2.2), as for the dense block's column-parallel layers.
  if (d.RQ == 0) {
    const float* x_full = gather_sequence(ctx, x, &gathered, d.C);
    linear_backward_weight<float>(grads.q_up_w, nullptr, a->d_q.data(), x_full, d.N, d.C, d.QUP);
  } else {
    const float* latent = gather_sequence(ctx, a->q_cn.data(), &gathered, d.RQ);
    linear_backward_weight<float>(grads.q_up_w, nullptr, a->d_q.data(), latent, d.N, d.RQ, d.QUP);
    gathered.reset();
    linear_backward_weight<float>(grads.q_down_w, nullptr, a->d_q_c.data(), x, d.N_local, d.C,
                                  d.RQ);
  }
  gathered.reset();
  const float* latent = gather_sequence(ctx, a->kv_cn.data(), &gathered, d.RKV);
  linear_backward_weight<float>(grads.kv_up_w, nullptr, a->d_kv.data(), latent, d.N, d.RKV, d.KVUP);
  gathered.reset();
  linear_backward_weight<float>(grads.kv_down_w, nullptr, a->d_kv_c.data(), x, d.N_local, d.C,
                                d.RKV);
  linear_backward_weight<float>(grads.kv_down_w + static_cast<int64_t>(d.RKV) * d.C, nullptr,
                                a->d_k_rope.data(), x, d.N_local, d.C, d.DR);
  *a = MlaActivations{};
}

}  // namespace meshplan::executor
