#pragma once
// The executor's allocator: every tensor it holds (parameters, gradients, optimizer state,
// activations, communication buffers) is a Buffer registered with one MemoryTracker, which
// knows the bytes live now and the peak. This is the "measured" memory execute reports.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

namespace meshplan::executor {

class MemoryTracker {
 public:
  void allocate(int64_t bytes) {
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }
  void release(int64_t bytes) { live_bytes_ -= bytes; }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }

 private:
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
};

/// A zero-initialised array of T whose bytes count in `tracker` while it lives. Move-only.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryTracker* tracker, int64_t size)
      : data_(size > 0 ? new T[static_cast<size_t>(size)]() : nullptr),
        size_(size),
        tracker_(tracker) {
    tracker_->allocate(bytes());
  }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::move(other.data_);
      size_ = std::exchange(other.size_, 0);
      tracker_ = std::exchange(other.tracker_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() {
    if (tracker_ != nullptr) {
      tracker_->release(bytes());
    }
    data_.reset();
    size_ = 0;
    tracker_ = nullptr;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t bytes() const { return size_ * static_cast<int64_t>(sizeof(T)); }
  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  const T& operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }

 private:
  std::unique_ptr<T[]> data_;
  int64_t size_ = 0;
  MemoryTracker* tracker_ = nullptr;
};

using Tensor = Buffer<float>;

}  // namespace meshplan::executor
