#pragma once
// The data-parallel buckets of a rank's flat gradient buffer, cut as the planner cuts them:
// the buffer's bytes go in calls of the plan's options.bucket_bytes, full buckets and then the
// remainder, each bucket one collective (planner/estimate.cpp, bucketed_seconds), so a step
// issues ceil(buffer bytes / bucket_bytes) calls per reduction, as the planner costs it. Under
// ZeRO 1-3 every cut is rounded down to a multiple of dp elements, so each bucket
// reduce-scatters and all-gathers in dp equal blocks and the buckets' message bytes sum to the
// padded buffer, ceil(N / dp) dp elements; rank r owns block r of every bucket, and its
// optimizer state holds those blocks back to back. ZeRO 3 is one bucket: the planner's
// bucket_bytes does not apply to it (README, "The model").

#include <cstdint>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::executor {

struct DpBucket {
  int64_t begin = 0;  // [begin, end) of the flat buffer
  int64_t end = 0;
  int64_t shard_offset = 0;  // ZeRO 1-3: where this bucket's block sits in the rank's shard
  int first_chunk = 0;       // the chunks whose gradients the bucket holds: [first, last]
  int last_chunk = 0;
  int64_t block() const { return end - begin; }
};

/// Buckets over [0, padded_size) fp32 elements for chunks whose flat ranges are `chunk_ranges`
/// (in order, contiguous from 0); the padding past the last chunk belongs to the last chunk.
/// `align` is dp under ZeRO 1-3 (then padded_size is a multiple of it), else 1. Precondition
/// (validate_plan_for_executor): bucket_bytes >= 4 * align, so no bucket is empty.
std::vector<DpBucket> make_dp_buckets(const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t padded_size, int64_t align, int64_t bucket_bytes);

}  // namespace meshplan::executor
