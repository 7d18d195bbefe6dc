#include "ops/gemm_clock.h"

namespace meshplan::executor {

namespace {
double total_gemm_seconds = 0;
}  // namespace

double gemm_seconds() {
  return total_gemm_seconds;
}

GemmClock::~GemmClock() {
  total_gemm_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace meshplan::executor
