#pragma once
// The data-parallel buckets of a rank's flat gradient buffer: contiguous ranges, each inside
// the chunks it overlaps, at most kDpBucketElements long. Under ZeRO 1 every bucket starts and
// ends on a multiple of dp, so each bucket reduce-scatters and all-gathers in dp equal blocks and
// the buckets' message bytes sum to the padded buffer, ceil(N / dp) dp elements; rank r owns
// block r of every bucket, and its optimizer state holds those blocks back to back.

#include <cstdint>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::executor {

/// The planner's data-parallel bucket (PyTorch DDP's default), in fp32 elements.
inline constexpr int64_t kDpBucketElements = planner::kDefaultBucketBytes / 4;

struct DpBucket {
  int64_t begin = 0;  // [begin, end) of the flat buffer
  int64_t end = 0;
  int64_t shard_offset = 0;  // ZeRO 1: where this bucket's block sits in the rank's shard
  int first_chunk = 0;       // the chunks whose gradients the bucket holds: [first, last]
  int last_chunk = 0;
  int64_t block() const { return end - begin; }
};

/// Buckets over [0, padded_size) for chunks whose flat ranges are `chunk_ranges` (in order,
/// contiguous from 0); the padding past the last chunk belongs to the last chunk. `align` is dp
/// under ZeRO 1 (then padded_size is a multiple of it), else 1.
std::vector<DpBucket> make_dp_buckets(const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t padded_size, int64_t align);

}  // namespace meshplan::executor
