// LayerNorm and RMSNorm: the device twins of ops/layernorm.cpp and ops/rmsnorm.cpp (formulas and
// citations there). One block per row for the row statistics and the input gradient; the weight
// and bias gradients sum over rows in a second kernel with one thread per channel, in row order,
// so they need no atomics.

#include "gpu/block_reduce.cuh"
#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "gpu/launch.h"
#include "ops/layernorm.h"

namespace meshplan::executor::gpu {

namespace {

constexpr float kEpsilon = static_cast<float>(kNormEpsilon);

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int C) {
  const float* x = inp + static_cast<int64_t>(blockIdx.x) * C;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    sum += x[i];
  }
  const float m = block_sum(sum) / C;
  float variance = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    variance += (x[i] - m) * (x[i] - m);
  }
  const float s = rsqrtf(block_sum(variance) / C + kEpsilon);
  float* y = out + static_cast<int64_t>(blockIdx.x) * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    y[i] = (x[i] - m) * s * weight[i] + bias[i];
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = s;
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = weight * dy (llm.c's layernorm_backward).
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int C) {
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * C;
  const float m = mean[blockIdx.x];
  const float s = rstd[blockIdx.x];
  float g_sum = 0.0f;
  float g_xhat_sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float g = weight[i] * dout[offset + i];
    g_sum += g;
    g_xhat_sum += g * (inp[offset + i] - m) * s;
  }
  const float g_mean = block_sum(g_sum) / C;
  const float g_xhat_mean = block_sum(g_xhat_sum) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float xhat = (inp[offset + i] - m) * s;
    dinp[offset + i] += s * (weight[i] * dout[offset + i] - g_mean - xhat * g_xhat_mean);
  }
}

// dweight_c += sum_n xhat_nc dy_nc (RMSNorm: x rstd dy); dbias_c += sum_n dy_nc when given.
__global__ void norm_backward_weight_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int N, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float weight_sum = 0.0f;
    float bias_sum = 0.0f;
    for (int n = 0; n < N; n++) {
      const int64_t k = static_cast<int64_t>(n) * C + c;
      const float centred = mean != nullptr ? inp[k] - mean[n] : inp[k];
      weight_sum += centred * rstd[n] * dout[k];
      bias_sum += dout[k];
    }
    dweight[c] += weight_sum;
    if (dbias != nullptr) {
      dbias[c] += bias_sum;
    }
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int C) {
  const float* x = inp + static_cast<int64_t>(blockIdx.x) * C;
  float square_sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    square_sum += x[i] * x[i];
  }
  const float s = rsqrtf(block_sum(square_sum) / C + kEpsilon);
  float* y = out + static_cast<int64_t>(blockIdx.x) * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    y[i] = x[i] * s * weight[i];
  }
  if (threadIdx.x == 0) {
    rstd[blockIdx.x] = s;
  }
}

// dx_j = r (g_j - x_j r^2 mean(g x)), g = w * dy (ops/rmsnorm.cpp).
__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                              const float* weight, const float* rstd, int C) {
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * C;
  const float s = rstd[blockIdx.x];
  float g_x_sum = 0.0f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    g_x_sum += weight[i] * dout[offset + i] * inp[offset + i];
  }
  const float g_x_mean = block_sum(g_x_sum) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    dinp[offset + i] += s * (weight[i] * dout[offset + i] - inp[offset + i] * s * s * g_x_mean);
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
  layernorm_forward_kernel<<<N, kBlockThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
  layernorm_backward_input_kernel<<<N, kBlockThreads, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                   rstd, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
  norm_backward_weight_kernel<<<grid_for(C), kBlockThreads, 0, stream>>>(dweight, dbias, dout, inp,
                                                                         mean, rstd, N, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     cudaStream_t stream) {
  rmsnorm_forward_kernel<<<N, kBlockThreads, 0, stream>>>(out, rstd, inp, weight, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  rmsnorm_backward_input_kernel<<<N, kBlockThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
  norm_backward_weight_kernel<<<grid_for(C), kBlockThreads, 0, stream>>>(dweight, nullptr, dout,
                                                                         inp, nullptr, rstd, N, C);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace meshplan::executor::gpu
