#include "dp_buckets.h"

#include <algorithm>

namespace meshplan::executor {

std::vector<DpBucket> make_dp_buckets(const std::vector<std::pair<int64_t, int64_t>>& chunk_ranges,
                                      int64_t padded_size, int64_t align) {
  // Cut points: chunk ends (rounded down to the alignment), and every aligned bucket length.
  const int64_t longest = std::max<int64_t>(align, kDpBucketElements / align * align);
  std::vector<int64_t> cuts = {0, padded_size};
  for (size_t c = 0; c + 1 < chunk_ranges.size(); c++) {
    cuts.push_back(chunk_ranges[c].second / align * align);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<DpBucket> buckets;
  auto chunk_of = [&chunk_ranges](int64_t element) {
    for (size_t c = 0; c < chunk_ranges.size(); c++) {
      if (element < chunk_ranges[c].second) {
        return static_cast<int>(c);
      }
    }
    return static_cast<int>(chunk_ranges.size()) - 1;  // the padding
  };
  int64_t shard_offset = 0;
  for (size_t i = 0; i + 1 < cuts.size(); i++) {
    for (int64_t begin = cuts[i]; begin < cuts[i + 1]; begin += longest) {
      DpBucket bucket;
      bucket.begin = begin;
      bucket.end = std::min(cuts[i + 1], begin + longest);
      bucket.first_chunk = chunk_of(bucket.begin);
      bucket.last_chunk = chunk_of(bucket.end - 1);
      bucket.shard_offset = shard_offset;
      shard_offset += bucket.block() / align;
      buckets.push_back(bucket);
    }
  }
  return buckets;
}

}  // namespace meshplan::executor
