// Vocab-parallel cross-entropy: the device twins of ops/crossentropy.cpp (Megatron-LM's
// vocab_parallel_cross_entropy; the steps and citation are there). One block per row; the
// all-reduces over tp between the steps are the caller's.

#include "gpu/block_reduce.cuh"
#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "gpu/launch.h"

namespace meshplan::executor::gpu {

namespace {

__global__ void local_max_kernel(float* maxes, const float* logits, int V) {
  const float* z = logits + static_cast<int64_t>(blockIdx.x) * V;
  float maximum = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    maximum = fmaxf(maximum, z[v]);
  }
  maximum = block_max(maximum);
  if (threadIdx.x == 0) {
    maxes[blockIdx.x] = maximum;
  }
}

__global__ void local_target_sumexp_kernel(float* target_logits, float* sumexp, const float* logits,
                                           const float* maxes, const int32_t* targets, int V,
                                           int vocab_start) {
  const int64_t n = blockIdx.x;
  const float* z = logits + n * V;
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    sum += expf(z[v] - maxes[n]);
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    const int target = targets[n] - vocab_start;
    target_logits[n] = target >= 0 && target < V ? z[target] : 0.0f;
    sumexp[n] = sum;
  }
}

__global__ void forward_kernel(float* losses, const float* maxes, const float* target_logits,
                               const float* sumexp, int N) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    losses[n] = logf(sumexp[n]) + maxes[n] - target_logits[n];
  }
}

__global__ void backward_kernel(float* dlogits, const float* dlosses, const float* logits,
                                const float* maxes, const float* sumexp, const int32_t* targets,
                                int V, int vocab_start) {
  const int64_t n = blockIdx.x;
  const float inverse = 1.0f / sumexp[n];
  const int target = targets[n] - vocab_start;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float probability = expf(logits[n * V + v] - maxes[n]) * inverse;
    dlogits[n * V + v] += dlosses[n] * (probability - (v == target ? 1.0f : 0.0f));
  }
}

}  // namespace

void crossentropy_local_max(float* maxes, const float* logits, int N, int V, cudaStream_t stream) {
  local_max_kernel<<<N, kBlockThreads, 0, stream>>>(maxes, logits, V);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void crossentropy_local_target_sumexp(float* target_logits, float* sumexp, const float* logits,
                                      const float* maxes, const int32_t* targets, int N, int V,
                                      int vocab_start, cudaStream_t stream) {
  local_target_sumexp_kernel<<<N, kBlockThreads, 0, stream>>>(target_logits, sumexp, logits, maxes,
                                                              targets, V, vocab_start);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void crossentropy_forward(float* losses, const float* maxes, const float* target_logits,
                          const float* sumexp, int N, cudaStream_t stream) {
  forward_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(losses, maxes, target_logits, sumexp,
                                                            N);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(float* dlogits, const float* dlosses, const float* logits,
                           const float* maxes, const float* sumexp, const int32_t* targets, int N,
                           int V, int vocab_start, cudaStream_t stream) {
  backward_kernel<<<N, kBlockThreads, 0, stream>>>(dlogits, dlosses, logits, maxes, sumexp, targets,
                                                   V, vocab_start);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace meshplan::executor::gpu
