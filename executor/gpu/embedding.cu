// Token and position embeddings: the device twins of ops/embedding.cpp. The backward scatters
// with atomicAdd (rows repeat when a token repeats), so its sums may differ from the CPU's in
// the last bits; the tests compare within fp32 tolerance.

#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "gpu/launch.h"

namespace meshplan::executor::gpu {

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* inp, const float* wte, int N,
                                         int C, int vocab_start, int V) {
  const int64_t total = static_cast<int64_t>(N) * C;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = k / C;
    const int row = inp[n] - vocab_start;
    out[k] = row >= 0 && row < V ? wte[static_cast<int64_t>(row) * C + k % C] : 0.0f;
  }
}

__global__ void embedding_backward_kernel(float* dwte, const float* dout, const int32_t* inp, int N,
                                          int C, int vocab_start, int V) {
  const int64_t total = static_cast<int64_t>(N) * C;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int row = inp[k / C] - vocab_start;
    if (row >= 0 && row < V) {
      atomicAdd(dwte + static_cast<int64_t>(row) * C + k % C, dout[k]);
    }
  }
}

__global__ void position_forward_kernel(float* out, const float* wpe, int T, int B, int C, int t0) {
  const int64_t total = static_cast<int64_t>(T) * B * C;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = k / (static_cast<int64_t>(B) * C);
    out[k] += wpe[(t0 + t) * C + k % C];
  }
}

// One thread per (t, c): sums the B sequences in order, as the CPU op does (no atomics).
__global__ void position_backward_kernel(float* dwpe, const float* dout, int T, int B, int C,
                                         int t0) {
  const int64_t total = static_cast<int64_t>(T) * C;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = k / C;
    const int64_t c = k % C;
    float sum = dwpe[(t0 + t) * C + c];
    for (int b = 0; b < B; b++) {
      sum += dout[(t * B + b) * C + c];
    }
    dwpe[(t0 + t) * C + c] = sum;
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* inp, const float* wte, int N, int C,
                       int vocab_start, int V, cudaStream_t stream) {
  embedding_forward_kernel<<<grid_for(static_cast<int64_t>(N) * C), kBlockThreads, 0, stream>>>(
      out, inp, wte, N, C, vocab_start, V);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, const float* dout, const int32_t* inp, int N, int C,
                        int vocab_start, int V, cudaStream_t stream) {
  embedding_backward_kernel<<<grid_for(static_cast<int64_t>(N) * C), kBlockThreads, 0, stream>>>(
      dwte, dout, inp, N, C, vocab_start, V);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void position_forward(float* out, const float* wpe, int T, int B, int C, int t0,
                      cudaStream_t stream) {
  position_forward_kernel<<<grid_for(static_cast<int64_t>(T) * B * C), kBlockThreads, 0, stream>>>(
      out, wpe, T, B, C, t0);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void position_backward(float* dwpe, const float* dout, int T, int B, int C, int t0,
                       cudaStream_t stream) {
  position_backward_kernel<<<grid_for(static_cast<int64_t>(T) * C), kBlockThreads, 0, stream>>>(
      dwpe, dout, T, B, C, t0);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace meshplan::executor::gpu
