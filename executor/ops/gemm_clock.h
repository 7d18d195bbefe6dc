#pragma once
// Time this process spends inside GEMMs (the linear layers' and attention's Eigen products),
// so a run can report the share of its step time that is matrix multiplication.

#include <chrono>

namespace meshplan::executor {

/// Seconds spent in GEMMs by this process so far (single-threaded ranks: no synchronisation).
double gemm_seconds();

/// Adds the time from construction to destruction to gemm_seconds().
class GemmClock {
 public:
  GemmClock() : start_(std::chrono::steady_clock::now()) {}
  ~GemmClock();
  GemmClock(const GemmClock&) = delete;
  GemmClock& operator=(const GemmClock&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace meshplan::executor
