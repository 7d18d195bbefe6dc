#pragma once
// The data-parallel buckets of a rank's flat gradient buffer, exactly the calls the planner
// costs: planner::dp_buckets lists them (sizes, and which ZeRO stage reduces per step or per
// micro-batch) over the planner::dp_buffer_count buffer, and this file only places them, in
// order, as element ranges. Under ZeRO 1-3 every bucket is whole blocks of dp elements
// (planner::dp_full_bucket_bytes), so it reduce-scatters and all-gathers in dp equal blocks;
// rank r owns block r of every bucket, and its optimizer state holds those blocks back to back.
// ZeRO 3 has one bucket per layer (an even split of the stage's dp blocks over its layers).

#include <cstdint>
#include <utility>
#include <vector>

#include "meshplan/plan_file.h"

namespace meshplan::executor {

struct DpBucket {
  int64_t begin = 0;  // [begin, end) of the flat buffer
  int64_t end = 0;
  int64_t shard_offset = 0;  // ZeRO 1-3: where this bucket's block sits in the rank's shard
  int first_chunk = 0;       // the chunks whose gradients the bucket holds: [first, last]
  int last_chunk = 0;
  int64_t block() const { return end - begin; }
};

/// The buckets of pipeline stage `stage` over its buffer of `buffer_size` fp32 elements
/// (planner::dp_buffer_count of the stage's parameters) for chunks whose flat ranges are
/// `chunk_ranges` (in order, contiguous from 0; the padding past the last chunk belongs to the
/// last chunk). Empty when dp = 1. Throws RuntimeError when the planner's buckets do not cover
/// the buffer in whole elements (the executor's and the planner's parameter counts differ).
std::vector<DpBucket> make_dp_buckets(const planner::Plan& plan, int stage,
                                      const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t buffer_size);

}  // namespace meshplan::executor
