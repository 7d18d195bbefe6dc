#pragma once
// Linear layer on the GPU, out = inp W^T + b, every product a cuBLAS SGEMM: the device twin of
// ops/linear.h (same row-major shapes and += conventions). cuBLAS is column-major, so each
// row-major product is issued as its transpose (a row-major (R, C) matrix is a column-major
// (C, R) one with leading dimension C). Math mode CUBLAS_DEFAULT_MATH: no TF32, so fp32 results
// match the CPU within fp32 rounding.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace meshplan::executor::gpu {

/// One cuBLAS handle bound to a stream (RAII).
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

/// out (N, OC) = inp (N, C) weight^T + bias; weight (OC, C); bias (OC) or nullptr.
void linear_forward(const CublasHandle& cublas, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC);
/// dinp (N, C) += dout (N, OC) weight (OC, C).
void linear_backward_input(const CublasHandle& cublas, float* dinp, const float* dout,
                           const float* weight, int N, int C, int OC);
/// dweight (OC, C) += dout^T inp; dbias (OC) += column sums of dout (skipped when nullptr).
void linear_backward_weight(const CublasHandle& cublas, float* dweight, float* dbias,
                            const float* dout, const float* inp, int N, int C, int OC);

}  // namespace meshplan::executor::gpu
