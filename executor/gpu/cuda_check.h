#pragma once
// CHECK wrappers for every CUDA runtime, cuBLAS and NCCL call of the GPU executor: a failure
// throws one line naming the file:line, the call, the library's own error text and the rank
// (set once per process with set_check_rank), as llm.c's cudaCheck/cublasCheck do.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace meshplan::executor::gpu {

/// The rank named in CHECK errors (-1 until set: "rank ?").
void set_check_rank(int rank);
int check_rank();

/// Throws std::runtime_error("rank R: FILE:LINE: CALL failed: TEXT").
[[noreturn]] void throw_check_failure(const char* library, const char* call,
                                      const std::string& text, const char* file, int line);
std::string cublas_status_text(cublasStatus_t status);

}  // namespace meshplan::executor::gpu

#define MESHPLAN_CUDA_CHECK(call)                                                   \
  do {                                                                              \
    const cudaError_t meshplan_status_ = (call);                                    \
    if (meshplan_status_ != cudaSuccess) {                                          \
      ::meshplan::executor::gpu::throw_check_failure(                               \
          "CUDA", #call, cudaGetErrorString(meshplan_status_), __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

#define MESHPLAN_CUBLAS_CHECK(call)                                                         \
  do {                                                                                      \
    const cublasStatus_t meshplan_status_ = (call);                                         \
    if (meshplan_status_ != CUBLAS_STATUS_SUCCESS) {                                        \
      ::meshplan::executor::gpu::throw_check_failure(                                       \
          "cuBLAS", #call, ::meshplan::executor::gpu::cublas_status_text(meshplan_status_), \
          __FILE__, __LINE__);                                                              \
    }                                                                                       \
  } while (0)

/// After a kernel launch: the launch's own error (bad configuration), not the kernel's result.
#define MESHPLAN_CUDA_CHECK_LAUNCH() MESHPLAN_CUDA_CHECK(cudaGetLastError())
