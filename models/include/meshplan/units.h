#pragma once
// Binary byte units. meshplan computes in bytes; GiB and MiB (2^30, 2^20) appear only when
// printing or reading sizes, and every column that uses them says so. GB (1e9) is used only
// where a datasheet or paper gives decimal units, written out at that place.

#include <cstdint>

namespace meshplan {

inline constexpr int64_t kBytesPerMiB = int64_t{1} << 20;
inline constexpr int64_t kBytesPerGiB = int64_t{1} << 30;

}  // namespace meshplan
