// The executor's buckets (executor/dp_buckets.cpp) placed from planner::dp_buckets: element
// ranges in order, dp-aligned under ZeRO, naming the chunks they hold, covering the buffer.
#include "dp_buckets.h"

#include <doctest/doctest.h>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "tiny_plan.h"

namespace meshplan::executor {
namespace {

using testing::make_layout;
using testing::tiny_plan;

// The tiny preset on one stage (4 layers of 46,208 parameters, embedding and LM head 16,384
// each, final norm 64): N = 217,664 fp32 parameters, as models::count_parameters gives.
constexpr int64_t kTinyParameters = 217'664;

TEST_CASE("ZeRO-1 buckets: whole dp blocks, in order, from the plan's bucket_bytes") {
  planner::Plan plan = tiny_plan(make_layout(1, 1, 2));
  plan.layout.zero = 1;
  plan.options.bucket_bytes = 10'485;  // plan --bucket-mb 0.01
  REQUIRE(models::count_parameters(plan.model).total == kTinyParameters);
  // dp blocks of 2 fp32 elements, 8 bytes: a full bucket floor(10,485 / 8) = 1,310 blocks =
  // 2,620 elements. 217,664 (even, no padding) = 83 * 2,620 + 2,204.
  const auto buckets = make_dp_buckets(plan, 0, {{0, kTinyParameters}}, kTinyParameters);
  REQUIRE(buckets.size() == 84);
  for (size_t k = 0; k + 1 < buckets.size(); k++) {
    CHECK(buckets[k].begin == static_cast<int64_t>(k) * 2'620);
    CHECK(buckets[k].block() == 2'620);
    CHECK(buckets[k].shard_offset == static_cast<int64_t>(k) * 1'310);  // block / dp each
  }
  CHECK(buckets.back().begin == 83 * 2'620);
  CHECK(buckets.back().end == kTinyParameters);
}

TEST_CASE("ZeRO-0 buckets are whole elements, full buckets and the remainder") {
  planner::Plan plan = tiny_plan(make_layout(1, 1, 2));
  plan.options.bucket_bytes = 400'000;  // 100,000 fp32 elements
  // Chunk ranges as one chunk split in two, to see which chunks each bucket names.
  const auto buckets =
      make_dp_buckets(plan, 0, {{0, 150'000}, {150'000, kTinyParameters}}, kTinyParameters);
  REQUIRE(buckets.size() == 3);  // 100,000 + 100,000 + 17,664
  CHECK(buckets[0].end == 100'000);
  CHECK(buckets[0].last_chunk == 0);
  CHECK(buckets[1].first_chunk == 0);  // elements 100,000-149,999 of chunk 0 ...
  CHECK(buckets[1].last_chunk == 1);   // ... and 150,000-199,999 of chunk 1: waits for both
  CHECK(buckets[2].begin == 200'000);
  CHECK(buckets[2].end == kTinyParameters);
  CHECK(buckets[2].first_chunk == 1);
}

TEST_CASE("ZeRO-3 buckets: one per layer, an even split of the dp blocks") {
  planner::Plan plan = tiny_plan(make_layout(1, 1, 2));
  plan.layout.zero = 3;
  // 217,664 elements = 108,832 blocks of 2 over 4 layers: 27,208 blocks = 54,416 elements each.
  const auto buckets = make_dp_buckets(plan, 0, {{0, kTinyParameters}}, kTinyParameters);
  REQUIRE(buckets.size() == 4);
  for (size_t k = 0; k < buckets.size(); k++) {
    CHECK(buckets[k].begin == static_cast<int64_t>(k) * 54'416);
    CHECK(buckets[k].block() == 54'416);
  }
}

TEST_CASE("dp = 1: no buckets; a buffer the planner does not cover is an error") {
  CHECK(make_dp_buckets(tiny_plan(make_layout(1, 1, 1)), 0, {{0, kTinyParameters}}, kTinyParameters)
            .empty());
  CHECK_THROWS_WITH_AS(
      make_dp_buckets(tiny_plan(make_layout(1, 1, 2)), 0, {{0, 100}}, 100),
      "stage 0: the planner's data-parallel buckets cover 217664 elements, the stage's gradient "
      "buffer has 100",
      RuntimeError);
}

}  // namespace
}  // namespace meshplan::executor
