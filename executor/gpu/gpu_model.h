#pragma once
// The plan's model on one GPU (tp = pp = 1, fp32): the device twin of transformer_layer.cpp and
// model_chunk.cpp, built from the kernels of kernels.h and the cuBLAS linear layer of linear.h.
// Weights and gradients are the CPU executor's ChunkWeights bound to device buffers (the same
// flat layout and initial values, parameters.h), so a run is comparable with the CPU Trainer's.
// Every gradient op adds (+=) into its output, as the CPU ops do: the callers zero the buffers.
// The backward runs each block's weight gradients (W) right after its input gradients (B).
// Attention is the fused flash kernel: no (T, T) tensor is stored, only lse (B, NH, T).
//
// Shape letters (shard_dims.h): N = T B rows (sequence-first), C channels, NH, KVH, HS, QKV, F,
// FC1, V.

#include <cstdint>
#include <vector>

#include "gpu/device_arena.h"
#include "gpu/linear.h"
#include "parameters.h"
#include "shard_dims.h"

namespace meshplan::executor::gpu {

/// Device buffers from the arena, or (arena nullptr) only their aligned sizes added up: the same
/// code sizes the arena and then carves it, so the two cannot disagree.
class Carver {
 public:
  explicit Carver(DeviceArena* arena) : arena_(arena) {}
  template <typename T>
  T* take(int64_t count, const char* what) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    total_bytes_ += arena_aligned(bytes);
    return arena_ == nullptr ? nullptr
                             : arena_->allocate_array<T>(static_cast<size_t>(count), what);
  }
  size_t total_bytes() const { return total_bytes_; }

 private:
  DeviceArena* arena_;
  size_t total_bytes_ = 0;
};

/// What one block's forward saves for its backward.
struct GpuLayerActs {
  float *ln1_out, *ln1_mean, *ln1_rstd;  // (N, C), (N), (N); mean LayerNorm only
  float* qkv;                            // (N, QKV), after RoPE
  float* att_out;                        // (N, NH HS)
  float* lse;                            // (B, NH, T) log-sum-exp of each query row
  float* residual2;                      // (N, C)
  float *ln2_out, *ln2_mean, *ln2_rstd;  // (N, C), (N), (N)
  float* fc1_out;                        // (N, FC1)
  float* act_out;                        // (N, F)
};

/// One micro-batch in flight: its tokens and every activation its backward reads.
struct GpuMicroBatch {
  int32_t* tokens;                       // (N)
  int32_t* targets;                      // (N)
  std::vector<float*> residuals;         // [L + 1] of (N, C): block inputs, then the last output
  std::vector<GpuLayerActs> layers;      // [L]
  float *lnf_out, *lnf_mean, *lnf_rstd;  // (N, C), (N), (N)
  float* logits;                         // (N, V)
  float *maxes, *sumexp, *losses;        // (N) each
};

/// Working buffers of one backward (or one forward's block outputs), reused by every block.
struct GpuScratch {
  float *d_current, *d_previous;  // (N, C): gradient of a block's output and of its input
  float* d_residual2;             // (N, C)
  float* d_x;                     // (N, C): a norm's output gradient; the forward's sublayer out
  float* d_att_out;               // (N, NH HS)
  float* d_qkv;                   // (N, QKV)
  float* delta;                   // (B, NH, T)
  float* d_act;                   // (N, F)
  float* d_fc1;                   // (N, FC1)
  float* d_logits;                // (N, V)
  float* target_logits;           // (N)
  float* d_losses;                // (N), every element the loss scale
};

GpuMicroBatch carve_micro_batch(Carver* carver, const ShardDims& d, int num_layers);
GpuScratch carve_scratch(Carver* carver, const ShardDims& d);

/// The whole model on one rank: embedding, blocks, final norm, LM head and loss.
class GpuModel {
 public:
  /// `weights` / `grads` point into device buffers; scratch.d_losses holds the loss scale
  /// 1 / (global_batch seq_length) in every element (d(loss) / d(token loss)).
  GpuModel(const ShardDims& dims, const ChunkWeights& weights, const ChunkWeights& grads,
           const CublasHandle& cublas, const GpuScratch& scratch);

  /// mb's activations from mb.tokens; mb.losses (N) the token losses (on the device).
  void forward(GpuMicroBatch& mb) const;
  /// Every parameter gradient += from mb (whose forward ran); mb.targets read.
  void backward(GpuMicroBatch& mb) const;

 private:
  void layer_forward_(float* out, GpuLayerActs& a, const float* inp, const LayerWeights& w) const;
  void layer_backward_(float* dinp, const LayerWeights& g, const GpuLayerActs& a, const float* dout,
                       const float* inp, const LayerWeights& w) const;
  void attention_backward_(float* dinp, const LayerWeights& g, const GpuLayerActs& a,
                           const float* inp, const LayerWeights& w) const;
  void norm_forward_(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                     const float* bias) const;
  void norm_backward_(float* dinp, float* dweight, float* dbias, const float* dout,
                      const float* inp, const float* weight, const float* mean,
                      const float* rstd) const;
  void head_forward_(GpuMicroBatch& mb) const;
  void head_backward_(GpuMicroBatch& mb) const;
  void zero_(float* buffer, int64_t count) const;

  ShardDims d_;
  const ChunkWeights& w_;
  const ChunkWeights& g_;
  const CublasHandle& cublas_;
  GpuScratch s_;
};

}  // namespace meshplan::executor::gpu
