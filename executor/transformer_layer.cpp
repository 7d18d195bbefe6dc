#include "transformer_layer.h"

#include <cassert>

#include "context_parallel.h"
#include "meshplan/layout.h"
#include "mla_attention.h"
#include "ops/attention.h"
#include "ops/eigen_maps.h"
#include "ops/head_norm.h"
#include "ops/linear.h"
#include "ops/mlp_activation.h"
#include "ops/norm.h"
#include "ops/residual.h"
#include "ops/rope.h"

namespace meshplan::executor {

namespace {

// The softmax's input: scale Q K^T at the model's scale (1 / sqrt(query_pre_attn_scalar) for
// Gemma 2, else 1 / sqrt(head_dim)), capped at attn_logit_softcapping when set.
AttentionScores attention_scores(const models::TransformerConfig& model) {
  return {model.attention_scale(), model.attn_logit_softcapping};
}

// A row-parallel layer's bias is added once, after the reduction, to the residual rows here.
void add_bias_rows(float* x, const float* bias, int rows, int C) {
  if (bias != nullptr) {
    MatrixMap<float>(x, rows, C).rowwise() += ConstVectorMap<float>(bias, C).transpose();
  }
}

// ... and its gradient is the column sum of those rows (partial under sequence parallelism).
void bias_rows_backward(float* dbias, const float* dout, int rows, int C) {
  if (dbias != nullptr) {
    VectorMap<float>(dbias, C) += ConstMatrixMap<float>(dout, rows, C).colwise().sum().transpose();
  }
}

void norm_activations(const RankContext& ctx, Tensor* out, Tensor* mean, Tensor* rstd) {
  const ShardDims& d = ctx.dims;
  *out = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
  *rstd = ctx.tensor(d.N_local);
  if (d.model.norm == models::Norm::kLayerNorm) {
    *mean = ctx.tensor(d.N_local);
  }
}

// sandwich_norm: a branch's reduced output `branch` (N_local, C), kept in *saved as the norm's
// input, normalised into the returned tensor (N_local, C) that the residual add reads.
Tensor post_norm_forward(const RankContext& ctx, Tensor branch, Tensor* saved, Tensor* mean,
                         Tensor* rstd, const float* gain, const float* bias) {
  const ShardDims& d = ctx.dims;
  Tensor out;
  norm_activations(ctx, &out, mean, rstd);
  norm_forward(d.model, out.data(), mean->data(), rstd->data(), branch.data(), gain, bias,
               d.N_local, d.C);
  *saved = std::move(branch);
  return out;
}

// Its backward: the gradient (N_local, C) at the branch output from the residual add's
// gradient dout (N_local, C); the gain's (and bias') gradients +=, partial under sequence
// parallelism as ln1's and ln2's are.
Tensor post_norm_backward(const RankContext& ctx, const float* dout, const Tensor& saved,
                          const Tensor& mean, const Tensor& rstd, const float* weight,
                          float* dweight, float* dbias) {
  const ShardDims& d = ctx.dims;
  Tensor d_branch = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
  norm_backward(d.model, d_branch.data(), dweight, dbias, dout, saved.data(), weight, mean.data(),
                rstd.data(), d.N_local, d.C);
  return d_branch;
}

// Whether the layer normalises its query and key heads: qk_norm's RMSNorm with gains, or Llama 4's
// L2 norm (qk_l2_norm) on its rotary layers (transformers Llama4TextAttention: use_qk_norm and
// use_rope), which is the same kernel with gains of 1.
bool applies_head_norm(const models::TransformerConfig& model, const LayerWeights& w) {
  return model.qk_norm || (model.qk_l2_norm && w.rotary);
}

// The gains the head norm scales by: the layer's (norm_gain), or ones for the L2 norm.
const float* head_norm_gain(const models::TransformerConfig& model, const float* weight, int HS,
                            std::vector<float>* storage) {
  if (model.qk_l2_norm) {
    storage->assign(static_cast<size_t>(HS), 1.0f);
    return storage->data();
  }
  return norm_gain(model, weight, HS, storage);
}

// The standard attention block from its normed input (acts->ln1_out) to acts->att_out (N, AO),
// allocated here: QKV, RoPE, causal attention (the cp ring when cp > 1).
void attention_core_forward(LayerActivations* acts, const LayerWeights& w, bool save_probabilities,
                            const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor gathered;
  const float* x1 = gather_sequence(ctx, acts->ln1_out.data(), &gathered, d.C);
  acts->qkv = ctx.tensor(static_cast<int64_t>(d.N) * d.QKV);
  linear_forward(acts->qkv.data(), x1, w.qkv_w, w.qkv_b, d.N, d.C, d.QKV);
  gathered.reset();
  if (applies_head_norm(d.model, w)) {
    acts->qk_raw = ctx.tensor(static_cast<int64_t>(d.N) * (d.NH + d.KVH) * d.HS);
    acts->qk_rstd = ctx.tensor(static_cast<int64_t>(d.N) * (d.NH + d.KVH));
    std::vector<float> q_storage;
    std::vector<float> k_storage;
    head_norm_forward(acts->qkv.data(), acts->qk_raw.data(), acts->qk_rstd.data(),
                      head_norm_gain(d.model, w.q_head_norm_w, d.HS, &q_storage),
                      head_norm_gain(d.model, w.k_head_norm_w, d.HS, &k_storage), d.N, d.NH, d.KVH,
                      d.HS, d.QKV);
  }
  // Context parallelism: rows sit at the positions of the rank's two chunks.
  const int* positions = d.cp > 1 ? d.positions.data() : nullptr;
  if (w.rotary) {
    rope_forward(acts->qkv.data(), d.T, d.B, d.NH + d.KVH, d.QKV, d.HS, positions,
                 static_cast<int>(d.model.rotary_dim()), w.rope_base, &w.rope_scaling);
  }
  acts->att_out = ctx.tensor(static_cast<int64_t>(d.N) * d.AO);
  Tensor att = ctx.tensor(static_cast<int64_t>(d.B) * d.NH * d.T * d.S);
  if (d.cp > 1) {
    assert(!w.windowed);         // check_cp_layout "cp_window": the ring has no window
    assert(w.sinks == nullptr);  // validate_plan_for_executor: the ring has no sinks
    ring_attention_forward(ctx, acts->att_out.data(), att.data(), acts->qkv.data());
  } else {
    attention_forward(acts->att_out.data(), att.data(), acts->qkv.data(), d.T, d.B, d.NH, d.KVH,
                      d.HS, window_tokens(d, w.windowed), attention_scores(d.model), w.sinks);
  }
  if (save_probabilities) {
    acts->att = std::move(att);
  }
  att.reset();
}

// The standard attention block's B from the heads' output gradient d_att_out (N, AO), freed once
// used, to the gradient of its normed input, reduced to the rank's rows (N_local, C); keeps d_qkv
// for W.
Tensor attention_core_backward(LayerActivations* acts, Tensor d_att_out, LayerWeights& grads,
                               const LayerWeights& w, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  acts->d_qkv = ctx.tensor(static_cast<int64_t>(d.N) * d.QKV);
  if (d.cp > 1) {
    // Selective recompute saved no probabilities: the ring backward rebuilds them.
    ring_attention_backward(ctx, acts->d_qkv.data(), d_att_out.data(),
                            acts->att.empty() ? nullptr : acts->att.data(), acts->qkv.data());
  } else {
    Tensor probabilities;
    const float* att = acts->att.data();
    if (acts->att.empty()) {
      probabilities = ctx.tensor(static_cast<int64_t>(d.B) * d.NH * d.T * d.T);
      attention_probs_forward(probabilities.data(), acts->qkv.data(), d.T, d.B, d.NH, d.KVH, d.HS,
                              window_tokens(d, w.windowed), attention_scores(d.model), w.sinks);
      att = probabilities.data();
    }
    Tensor att_scratch = ctx.tensor(static_cast<int64_t>(d.T) * d.T);
    // The sinks' gradient is whole here: every row of the rank's heads passes through B.
    attention_backward(acts->d_qkv.data(), att_scratch.data(), d_att_out.data(), att,
                       acts->qkv.data(), d.T, d.B, d.NH, d.KVH, d.HS, attention_scores(d.model),
                       grads.sinks);
  }
  d_att_out.reset();
  if (w.rotary) {
    rope_backward(acts->d_qkv.data(), d.T, d.B, d.NH + d.KVH, d.QKV, d.HS,
                  d.cp > 1 ? d.positions.data() : nullptr, static_cast<int>(d.model.rotary_dim()),
                  w.rope_base, &w.rope_scaling);
  }
  if (applies_head_norm(d.model, w)) {
    // The gains' gradients are partial (this rank's heads): GradientSync sums them over tp. The
    // L2 norm has no gain: its gradients go to scratch.
    std::vector<float> q_storage;
    std::vector<float> k_storage;
    std::vector<float> dq_scratch;
    std::vector<float> dk_scratch;
    if (d.model.qk_l2_norm) {
      dq_scratch.assign(static_cast<size_t>(d.HS), 0.0f);
      dk_scratch.assign(static_cast<size_t>(d.HS), 0.0f);
    }
    head_norm_backward(
        acts->d_qkv.data(), d.model.qk_l2_norm ? dq_scratch.data() : grads.q_head_norm_w,
        d.model.qk_l2_norm ? dk_scratch.data() : grads.k_head_norm_w, acts->qk_raw.data(),
        acts->qk_rstd.data(), head_norm_gain(d.model, w.q_head_norm_w, d.HS, &q_storage),
        head_norm_gain(d.model, w.k_head_norm_w, d.HS, &k_storage), d.N, d.NH, d.KVH, d.HS, d.QKV);
  }
  Tensor d_x1 = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_backward_input(d_x1.data(), acts->d_qkv.data(), w.qkv_w, d.N, d.C, d.QKV);
  d_x1 = reduce_partial_sums(ctx, std::move(d_x1), d.C);
  return d_x1;
}

}  // namespace

namespace {

// What W (layer_backward_weight) does not need goes once B is done.
void free_after_backward_input(LayerActivations* acts) {
  acts->att.reset();
  acts->residual2.reset();
  acts->ln1_mean.reset();
  acts->ln1_rstd.reset();
  acts->ln2_mean.reset();
  acts->ln2_rstd.reset();
  acts->fc1_out.reset();
  acts->qkv.reset();
  acts->qk_raw.reset();
  acts->qk_rstd.reset();
  acts->post_attn_in.reset();
  acts->post_attn_mean.reset();
  acts->post_attn_rstd.reset();
  acts->post_mlp_in.reset();
  acts->post_mlp_mean.reset();
  acts->post_mlp_rstd.reset();
}

// The MLP branch's fc1 -> activation -> fc2 on normed rows `x2_local` (N_local, C): fc2's partial
// sums (N, C) before the row-parallel reduction.
Tensor mlp_partial_forward(LayerActivations* acts, const float* x2_local, const LayerWeights& w,
                           const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor gathered;
  const float* x2 = gather_sequence(ctx, x2_local, &gathered, d.C);
  acts->fc1_out = ctx.tensor(static_cast<int64_t>(d.N) * d.FC1);
  linear_forward(acts->fc1_out.data(), x2, w.fc1_w, w.fc1_b, d.N, d.C, d.FC1);
  gathered.reset();
  acts->act_out = ctx.tensor(static_cast<int64_t>(d.N) * d.F);
  mlp_activation_forward(d.model, acts->act_out.data(), acts->fc1_out.data(), d.N, d.F);
  Tensor fc2 = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_forward<float>(fc2.data(), acts->act_out.data(), w.fc2_w, nullptr, d.N, d.F, d.C);
  return fc2;
}

// The MLP branch's backward from fc2's output gradient (N, C, kept in acts->d_fc2): the
// reduced gradient at its normed input (N_local, C).
Tensor mlp_backward_input(LayerActivations* acts, const LayerWeights& w, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor d_act = ctx.tensor(static_cast<int64_t>(d.N) * d.F);
  linear_backward_input(d_act.data(), acts->d_fc2.data(), w.fc2_w, d.N, d.F, d.C);
  acts->d_fc1 = ctx.tensor(static_cast<int64_t>(d.N) * d.FC1);
  mlp_activation_backward(d.model, acts->d_fc1.data(), acts->fc1_out.data(), d_act.data(), d.N,
                          d.F);
  d_act.reset();
  Tensor d_x2 = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_backward_input(d_x2.data(), acts->d_fc1.data(), w.fc1_w, d.N, d.C, d.FC1);
  return reduce_partial_sums(ctx, std::move(d_x2), d.C);
}

// Parallel attention and MLP (model.parallel_residual; GPT-NeoX's gpt_j_residual):
//   out = x + reduce(proj(attn(norm1(x))) + fc2(mlp(norm2(x)))) + proj_b + fc2_b,
// one row-parallel reduction [AR | RS] of the two branches' summed partial sums.
void parallel_layer_forward(float* out, LayerActivations* acts, const float* inp,
                            const LayerWeights& w, bool save_probabilities,
                            const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  norm_activations(ctx, &acts->ln1_out, &acts->ln1_mean, &acts->ln1_rstd);
  norm_forward(d.model, acts->ln1_out.data(), acts->ln1_mean.data(), acts->ln1_rstd.data(), inp,
               w.ln1_w, w.ln1_b, d.N_local, d.C);
  attention_core_forward(acts, w, save_probabilities, ctx);
  Tensor branches = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_forward<float>(branches.data(), acts->att_out.data(), w.proj_w, nullptr, d.N, d.AO, d.C);
  norm_activations(ctx, &acts->ln2_out, &acts->ln2_mean, &acts->ln2_rstd);
  norm_forward(d.model, acts->ln2_out.data(), acts->ln2_mean.data(), acts->ln2_rstd.data(), inp,
               w.ln2_w, w.ln2_b, d.N_local, d.C);
  Tensor fc2 = mlp_partial_forward(acts, acts->ln2_out.data(), w, ctx);
  VectorMap<float>(branches.data(), branches.size()) +=
      ConstVectorMap<float>(fc2.data(), fc2.size());
  fc2.reset();
  branches = reduce_partial_sums(ctx, std::move(branches), d.C);
  add_bias_rows(branches.data(), w.proj_b, d.N_local, d.C);
  add_bias_rows(branches.data(), w.fc2_b, d.N_local, d.C);
  residual_forward(out, inp, branches.data(), d.N_local * d.C);
}

void parallel_layer_backward_input(float* dinp, LayerWeights& grads, LayerActivations* acts,
                                   const float* dout, const float* inp, const LayerWeights& w,
                                   const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  // The skip path, and both row-parallel biases, read dout as it is.
  VectorMap<float>(dinp, static_cast<int64_t>(d.N_local) * d.C) +=
      ConstVectorMap<float>(dout, static_cast<int64_t>(d.N_local) * d.C);
  bias_rows_backward(grads.proj_b, dout, d.N_local, d.C);
  bias_rows_backward(grads.fc2_b, dout, d.N_local, d.C);
  // One all-gather of the output gradient serves both branches (the reduce-scatter's backward).
  Tensor scratch;
  const float* d_branches = gather_sequence(ctx, dout, &scratch, d.C);
  acts->d_proj = copy_rows(ctx, d_branches, d.N, d.C);
  acts->d_fc2 = scratch.empty() ? copy_rows(ctx, d_branches, d.N, d.C) : std::move(scratch);
  Tensor d_x2 = mlp_backward_input(acts, w, ctx);
  norm_backward(d.model, dinp, grads.ln2_w, grads.ln2_b, d_x2.data(), inp, w.ln2_w,
                acts->ln2_mean.data(), acts->ln2_rstd.data(), d.N_local, d.C);
  d_x2.reset();
  Tensor d_att_out = ctx.tensor(static_cast<int64_t>(d.N) * d.AO);
  linear_backward_input(d_att_out.data(), acts->d_proj.data(), w.proj_w, d.N, d.AO, d.C);
  Tensor d_x1 = attention_core_backward(acts, std::move(d_att_out), grads, w, ctx);
  norm_backward(d.model, dinp, grads.ln1_w, grads.ln1_b, d_x1.data(), inp, w.ln1_w,
                acts->ln1_mean.data(), acts->ln1_rstd.data(), d.N_local, d.C);
}

}  // namespace

void layer_forward(float* out, LayerActivations* acts, const float* inp, const LayerWeights& w,
                   bool save_probabilities, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  if (d.model.parallel_residual) {
    parallel_layer_forward(out, acts, inp, w, save_probabilities, ctx);
    return;
  }
  // Attention block.
  norm_activations(ctx, &acts->ln1_out, &acts->ln1_mean, &acts->ln1_rstd);
  norm_forward(d.model, acts->ln1_out.data(), acts->ln1_mean.data(), acts->ln1_rstd.data(), inp,
               w.ln1_w, w.ln1_b, d.N_local, d.C);
  if (d.model.is_mla()) {
    acts->att_out = ctx.tensor(static_cast<int64_t>(d.N) * d.AO);
    mla_forward(acts->att_out.data(), &acts->mla, acts->ln1_out.data(), w, save_probabilities, ctx);
  } else {
    attention_core_forward(acts, w, save_probabilities, ctx);
  }
  Tensor gathered;
  Tensor proj = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
  linear_forward<float>(proj.data(), acts->att_out.data(), w.proj_w, nullptr, d.N, d.AO, d.C);
  proj = reduce_partial_sums(ctx, std::move(proj), d.C);
  add_bias_rows(proj.data(), w.proj_b, d.N_local, d.C);
  if (d.model.sandwich_norm) {
    proj = post_norm_forward(ctx, std::move(proj), &acts->post_attn_in, &acts->post_attn_mean,
                             &acts->post_attn_rstd, w.post_attn_norm_w, w.post_attn_norm_b);
  }
  acts->residual2 = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
  residual_forward(acts->residual2.data(), inp, proj.data(), d.N_local * d.C);
  proj.reset();
  // MLP block.
  norm_activations(ctx, &acts->ln2_out, &acts->ln2_mean, &acts->ln2_rstd);
  norm_forward(d.model, acts->ln2_out.data(), acts->ln2_mean.data(), acts->ln2_rstd.data(),
               acts->residual2.data(), w.ln2_w, w.ln2_b, d.N_local, d.C);
  if (w.router_w != nullptr) {
    Tensor moe_out = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
    moe_forward(moe_out.data(), &acts->moe, acts->ln2_out.data(), w, ctx);
    if (d.model.sandwich_norm) {
      // An MoE block runs at tp 1 (validate_moe_for_executor): its N rows are the N_local.
      moe_out = post_norm_forward(ctx, std::move(moe_out), &acts->post_mlp_in, &acts->post_mlp_mean,
                                  &acts->post_mlp_rstd, w.post_mlp_norm_w, w.post_mlp_norm_b);
    }
    residual_forward(out, acts->residual2.data(), moe_out.data(), d.N_local * d.C);
    return;
  }
  Tensor fc2 = mlp_partial_forward(acts, acts->ln2_out.data(), w, ctx);
  fc2 = reduce_partial_sums(ctx, std::move(fc2), d.C);
  add_bias_rows(fc2.data(), w.fc2_b, d.N_local, d.C);
  if (d.model.sandwich_norm) {
    fc2 = post_norm_forward(ctx, std::move(fc2), &acts->post_mlp_in, &acts->post_mlp_mean,
                            &acts->post_mlp_rstd, w.post_mlp_norm_w, w.post_mlp_norm_b);
  }
  residual_forward(out, acts->residual2.data(), fc2.data(), d.N_local * d.C);
}

void layer_backward_input(float* dinp, LayerWeights& grads, LayerActivations* acts,
                          const float* dout, const float* inp, const LayerWeights& w,
                          const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  if (d.model.parallel_residual) {
    parallel_layer_backward_input(dinp, grads, acts, dout, inp, w, ctx);
    free_after_backward_input(acts);
    return;
  }
  Tensor scratch;
  // MLP block: out = residual2 + fc2(...) + fc2_b, or residual2 + moe(...), the branch through
  // post_mlp_norm with sandwich_norm.
  Tensor d_residual2 = copy_rows(ctx, dout, d.N_local, d.C);
  Tensor d_mlp_storage;
  const float* d_mlp = dout;
  if (d.model.sandwich_norm) {
    d_mlp_storage =
        post_norm_backward(ctx, dout, acts->post_mlp_in, acts->post_mlp_mean, acts->post_mlp_rstd,
                           w.post_mlp_norm_w, grads.post_mlp_norm_w, grads.post_mlp_norm_b);
    d_mlp = d_mlp_storage.data();
  }
  Tensor d_x2;
  if (acts->moe.active()) {
    d_x2 = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
    moe_backward_input(d_x2.data(), &acts->moe, d_mlp, w, ctx);
  } else {
    bias_rows_backward(grads.fc2_b, d_mlp, d.N_local, d.C);
    const float* d_fc2 = gather_sequence(ctx, d_mlp, &scratch, d.C);
    acts->d_fc2 = scratch.empty() ? copy_rows(ctx, d_fc2, d.N, d.C) : std::move(scratch);
    d_x2 = mlp_backward_input(acts, w, ctx);
  }
  norm_backward(d.model, d_residual2.data(), grads.ln2_w, grads.ln2_b, d_x2.data(),
                acts->residual2.data(), w.ln2_w, acts->ln2_mean.data(), acts->ln2_rstd.data(),
                d.N_local, d.C);
  d_x2.reset();
  d_mlp_storage.reset();
  // Attention block: residual2 = inp + proj(...) + proj_b (through post_attn_norm with
  // sandwich_norm).
  // The skip path: dinp += d_residual2; the projection path reads d_residual2 as it is.
  VectorMap<float>(dinp, d_residual2.size()) +=
      ConstVectorMap<float>(d_residual2.data(), d_residual2.size());
  if (d.model.sandwich_norm) {
    d_residual2 = post_norm_backward(ctx, d_residual2.data(), acts->post_attn_in,
                                     acts->post_attn_mean, acts->post_attn_rstd, w.post_attn_norm_w,
                                     grads.post_attn_norm_w, grads.post_attn_norm_b);
  }
  bias_rows_backward(grads.proj_b, d_residual2.data(), d.N_local, d.C);
  const float* d_proj = gather_sequence(ctx, d_residual2.data(), &scratch, d.C);
  acts->d_proj = scratch.empty() ? copy_rows(ctx, d_proj, d.N, d.C) : std::move(scratch);
  d_residual2.reset();
  Tensor d_att_out = ctx.tensor(static_cast<int64_t>(d.N) * d.AO);
  linear_backward_input(d_att_out.data(), acts->d_proj.data(), w.proj_w, d.N, d.AO, d.C);
  Tensor d_x1;
  if (d.model.is_mla()) {
    d_x1 = ctx.tensor(static_cast<int64_t>(d.N_local) * d.C);
    mla_backward_input(d_x1.data(), grads, &acts->mla, d_att_out.data(), w, ctx);
    d_att_out.reset();
  } else {
    d_x1 = attention_core_backward(acts, std::move(d_att_out), grads, w, ctx);
  }
  norm_backward(d.model, dinp, grads.ln1_w, grads.ln1_b, d_x1.data(), inp, w.ln1_w,
                acts->ln1_mean.data(), acts->ln1_rstd.data(), d.N_local, d.C);
  free_after_backward_input(acts);
}

void layer_backward_weight(LayerWeights& grads, LayerActivations* acts, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  Tensor gathered;
  // Under sequence parallelism the column-parallel inputs were saved sharded: gather them again
  // (Korthikanti et al. 2022, Sec. 4.2.2).
  if (d.model.is_mla()) {
    mla_backward_weight(grads, &acts->mla, acts->ln1_out.data(), ctx);
  } else {
    const float* x1 = gather_sequence(ctx, acts->ln1_out.data(), &gathered, d.C);
    linear_backward_weight(grads.qkv_w, grads.qkv_b, acts->d_qkv.data(), x1, d.N, d.C, d.QKV);
    gathered.reset();
  }
  linear_backward_weight<float>(grads.proj_w, nullptr, acts->d_proj.data(), acts->att_out.data(),
                                d.N, d.AO, d.C);
  if (acts->moe.active()) {
    moe_backward_weight(grads, &acts->moe, acts->ln2_out.data(), ctx);
    *acts = LayerActivations{};
    return;
  }
  const float* x2 = gather_sequence(ctx, acts->ln2_out.data(), &gathered, d.C);
  linear_backward_weight(grads.fc1_w, grads.fc1_b, acts->d_fc1.data(), x2, d.N, d.C, d.FC1);
  gathered.reset();
  linear_backward_weight<float>(grads.fc2_w, nullptr, acts->d_fc2.data(), acts->act_out.data(), d.N,
                                d.F, d.C);
  *acts = LayerActivations{};
}

namespace {

// What --recompute-modules drops in this layer (drop_module_activations).
struct DroppedModules {
  bool mlp = false;           // dense MLP with its norm
  bool input_norm = false;    // latent attention's input norm
  bool pre_mlp_norm = false;  // an MoE layer's pre-MLP norm
  bool moe_act = false;
  bool mla_up_proj = false;
  bool shared_experts = false;  // an MoE layer's shared experts' MLP
  bool moe_block = false;       // an MoE layer's whole MoE block
  // Beside moe, the rebuilt block's own nested checkpoints run the experts' activation and the
  // shared experts once more (Megatron-Core experts.py CheckpointWithoutOutput, moe_layer.py
  // tensor_parallel.checkpoint; planner compute_cost.cpp moe_block_recompute).
  bool moe_act_again = false;
  bool shared_experts_again = false;
};

DroppedModules dropped_modules(const LayerWeights& w, uint32_t modules, const ShardDims& d) {
  const bool moe = w.router_w != nullptr;  // as layer_forward tells an MoE block
  const bool mla = d.model.is_mla();
  const auto named = [&](planner::RecomputeModule module) { return (modules & module) != 0; };
  DroppedModules dropped;
  // A parallel block's MLP shares the attention's reduction: the planner refuses mlp there.
  dropped.mlp = named(planner::kRecomputeMlp) && !moe && !d.model.parallel_residual;
  dropped.input_norm = named(planner::kRecomputeLayernorm) && mla;
  dropped.pre_mlp_norm = named(planner::kRecomputeLayernorm) && moe;
  dropped.moe_block = named(planner::kRecomputeMoe) && moe;
  // The whole block's rebuild includes the experts' activation and the shared experts.
  dropped.moe_act = named(planner::kRecomputeMoeAct) && moe && !dropped.moe_block;
  dropped.mla_up_proj = named(planner::kRecomputeMlaUpProj) && mla;
  dropped.shared_experts =
      named(planner::kRecomputeSharedExperts) && moe && d.FS > 0 && !dropped.moe_block;
  dropped.moe_act_again = named(planner::kRecomputeMoeAct) && dropped.moe_block;
  dropped.shared_experts_again =
      named(planner::kRecomputeSharedExperts) && d.FS > 0 && dropped.moe_block;
  return dropped;
}

void drop_norm(Tensor* out, Tensor* mean, Tensor* rstd) {
  out->reset();
  mean->reset();
  rstd->reset();
}

void recompute_norm(const RankContext& ctx, Tensor* out, Tensor* mean, Tensor* rstd,
                    const float* inp, const float* gain, const float* bias) {
  const ShardDims& d = ctx.dims;
  norm_activations(ctx, out, mean, rstd);
  norm_forward(d.model, out->data(), mean->data(), rstd->data(), inp, gain, bias, d.N_local, d.C);
}

}  // namespace

void drop_module_activations(LayerActivations* acts, const LayerWeights& w, uint32_t modules,
                             const RankContext& ctx) {
  const DroppedModules dropped = dropped_modules(w, modules, ctx.dims);
  if (dropped.mlp) {
    drop_norm(&acts->ln2_out, &acts->ln2_mean, &acts->ln2_rstd);
    acts->fc1_out.reset();
    acts->act_out.reset();
  }
  if (dropped.input_norm) {
    drop_norm(&acts->ln1_out, &acts->ln1_mean, &acts->ln1_rstd);
  }
  if (dropped.pre_mlp_norm) {
    drop_norm(&acts->ln2_out, &acts->ln2_mean, &acts->ln2_rstd);
  }
  if (dropped.moe_act) {
    moe_drop_activation(&acts->moe);
  }
  if (dropped.mla_up_proj) {
    mla_drop_up_projections(&acts->mla, ctx);
  }
  if (dropped.shared_experts) {
    moe_drop_shared_experts(&acts->moe);
  }
  if (dropped.moe_block) {
    acts->moe = MoeActivations{};
  }
}

void recompute_module_activations(LayerActivations* acts, const float* inp, const LayerWeights& w,
                                  uint32_t modules, const RankContext& ctx) {
  const ShardDims& d = ctx.dims;
  const DroppedModules dropped = dropped_modules(w, modules, d);
  if (dropped.input_norm) {
    recompute_norm(ctx, &acts->ln1_out, &acts->ln1_mean, &acts->ln1_rstd, inp, w.ln1_w, w.ln1_b);
  }
  if (dropped.mla_up_proj) {
    mla_recompute_up_projections(&acts->mla, acts->ln1_out.data(), w, ctx);
  }
  if (dropped.pre_mlp_norm || dropped.mlp) {
    recompute_norm(ctx, &acts->ln2_out, &acts->ln2_mean, &acts->ln2_rstd, acts->residual2.data(),
                   w.ln2_w, w.ln2_b);
  }
  if (dropped.mlp) {
    // The whole checkpointed MLP, its output reduction included; the output is not needed.
    Tensor fc2 = mlp_partial_forward(acts, acts->ln2_out.data(), w, ctx);
    fc2 = reduce_partial_sums(ctx, std::move(fc2), d.C);
  }
  if (dropped.moe_act) {
    moe_recompute_activation(&acts->moe, ctx);
  }
  if (dropped.shared_experts) {
    moe_recompute_shared_experts(&acts->moe, acts->ln2_out.data(), w, ctx);
  }
  if (dropped.moe_block) {
    // Route, dispatch, experts, combine and shared experts again (their all-to-alls included);
    // the output is not needed.
    Tensor moe_out = ctx.tensor(static_cast<int64_t>(d.N) * d.C);
    moe_forward(moe_out.data(), &acts->moe, acts->ln2_out.data(), w, ctx);
  }
  if (dropped.moe_act_again) {
    moe_drop_activation(&acts->moe);
    moe_recompute_activation(&acts->moe, ctx);
  }
  if (dropped.shared_experts_again) {
    moe_drop_shared_experts(&acts->moe);
    moe_recompute_shared_experts(&acts->moe, acts->ln2_out.data(), w, ctx);
  }
}

}  // namespace meshplan::executor
