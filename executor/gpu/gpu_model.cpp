#include "gpu/gpu_model.h"

#include <utility>

#include "gpu/cuda_check.h"
#include "gpu/kernels.h"

namespace meshplan::executor::gpu {

namespace {

int64_t rows_by(const ShardDims& d, int64_t columns) {
  return static_cast<int64_t>(d.N) * columns;
}

bool layernorm(const ShardDims& d) {
  return d.model.norm == models::Norm::kLayerNorm;
}

}  // namespace

GpuMicroBatch carve_micro_batch(Carver* carver, const ShardDims& d, int num_layers) {
  GpuMicroBatch mb{};
  mb.tokens = carver->take<int32_t>(d.N, "tokens");
  mb.targets = carver->take<int32_t>(d.N, "targets");
  for (int l = 0; l <= num_layers; l++) {
    mb.residuals.push_back(carver->take<float>(rows_by(d, d.C), "residual"));
  }
  const int64_t stats = layernorm(d) ? d.N : 0;  // RMSNorm saves no mean
  for (int l = 0; l < num_layers; l++) {
    GpuLayerActs a{};
    a.ln1_out = carver->take<float>(rows_by(d, d.C), "ln1_out");
    a.ln1_mean = stats > 0 ? carver->take<float>(stats, "ln1_mean") : nullptr;
    a.ln1_rstd = carver->take<float>(d.N, "ln1_rstd");
    a.qkv = carver->take<float>(rows_by(d, d.QKV), "qkv");
    a.att_out = carver->take<float>(rows_by(d, static_cast<int64_t>(d.NH) * d.HS), "att_out");
    a.lse = carver->take<float>(static_cast<int64_t>(d.B) * d.NH * d.T, "lse");
    a.residual2 = carver->take<float>(rows_by(d, d.C), "residual2");
    a.ln2_out = carver->take<float>(rows_by(d, d.C), "ln2_out");
    a.ln2_mean = stats > 0 ? carver->take<float>(stats, "ln2_mean") : nullptr;
    a.ln2_rstd = carver->take<float>(d.N, "ln2_rstd");
    a.fc1_out = carver->take<float>(rows_by(d, d.FC1), "fc1_out");
    a.act_out = carver->take<float>(rows_by(d, d.F), "act_out");
    mb.layers.push_back(a);
  }
  mb.lnf_out = carver->take<float>(rows_by(d, d.C), "lnf_out");
  mb.lnf_mean = stats > 0 ? carver->take<float>(stats, "lnf_mean") : nullptr;
  mb.lnf_rstd = carver->take<float>(d.N, "lnf_rstd");
  mb.logits = carver->take<float>(rows_by(d, d.V), "logits");
  mb.maxes = carver->take<float>(d.N, "maxes");
  mb.sumexp = carver->take<float>(d.N, "sumexp");
  mb.losses = carver->take<float>(d.N, "losses");
  return mb;
}

GpuScratch carve_scratch(Carver* carver, const ShardDims& d) {
  GpuScratch s{};
  s.d_current = carver->take<float>(rows_by(d, d.C), "d_current");
  s.d_previous = carver->take<float>(rows_by(d, d.C), "d_previous");
  s.d_residual2 = carver->take<float>(rows_by(d, d.C), "d_residual2");
  s.d_x = carver->take<float>(rows_by(d, d.C), "d_x");
  s.d_att_out = carver->take<float>(rows_by(d, static_cast<int64_t>(d.NH) * d.HS), "d_att_out");
  s.d_qkv = carver->take<float>(rows_by(d, d.QKV), "d_qkv");
  s.delta = carver->take<float>(static_cast<int64_t>(d.B) * d.NH * d.T, "delta");
  s.d_act = carver->take<float>(rows_by(d, d.F), "d_act");
  s.d_fc1 = carver->take<float>(rows_by(d, d.FC1), "d_fc1");
  s.d_logits = carver->take<float>(rows_by(d, d.V), "d_logits");
  s.target_logits = carver->take<float>(d.N, "target_logits");
  s.d_losses = carver->take<float>(d.N, "d_losses");
  return s;
}

GpuModel::GpuModel(const ShardDims& dims, const ChunkWeights& weights, const ChunkWeights& grads,
                   const CublasHandle& cublas, const GpuScratch& scratch)
    : d_(dims), w_(weights), g_(grads), cublas_(cublas), s_(scratch) {}

void GpuModel::zero_(float* buffer, int64_t count) const {
  MESHPLAN_CUDA_CHECK(
      cudaMemsetAsync(buffer, 0, static_cast<size_t>(count) * sizeof(float), cublas_.stream()));
}

void GpuModel::norm_forward_(float* out, float* mean, float* rstd, const float* inp,
                             const float* weight, const float* bias) const {
  if (layernorm(d_)) {
    layernorm_forward(out, mean, rstd, inp, weight, bias, d_.N, d_.C, cublas_.stream());
  } else {
    rmsnorm_forward(out, rstd, inp, weight, d_.N, d_.C, cublas_.stream());
  }
}

void GpuModel::norm_backward_(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* weight, const float* mean,
                              const float* rstd) const {
  if (layernorm(d_)) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, d_.N, d_.C,
                       cublas_.stream());
  } else {
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, d_.N, d_.C, cublas_.stream());
  }
}

void GpuModel::forward(GpuMicroBatch& mb) const {
  const cudaStream_t stream = cublas_.stream();
  embedding_forward(mb.residuals[0], mb.tokens, w_.wte, d_.N, d_.C, d_.vocab_start, d_.V, stream);
  if (w_.wpe != nullptr) {
    position_forward(mb.residuals[0], w_.wpe, d_.T, d_.B, d_.C, /*t0=*/0, stream);
  }
  for (size_t l = 0; l < mb.layers.size(); l++) {
    layer_forward_(mb.residuals[l + 1], mb.layers[l], mb.residuals[l], w_.layers[l]);
  }
  head_forward_(mb);
}

void GpuModel::backward(GpuMicroBatch& mb) const {
  head_backward_(mb);  // s_.d_current = the gradient of the last block's output
  const int64_t rows = rows_by(d_, d_.C);
  float* current = s_.d_current;
  float* previous = s_.d_previous;
  for (size_t l = mb.layers.size(); l-- > 0;) {
    zero_(previous, rows);
    layer_backward_(previous, g_.layers[l], mb.layers[l], current, mb.residuals[l], w_.layers[l]);
    std::swap(current, previous);
  }
  const cudaStream_t stream = cublas_.stream();
  if (g_.wpe != nullptr) {
    position_backward(g_.wpe, current, d_.T, d_.B, d_.C, /*t0=*/0, stream);
  }
  embedding_backward(g_.wte, current, mb.tokens, d_.N, d_.C, d_.vocab_start, d_.V, stream);
}

}  // namespace meshplan::executor::gpu
