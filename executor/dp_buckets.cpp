#include "dp_buckets.h"

#include <fmt/format.h>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"

namespace meshplan::executor {

std::vector<DpBucket> make_dp_buckets(const planner::Plan& plan, int stage,
                                      const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t buffer_size) {
  auto chunk_of = [&chunk_ranges](int64_t element) {
    for (size_t c = 0; c < chunk_ranges.size(); c++) {
      if (element < chunk_ranges[c].second) {
        return static_cast<int>(c);
      }
    }
    return static_cast<int>(chunk_ranges.size()) - 1;  // the padding
  };
  const planner::DpBuckets planned =
      planner::dp_buckets(plan.model, plan.cluster, plan.layout, plan.options, stage);
  const int64_t element_bytes = models::compute_element_bytes(plan.cluster.precision);
  const int64_t align =
      planner::zero_shards_optimizer(plan.layout) ? planner::grad_group_size(plan.layout) : 1;
  std::vector<DpBucket> buckets;
  int64_t begin = 0;
  int64_t shard_offset = 0;
  for (const planner::SizeRun& run : planner::gradient_buckets_in_order(planned, plan.layout)) {
    const int64_t size = run.bytes / element_bytes;
    if (run.bytes % (element_bytes * align) != 0) {
      throw RuntimeError(
          fmt::format("stage {}: data-parallel bucket of {} B is not whole blocks "
                      "of {} elements of {} B",
                      stage, run.bytes, align, element_bytes));
    }
    for (int64_t k = 0; k < run.count; k++) {
      DpBucket bucket;
      bucket.begin = begin;
      bucket.end = begin + size;
      bucket.first_chunk = chunk_of(bucket.begin);
      bucket.last_chunk = chunk_of(bucket.end - 1);
      bucket.shard_offset = shard_offset;
      shard_offset += size / align;
      begin = bucket.end;
      buckets.push_back(bucket);
    }
  }
  if (!buckets.empty() && begin != buffer_size) {
    throw RuntimeError(fmt::format(
        "stage {}: the planner's data-parallel buckets cover {} elements, the stage's gradient "
        "buffer has {}",
        stage, begin, buffer_size));
  }
  return buckets;
}

}  // namespace meshplan::executor
