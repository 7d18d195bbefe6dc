// GpuModel's blocks and head: the order of transformer_layer.cpp and model_chunk.cpp at tp = 1
//   x -> norm1 -> QKV -> RoPE -> flash attention -> proj -> +x = r
//   r -> norm2 -> fc1 -> GELU | SwiGLU -> fc2 -> +r = out
// With one tp rank the row-parallel biases are ordinary linear biases, so cuBLAS adds them in
// the projection and their gradients are the column sums linear_backward_weight forms.

#include "gpu/cuda_check.h"
#include "gpu/gpu_model.h"
#include "gpu/kernels.h"

namespace meshplan::executor::gpu {

namespace {

bool swiglu(const ShardDims& d) {
  return d.model.activation == models::Activation::kSwiglu;
}

bool rope(const ShardDims& d) {
  return d.model.positions == models::Positions::kRope;
}

}  // namespace

void GpuModel::layer_forward_(float* out, GpuLayerActs& a, const float* inp,
                              const LayerWeights& w) const {
  const cudaStream_t stream = cublas_.stream();
  const int64_t rows = static_cast<int64_t>(d_.N) * d_.C;
  norm_forward_(a.ln1_out, a.ln1_mean, a.ln1_rstd, inp, w.ln1_w, w.ln1_b);
  linear_forward(cublas_, a.qkv, a.ln1_out, w.qkv_w, w.qkv_b, d_.N, d_.C, d_.QKV);
  if (rope(d_)) {
    rope_forward(a.qkv, d_.T, d_.B, d_.NH + d_.KVH, d_.QKV, d_.HS, w.rope_base, stream);
  }
  flash_attention_forward(a.att_out, a.lse, a.qkv, d_.T, d_.B, d_.NH, d_.KVH, d_.HS, stream);
  linear_forward(cublas_, s_.d_x, a.att_out, w.proj_w, w.proj_b, d_.N, d_.NH * d_.HS, d_.C);
  residual_forward(a.residual2, inp, s_.d_x, rows, stream);
  norm_forward_(a.ln2_out, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b);
  linear_forward(cublas_, a.fc1_out, a.ln2_out, w.fc1_w, w.fc1_b, d_.N, d_.C, d_.FC1);
  if (swiglu(d_)) {
    swiglu_forward(a.act_out, a.fc1_out, d_.N, d_.F, stream);
  } else {
    gelu_forward(a.act_out, a.fc1_out, d_.N * d_.F, stream);
  }
  linear_forward(cublas_, s_.d_x, a.act_out, w.fc2_w, w.fc2_b, d_.N, d_.F, d_.C);
  residual_forward(out, a.residual2, s_.d_x, rows, stream);
}

void GpuModel::layer_backward_(float* dinp, const LayerWeights& g, const GpuLayerActs& a,
                               const float* dout, const float* inp, const LayerWeights& w) const {
  const cudaStream_t stream = cublas_.stream();
  const int64_t rows = static_cast<int64_t>(d_.N) * d_.C;
  // MLP block: out = residual2 + fc2(act) + fc2_b.
  MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(s_.d_residual2, dout, static_cast<size_t>(rows) * 4,
                                      cudaMemcpyDeviceToDevice, stream));
  linear_backward_weight(cublas_, g.fc2_w, g.fc2_b, dout, a.act_out, d_.N, d_.F, d_.C);
  zero_(s_.d_act, static_cast<int64_t>(d_.N) * d_.F);
  linear_backward_input(cublas_, s_.d_act, dout, w.fc2_w, d_.N, d_.F, d_.C);
  zero_(s_.d_fc1, static_cast<int64_t>(d_.N) * d_.FC1);
  if (swiglu(d_)) {
    swiglu_backward(s_.d_fc1, a.fc1_out, s_.d_act, d_.N, d_.F, stream);
  } else {
    gelu_backward(s_.d_fc1, a.fc1_out, s_.d_act, d_.N * d_.F, stream);
  }
  linear_backward_weight(cublas_, g.fc1_w, g.fc1_b, s_.d_fc1, a.ln2_out, d_.N, d_.C, d_.FC1);
  zero_(s_.d_x, rows);
  linear_backward_input(cublas_, s_.d_x, s_.d_fc1, w.fc1_w, d_.N, d_.C, d_.FC1);
  norm_backward_(s_.d_residual2, g.ln2_w, g.ln2_b, s_.d_x, a.residual2, w.ln2_w, a.ln2_mean,
                 a.ln2_rstd);
  attention_backward_(dinp, g, a, inp, w);
}

