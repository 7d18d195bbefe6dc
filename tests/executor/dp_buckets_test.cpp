#include "dp_buckets.h"

#include <doctest/doctest.h>

namespace meshplan::executor {
namespace {

TEST_CASE("ZeRO-1 buckets are dp-aligned, cover the padded buffer and name their chunks") {
  // Chunks [0, 10) and [10, 23), dp = 4: padded size ceil(23 / 4) * 4 = 24 elements = 96 B.
  // Buckets of 40 B: ceil(96 / 40) = 3 calls, as the planner counts them. Cuts at bytes 40 and
  // 80 = elements 10 and 20, rounded down to multiples of 4: 8 and 20.
  const auto buckets = make_dp_buckets({{0, 10}, {10, 23}}, 24, 4, 40);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].begin == 0);
  CHECK(buckets[0].end == 8);
  CHECK(buckets[0].first_chunk == 0);
  CHECK(buckets[0].last_chunk == 0);
  CHECK(buckets[0].shard_offset == 0);
  CHECK(buckets[1].begin == 8);
  CHECK(buckets[1].end == 20);
  CHECK(buckets[1].first_chunk == 0);   // elements 8-9 of chunk 0 ...
  CHECK(buckets[1].last_chunk == 1);    // ... and 10-19 of chunk 1: it waits for both
  CHECK(buckets[1].shard_offset == 2);  // bucket 0's block: 8 / 4 = 2 elements per rank
  CHECK(buckets[2].begin == 20);
  CHECK(buckets[2].end == 24);  // the last bucket ends at the padded size
  CHECK(buckets[2].first_chunk == 1);
  CHECK(buckets[2].shard_offset == 5);  // 2 + 12 / 4
}

TEST_CASE("ZeRO-0 buckets are full buckets and the remainder") {
  // 23 elements = 92 B in buckets of 40 B: 40 + 40 + 12 B, i.e. elements [0, 10), [10, 20),
  // [20, 23).
  const auto buckets = make_dp_buckets({{0, 10}, {10, 23}}, 23, 1, 40);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].end == 10);
  CHECK(buckets[0].last_chunk == 0);
  CHECK(buckets[1].begin == 10);
  CHECK(buckets[1].end == 20);
  CHECK(buckets[1].first_chunk == 1);
  CHECK(buckets[2].end == 23);
}

TEST_CASE("a bucket size that is not a multiple of 4 B still gives ceil(bytes / bucket) calls") {
  // --bucket-mb 0.01 = 10485 B. 10000 elements = 40000 B: ceil(40000 / 10485) = 4 calls, cut at
  // bytes 10485, 20970, 31455 = elements floor(2621.25) = 2621, 5242, 7863 (dp = 1).
  const auto buckets = make_dp_buckets({{0, 10000}}, 10000, 1, 10485);
  REQUIRE(buckets.size() == 4);
  CHECK(buckets[1].begin == 2621);
  CHECK(buckets[2].begin == 5242);
  CHECK(buckets[3].begin == 7863);
  CHECK(buckets[3].end == 10000);
}

TEST_CASE("the default bucket splits long buffers, still dp-aligned") {
  // One chunk of 2.5 default buckets with dp = 2: 25 MiB / 4 B = 6553600 elements, even, so the
  // cuts fall at 6553600 and 13107200 and the last bucket ends at the padded size.
  const int64_t per_bucket = planner::kDefaultBucketBytes / 4;
  const int64_t size = per_bucket * 5 / 2;
  const auto buckets = make_dp_buckets({{0, size}}, size, 2, planner::kDefaultBucketBytes);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[1].begin == per_bucket);
  CHECK(buckets[2].end == size);
  int64_t covered = 0;
  for (const DpBucket& bucket : buckets) {
    CHECK(bucket.block() % 2 == 0);
    covered += bucket.block();
  }
  CHECK(covered == size);
}

}  // namespace
}  // namespace meshplan::executor
