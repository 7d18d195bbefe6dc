#pragma once
// One device memory arena per rank: a single cudaMalloc at start, then bump allocations with a
// high-water mark, so measured peak memory is the arena's mark (issue 13 §2) and no allocation
// happens inside a training step. Allocations are 256-byte aligned (cudaMalloc's own alignment,
// which cuBLAS and vectorised loads expect).

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshplan::executor::gpu {

class DeviceArena {
 public:
  /// Reserves `capacity_bytes` of device memory on the current device (throws on failure, naming
  /// the size asked for and cudaMemGetInfo's free bytes).
  explicit DeviceArena(size_t capacity_bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  /// `bytes` from the arena, 256-byte aligned; throws naming `what` when the arena is full.
  void* allocate(size_t bytes, const std::string& what);
  template <typename T>
  T* allocate_array(size_t count, const std::string& what) {
    return static_cast<T*>(allocate(count * sizeof(T), what));
  }
  /// Offset to come back to with release_to (a stack discipline for per-step scratch).
  size_t mark() const { return used_bytes_; }
  void release_to(size_t mark);

  size_t used_bytes() const { return used_bytes_; }
  size_t high_water_bytes() const { return high_water_bytes_; }
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  std::byte* base_ = nullptr;
  size_t capacity_bytes_ = 0;
  size_t used_bytes_ = 0;
  size_t high_water_bytes_ = 0;
};

/// Round `bytes` up to the arena's 256-byte alignment.
constexpr size_t arena_aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace meshplan::executor::gpu
