#include "gpu/cuda_check.h"
#include "gpu/launch.h"
#include "gpu/linear.h"

namespace meshplan::executor::gpu {

namespace {

__global__ void add_bias_kernel(float* out, const float* bias, int64_t N, int OC) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < N * OC;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[k] += bias[k % OC];
  }
}

// One thread per output channel, summing the rows in order (deterministic, no atomics).
__global__ void bias_grad_kernel(float* dbias, const float* dout, int N, int OC) {
  for (int oc = blockIdx.x * blockDim.x + threadIdx.x; oc < OC; oc += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int n = 0; n < N; n++) {
      sum += dout[static_cast<int64_t>(n) * OC + oc];
    }
    dbias[oc] += sum;
  }
}

}  // namespace

CublasHandle::CublasHandle(cudaStream_t stream) : stream_(stream) {
  MESHPLAN_CUBLAS_CHECK(cublasCreate(&handle_));
  MESHPLAN_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  MESHPLAN_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}

CublasHandle::~CublasHandle() {
  cublasDestroy(handle_);
}

void linear_forward(const CublasHandle& cublas, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC) {
  // Column-major: out^T (OC, N) = W (OC, C) inp^T (C, N); W is stored as column-major (C, OC).
  const float one = 1.0f;
  const float zero = 0.0f;
  MESHPLAN_CUBLAS_CHECK(cublasSgemm(cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight,
                                    C, inp, C, &zero, out, OC));
  if (bias != nullptr) {
    add_bias_kernel<<<grid_for(static_cast<int64_t>(N) * OC), kBlockThreads, 0, cublas.stream()>>>(
        out, bias, N, OC);
    MESHPLAN_CUDA_CHECK_LAUNCH();
  }
}

void linear_backward_input(const CublasHandle& cublas, float* dinp, const float* dout,
                           const float* weight, int N, int C, int OC) {
  // Column-major: dinp^T (C, N) += W^T (C, OC) dout^T (OC, N).
  const float one = 1.0f;
  MESHPLAN_CUBLAS_CHECK(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight,
                                    C, dout, OC, &one, dinp, C));
}

void linear_backward_weight(const CublasHandle& cublas, float* dweight, float* dbias,
                            const float* dout, const float* inp, int N, int C, int OC) {
  // Column-major: dW^T (C, OC) += inp^T (C, N) dout (N, OC).
  const float one = 1.0f;
  MESHPLAN_CUBLAS_CHECK(cublasSgemm(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C,
                                    dout, OC, &one, dweight, C));
  if (dbias != nullptr) {
    bias_grad_kernel<<<grid_for(OC), kBlockThreads, 0, cublas.stream()>>>(dbias, dout, N, OC);
    MESHPLAN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace meshplan::executor::gpu
