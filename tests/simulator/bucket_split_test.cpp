// Where buckets meet the compute timeline: cut points at the bucket's share of the bytes.
// Durations and byte counts are chosen so every cut is exact in binary floating point.

#include "bucket_split.h"

#include <doctest/doctest.h>

namespace meshplan::simulator {

TEST_CASE("split_carriers: gradient buckets complete at their share of the backward") {
  // Two carriers of 1 s, buckets of 1, 1, 2 bytes (4 in all): complete at 1/4, 2/4, 4/4 of
  // the 2 s, i.e. 0.5 s and 1.0 s into the first carrier and at the end of the second.
  const auto pieces = split_carriers({1.0, 1.0}, {1, 1, 2}, BucketEdge::kReadyAtEnd);
  REQUIRE(pieces.size() == 2);
  REQUIRE(pieces[0].size() == 2);
  CHECK(pieces[0][0].seconds == 0.5);
  CHECK(pieces[0][0].buckets == std::vector<int32_t>{0});
  CHECK(pieces[0][1].seconds == 0.5);
  CHECK(pieces[0][1].buckets == std::vector<int32_t>{1});
  REQUIRE(pieces[1].size() == 1);
  CHECK(pieces[1][0].seconds == 1.0);
  CHECK(pieces[1][0].buckets == std::vector<int32_t>{2});
}

TEST_CASE("split_carriers: parameter buckets are needed at the start of their share") {
  // Same shape: needed at 0, 1/4 and 2/4 of 2 s: 0 and 0.5 s into the first carrier, at the
  // start of the second.
  const auto pieces = split_carriers({1.0, 1.0}, {1, 1, 2}, BucketEdge::kNeededAtStart);
  REQUIRE(pieces[0].size() == 2);
  CHECK(pieces[0][0].buckets == std::vector<int32_t>{0});
  CHECK(pieces[0][1].buckets == std::vector<int32_t>{1});
  REQUIRE(pieces[1].size() == 1);
  CHECK(pieces[1][0].buckets == std::vector<int32_t>{2});
}

TEST_CASE("split_carriers: no compute time puts every bucket at the edge") {
  const auto ready = split_carriers({0.0, 0.0}, {5, 5}, BucketEdge::kReadyAtEnd);
  CHECK(ready[1].back().buckets == std::vector<int32_t>{0, 1});  // after the last carrier
  const auto needed = split_carriers({0.0, 0.0}, {5, 5}, BucketEdge::kNeededAtStart);
  CHECK(needed[0].front().buckets == std::vector<int32_t>{0, 1});  // before the first
}

TEST_CASE("split_op: ZeRO-3 layers, each gathered before and reduced after its piece") {
  // 2 s, two equal layers: [0, 1] needs gather 0 and completes reduce 0, [1, 2] gather 1 and
  // reduce 1.
  const auto both = split_op(2.0, {7, 7}, {7, 7});
  REQUIRE(both.size() == 2);
  CHECK(both[0].seconds == 1.0);
  CHECK(both[0].needs == std::vector<int32_t>{0});
  CHECK(both[0].ready == std::vector<int32_t>{0});
  CHECK(both[1].needs == std::vector<int32_t>{1});
  CHECK(both[1].ready == std::vector<int32_t>{1});
  // Gathers only, 1 and 2 bytes over 3 s: bucket 1 needed from 1 s on.
  const auto gathers = split_op(3.0, {1, 2}, {});
  REQUIRE(gathers.size() == 2);
  CHECK(gathers[0].seconds == 1.0);
  CHECK(gathers[1].seconds == 2.0);
  CHECK(gathers[1].needs == std::vector<int32_t>{1});
  // A zero-length op: one piece, everything before and after it.
  const auto empty = split_op(0.0, {1, 1}, {1});
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].needs == std::vector<int32_t>{0, 1});
  CHECK(empty[0].ready == std::vector<int32_t>{0});
}

}  // namespace meshplan::simulator
