#include "dp_buckets.h"

#include <doctest/doctest.h>

namespace meshplan::executor {
namespace {

TEST_CASE("ZeRO-1 buckets are dp-aligned, cover the padded buffer and name their chunks") {
  // Chunks [0, 10) and [10, 23), dp = 4: padded size ceil(23 / 4) * 4 = 24. The cut at chunk 0's
  // end rounds down to 8, so bucket [0, 8) holds chunk 0 only and [8, 24) holds elements 8-9 of
  // chunk 0, all of chunk 1 and the padding: it waits for both chunks.
  const auto buckets = make_dp_buckets({{0, 10}, {10, 23}}, 24, 4);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].begin == 0);
  CHECK(buckets[0].end == 8);
  CHECK(buckets[0].first_chunk == 0);
  CHECK(buckets[0].last_chunk == 0);
  CHECK(buckets[0].shard_offset == 0);
  CHECK(buckets[1].begin == 8);
  CHECK(buckets[1].end == 24);
  CHECK(buckets[1].first_chunk == 0);
  CHECK(buckets[1].last_chunk == 1);
  CHECK(buckets[1].shard_offset == 2);  // bucket 0's block: 8 / 4 = 2 elements per rank
}

TEST_CASE("ZeRO-0 buckets follow the chunks exactly") {
  const auto buckets = make_dp_buckets({{0, 10}, {10, 23}}, 23, 1);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].end == 10);
  CHECK(buckets[1].begin == 10);
  CHECK(buckets[1].end == 23);
  CHECK(buckets[1].first_chunk == 1);
}

TEST_CASE("long chunks split at kDpBucketElements, still dp-aligned") {
  // One chunk of 2.5 buckets' worth with dp = 2: kDpBucketElements = 6553600 is even, so the
  // cuts fall at 6553600 and 13107200 and the last bucket ends at the padded size.
  const int64_t size = kDpBucketElements * 5 / 2;
  const auto buckets = make_dp_buckets({{0, size}}, size, 2);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[1].begin == kDpBucketElements);
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
