#include "dp_buckets.h"

#include <algorithm>
#include <cassert>

namespace meshplan::executor {

namespace {

constexpr int64_t kFloatBytes = 4;  // fp32 gradients

}  // namespace

std::vector<DpBucket> make_dp_buckets(const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t padded_size, int64_t align, int64_t bucket_bytes) {
  assert(bucket_bytes >= kFloatBytes * align);
  auto chunk_of = [&chunk_ranges](int64_t element) {
    for (size_t c = 0; c < chunk_ranges.size(); c++) {
      if (element < chunk_ranges[c].second) {
        return static_cast<int>(c);
      }
    }
    return static_cast<int>(chunk_ranges.size()) - 1;  // the padding
  };
  // Bucket k holds bytes [k B, (k + 1) B) of the buffer, its cuts rounded down to whole
  // aligned blocks; B >= 4 align keeps every rounded cut above the previous one.
  const int64_t total_bytes = padded_size * kFloatBytes;
  const int64_t num_buckets = (total_bytes + bucket_bytes - 1) / bucket_bytes;
  std::vector<DpBucket> buckets;
  int64_t shard_offset = 0;
  for (int64_t k = 0; k < num_buckets; k++) {
    DpBucket bucket;
    bucket.begin = k * bucket_bytes / (kFloatBytes * align) * align;
    bucket.end =
        k + 1 == num_buckets ? padded_size : (k + 1) * bucket_bytes / (kFloatBytes * align) * align;
    bucket.first_chunk = chunk_of(bucket.begin);
    bucket.last_chunk = chunk_of(bucket.end - 1);
    bucket.shard_offset = shard_offset;
    shard_offset += bucket.block() / align;
    buckets.push_back(bucket);
  }
  return buckets;
}

}  // namespace meshplan::executor
