#include "gpu/device_arena.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/cuda_check.h"

namespace meshplan::executor::gpu {

DeviceArena::DeviceArena(size_t capacity_bytes) : capacity_bytes_(arena_aligned(capacity_bytes)) {
  void* base = nullptr;
  const cudaError_t status = cudaMalloc(&base, capacity_bytes_);
  if (status != cudaSuccess) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    cudaGetLastError();  // clear the sticky-free allocation error before asking again
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw std::runtime_error(fmt::format(
        "rank {}: device arena of {} bytes could not be allocated ({}); the GPU has {} bytes free "
        "of {}",
        check_rank(), capacity_bytes_, cudaGetErrorString(status), free_bytes, total_bytes));
  }
  base_ = static_cast<std::byte*>(base);
}

DeviceArena::~DeviceArena() {
  cudaFree(base_);
}

void* DeviceArena::allocate(size_t bytes, const std::string& what) {
  const size_t aligned = arena_aligned(bytes);
  if (aligned > capacity_bytes_ - used_bytes_) {
    throw std::runtime_error(
        fmt::format("rank {}: device arena full allocating {} ({} bytes): {} of {} bytes in use",
                    check_rank(), what, bytes, used_bytes_, capacity_bytes_));
  }
  void* pointer = base_ + used_bytes_;
  used_bytes_ += aligned;
  high_water_bytes_ = std::max(high_water_bytes_, used_bytes_);
  return pointer;
}

void DeviceArena::release_to(size_t mark) {
  if (mark > used_bytes_) {
    throw std::logic_error("DeviceArena::release_to: mark beyond the bytes in use");
  }
  used_bytes_ = mark;
}

}  // namespace meshplan::executor::gpu
