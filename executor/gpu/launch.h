#pragma once
// Launch geometry shared by the kernels: a grid-stride loop over N elements with 256-thread
// blocks, the grid capped so large N reuse blocks (a common CUDA idiom; llm.c uses the same
// 256-thread blocks and ceil-div grids).

#include <algorithm>
#include <cstdint>

namespace meshplan::executor::gpu {

inline constexpr int kBlockThreads = 256;

inline int grid_for(int64_t n) {
  const int64_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, 65535 * 8));
}

}  // namespace meshplan::executor::gpu
