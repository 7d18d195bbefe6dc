// Element-wise kernels: GELU, SwiGLU, residual, RoPE and AdamW, each the device twin of its CPU
// op in executor/ops (same formulas and citations there).

#include <cmath>

#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "gpu/launch.h"
#include "ops/rope.h"

namespace meshplan::executor::gpu {

namespace {

// sqrt(2 / pi) and the cubic coefficient, Hendrycks and Gimpel 2016, Sec. 2 (ops/gelu.cpp).
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float x = inp[i];
    const float tanh_u = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float sech2 = 1.0f - tanh_u * tanh_u;
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += (0.5f * (1.0f + tanh_u) + 0.5f * x * sech2 * du) * dout[i];
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* inp, int n, int f) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * f; i += gridDim.x * blockDim.x) {
    const int row = i / f;
    const int column = i % f;
    const float gate = inp[static_cast<int64_t>(row) * 2 * f + column];
    const float up = inp[static_cast<int64_t>(row) * 2 * f + f + column];
    out[i] = gate / (1.0f + expf(-gate)) * up;
  }
}

__global__ void swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, int n,
                                       int f) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n * f; i += gridDim.x * blockDim.x) {
    const int64_t gate_index = static_cast<int64_t>(i / f) * 2 * f + i % f;
    const float gate = inp[gate_index];
    const float up = inp[gate_index + f];
    const float sigmoid = 1.0f / (1.0f + expf(-gate));
    // d silu(x)/dx = s (1 + x (1 - s)) with s = sigmoid(x).
    dinp[gate_index] += dout[i] * up * sigmoid * (1.0f + gate * (1.0f - sigmoid));
    dinp[gate_index + f] += dout[i] * gate * sigmoid;
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void accumulate_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

// One thread per (row, head, pair i): rotates (x[i], x[i + HS/2]) by sign * t base^(-2i/HS);
// the angle in double as the CPU op computes it, then rounded once, so both agree to fp32.
__global__ void rope_kernel(float* qk, int T, int B, int num_heads, int row_stride, int HS,
                            double base, double sign) {
  const int half = HS / 2;
  const int64_t total = static_cast<int64_t>(T) * B * num_heads * half;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % half);
    const int head = static_cast<int>((k / half) % num_heads);
    const int64_t row = k / (static_cast<int64_t>(half) * num_heads);  // t * B + b
    const int t = static_cast<int>(row / B);
    const double angle = t * pow(base, -2.0 * i / HS);
    const float cosine = static_cast<float>(cos(angle));
    const float sine = static_cast<float>(sign * sin(angle));
    float* x = qk + row * row_stride + static_cast<int64_t>(head) * HS;
    const float x1 = x[i];
    const float x2 = x[i + half];
    x[i] = x1 * cosine - x2 * sine;
    x[i + half] = x1 * sine + x2 * cosine;
  }
}

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, int64_t n,
                             float beta1, float beta2, float correction1, float correction2,
                             float learning_rate, float epsilon, float weight_decay) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float m_hat = m[i] / correction1;
    const float v_hat = v[i] / correction2;
    params[i] -= learning_rate * (m_hat / (sqrtf(v_hat) + epsilon) + weight_decay * params[i]);
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int N, cudaStream_t stream) {
  gelu_forward_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(out, inp, N);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int N, cudaStream_t stream) {
  gelu_backward_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(dinp, inp, dout, N);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  swiglu_forward_kernel<<<grid_for(static_cast<int64_t>(N) * F), kBlockThreads, 0, stream>>>(
      out, inp, N, F);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F,
                     cudaStream_t stream) {
  swiglu_backward_kernel<<<grid_for(static_cast<int64_t>(N) * F), kBlockThreads, 0, stream>>>(
      dinp, inp, dout, N, F);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void residual_forward(float* out, const float* a, const float* b, int64_t N, cudaStream_t stream) {
  residual_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(out, a, b, N);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void accumulate(float* y, const float* x, int64_t N, cudaStream_t stream) {
  accumulate_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(y, x, N);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void rope_forward(float* qk, int T, int B, int num_heads, int row_stride, int HS, double base,
                  cudaStream_t stream) {
  const int64_t pairs = static_cast<int64_t>(T) * B * num_heads * (HS / 2);
  rope_kernel<<<grid_for(pairs), kBlockThreads, 0, stream>>>(qk, T, B, num_heads, row_stride, HS,
                                                             base, 1.0);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void rope_backward(float* dqk, int T, int B, int num_heads, int row_stride, int HS, double base,
                   cudaStream_t stream) {
  // The rotation is orthogonal: its transpose is the rotation by the opposite angle.
  const int64_t pairs = static_cast<int64_t>(T) * B * num_heads * (HS / 2);
  rope_kernel<<<grid_for(pairs), kBlockThreads, 0, stream>>>(dqk, T, B, num_heads, row_stride, HS,
                                                             base, -1.0);
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

void adamw_update(float* params, float* m, float* v, const float* grads, int64_t N, int64_t t,
                  double learning_rate, double beta1, double beta2, double epsilon,
                  double weight_decay, cudaStream_t stream) {
  // Bias corrections on the host in double, rounded once, as ops/adamw.cpp does.
  const float correction1 = static_cast<float>(1.0 - std::pow(beta1, t));
  const float correction2 = static_cast<float>(1.0 - std::pow(beta2, t));
  adamw_kernel<<<grid_for(N), kBlockThreads, 0, stream>>>(
      params, m, v, grads, N, static_cast<float>(beta1), static_cast<float>(beta2), correction1,
      correction2, static_cast<float>(learning_rate), static_cast<float>(epsilon),
      static_cast<float>(weight_decay));
  MESHPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace meshplan::executor::gpu
