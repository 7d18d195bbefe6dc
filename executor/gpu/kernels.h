#pragma once
// Device versions of the CPU executor's ops (executor/ops/*.h): the same arguments, shapes,
// row order and += conventions, every pointer on the device, each launched on `stream`. The CPU
// ops are the reference each kernel is tested against (tests/gpu/gpu_kernels_test.cpp).
// fp32 throughout: the equivalence mode of issue 13 §2.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshplan::executor::gpu {

// ---- embedding.cu (ops/embedding.h)
void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C,
                       int vocab_start, int V, cudaStream_t stream);
void embedding_backward(float* dwte, const float* dout, const int32_t* inp, int N, int C,
                        int vocab_start, int V, cudaStream_t stream);
void position_forward(float* out, const float* wpe, int T, int B, int C, int t0,
                      cudaStream_t stream);
void position_backward(float* dwpe, const float* dout, int T, int B, int C, int t0,
                       cudaStream_t stream);

// ---- norms.cu (ops/layernorm.h, ops/rmsnorm.h)
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     cudaStream_t stream);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream);

// ---- elementwise.cu (ops/gelu.h, ops/swiglu.h, ops/residual.h, ops/rope.h, ops/adamw.h)
void gelu_forward(float* out, const float* inp, int N, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream);
void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F,
                     cudaStream_t stream);
/// out (N) = a + b.
void residual_forward(float* out, const float* a, const float* b, int64_t N, cudaStream_t stream);
/// y (N) += x: the residual's backward and gradient accumulation.
void accumulate(float* y, const float* x, int64_t N, cudaStream_t stream);
/// Rotary positions as ops/rope.h over every channel of a head, `base` the layer's rotary
/// base (TransformerConfig::layer_rope_theta).
void rope_forward(float* qk, int T, int B, int num_heads, int row_stride, int HS, double base,
                  cudaStream_t stream);
void rope_backward(float* dqk, int T, int B, int num_heads, int row_stride, int HS, double base,
                   cudaStream_t stream);
/// AdamW as ops/adamw.h, the hyper-parameters passed as numbers (the config struct is host-side).
void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, int64_t t,
                  double learning_rate, double beta1, double beta2, double epsilon,
                  double weight_decay, cudaStream_t stream);

// ---- crossentropy.cu (ops/crossentropy.h)
void crossentropy_local_max(float* maxes, const float* logits, int N, int V, cudaStream_t stream);
void crossentropy_local_target_sumexp(float* target_logits, float* sumexp, const float* logits,
                                      const float* maxes, const int32_t* targets, int N, int V,
                                      int vocab_start, cudaStream_t stream);
void crossentropy_forward(float* losses, const float* maxes, const float* target_logits,
                          const float* sumexp, int N, cudaStream_t stream);
void crossentropy_backward(float* dlogits, const float* dlosses, const float* logits,
                           const float* maxes, const float* sumexp, const int32_t* targets, int N,
                           int V, int vocab_start, cudaStream_t stream);

// ---- flash_attention.cu: causal GQA attention as ops/attention.h computes it, fused in the
// manner of FlashAttention (Dao et al. 2022, Alg. 1 forward, Alg. 2 backward in FlashAttention-2,
// Dao 2023): no (T, T) tensor is ever stored; the forward keeps the log-sum-exp of each query
// row (lse (B, NH, T)) and the backward recomputes the probabilities from it.
void flash_attention_forward(float* out, float* lse, const float* qkv, int T, int B, int NH,
                             int KVH, int HS, cudaStream_t stream);
/// dqkv (T, B, (NH + 2 KVH) HS) +=; delta (B, NH, T) is scratch (rowsum(dout * out)).
void flash_attention_backward(float* dqkv, float* delta, const float* dout, const float* out,
                              const float* lse, const float* qkv, int T, int B, int NH, int KVH,
                              int HS, cudaStream_t stream);

}  // namespace meshplan::executor::gpu