void GpuModel::attention_backward_(float* dinp, const LayerWeights& g, const GpuLayerActs& a,
                                   const float* inp, const LayerWeights& w) const {
  const cudaStream_t stream = cublas_.stream();
  const int64_t rows = static_cast<int64_t>(d_.N) * d_.C;
  const int attention_width = d_.NH * d_.HS;
  // residual2 = inp + proj(att_out) + proj_b: the skip path first.
  accumulate(dinp, s_.d_residual2, rows, stream);
  linear_backward_weight(cublas_, g.proj_w, g.proj_b, s_.d_residual2, a.att_out, d_.N,
                         attention_width, d_.C);
  zero_(s_.d_att_out, static_cast<int64_t>(d_.N) * attention_width);
  linear_backward_input(cublas_, s_.d_att_out, s_.d_residual2, w.proj_w, d_.N, attention_width,
                        d_.C);
  zero_(s_.d_qkv, static_cast<int64_t>(d_.N) * d_.QKV);
  flash_attention_backward(s_.d_qkv, s_.delta, s_.d_att_out, a.att_out, a.lse, a.qkv, d_.T, d_.B,
                           d_.NH, d_.KVH, d_.HS, stream);
  if (rope(d_)) {
    rope_backward(s_.d_qkv, d_.T, d_.B, d_.NH + d_.KVH, d_.QKV, d_.HS, w.rope_base, stream);
  }
  linear_backward_weight(cublas_, g.qkv_w, g.qkv_b, s_.d_qkv, a.ln1_out, d_.N, d_.C, d_.QKV);
  zero_(s_.d_x, rows);
  linear_backward_input(cublas_, s_.d_x, s_.d_qkv, w.qkv_w, d_.N, d_.C, d_.QKV);
  norm_backward_(dinp, g.ln1_w, g.ln1_b, s_.d_x, inp, w.ln1_w, a.ln1_mean, a.ln1_rstd);
}

void GpuModel::head_forward_(GpuMicroBatch& mb) const {
  const cudaStream_t stream = cublas_.stream();
  norm_forward_(mb.lnf_out, mb.lnf_mean, mb.lnf_rstd, mb.residuals.back(), w_.lnf_w, w_.lnf_b);
  linear_forward(cublas_, mb.logits, mb.lnf_out, w_.lm_head, nullptr, d_.N, d_.C, d_.V);
  // Vocab-parallel cross-entropy with one shard: the tp reductions are the identity.
  crossentropy_local_max(mb.maxes, mb.logits, d_.N, d_.V, stream);
  crossentropy_local_target_sumexp(s_.target_logits, mb.sumexp, mb.logits, mb.maxes, mb.targets,
                                   d_.N, d_.V, d_.vocab_start, stream);
  crossentropy_forward(mb.losses, mb.maxes, s_.target_logits, mb.sumexp, d_.N, stream);
}

void GpuModel::head_backward_(GpuMicroBatch& mb) const {
  const cudaStream_t stream = cublas_.stream();
  const int64_t rows = static_cast<int64_t>(d_.N) * d_.C;
  zero_(s_.d_logits, static_cast<int64_t>(d_.N) * d_.V);
  crossentropy_backward(s_.d_logits, s_.d_losses, mb.logits, mb.maxes, mb.sumexp, mb.targets, d_.N,
                        d_.V, d_.vocab_start, stream);
  zero_(s_.d_x, rows);
  linear_backward_input(cublas_, s_.d_x, s_.d_logits, w_.lm_head, d_.N, d_.C, d_.V);
  // Tied embeddings on one rank: g_.lm_head is the wte gradient itself (parameters.h).
  linear_backward_weight(cublas_, g_.lm_head, nullptr, s_.d_logits, mb.lnf_out, d_.N, d_.C, d_.V);
  zero_(s_.d_current, rows);
  norm_backward_(s_.d_current, g_.lnf_w, g_.lnf_b, s_.d_x, mb.residuals.back(), w_.lnf_w,
                 mb.lnf_mean, mb.lnf_rstd);
}

}  // namespace meshplan::executor::gpu
