#include "gpu/cuda_check.h"

#include <fmt/format.h>

namespace meshplan::executor::gpu {

namespace {
int g_check_rank = -1;
}  // namespace

void set_check_rank(int rank) {
  g_check_rank = rank;
}
int check_rank() {
  return g_check_rank;
}

void throw_check_failure(const char* library, const char* call, const std::string& text,
                         const char* file, int line) {
  const std::string rank = g_check_rank < 0 ? std::string("?") : std::to_string(g_check_rank);
  throw std::runtime_error(
      fmt::format("rank {}: {}:{}: {} call {} failed: {}", rank, file, line, library, call, text));
}

std::string cublas_status_text(cublasStatus_t status) {
  return fmt::format("{} ({})", cublasGetStatusName(status), cublasGetStatusString(status));
}

}  // namespace meshplan::executor::gpu
