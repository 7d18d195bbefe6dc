// planner::dp_buckets (planner/dp_buckets.cpp): which calls each ZeRO stage issues, of how many
// bytes, worked out by hand, and their agreement with the collective inventory's volumes.
//
// The case: the tiny preset (4 layers, h 64, f 176 SwiGLU, V 256, RMSNorm, untied; see
// collective_inventory_test.cpp) unsharded on one stage: per layer 46,080 matrix + 2 * 64 norm
// = 46,208 parameters, 4 layers 184,832, embedding 256 * 64 = 16,384, final norm 64, LM head
// 16,384: 217,664 parameters, bf16 435,328 bytes. dp = 3: 217,664 = 3 * 72,554 + 2, so ZeRO
// pads to 3 * 72,555 = 217,665 parameters, 435,330 bytes. Global batch 6, micro-batch 1:
// m = 6 / 3 = 2 micro-batches. Buckets of 200,000 bytes.

#include "meshplan/dp_buckets.h"

#include <doctest/doctest.h>

#include <map>

#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

constexpr int64_t kBucketBytes = 200'000;

// Every call's size, in order.
std::vector<int64_t> sizes_of(const std::vector<DpBucket>& buckets) {
  std::vector<int64_t> sizes;
  for (const DpBucket& bucket : buckets) {
    sizes.insert(sizes.end(), static_cast<size_t>(bucket.num_calls), bucket.bytes);
  }
  return sizes;
}

using Volumes = std::map<std::pair<int64_t, CollectiveKind>, int64_t>;  // (stage, kind) -> bytes

void add_volumes(Volumes& volumes, int64_t stage, const std::vector<DpBucket>& buckets,
                 int64_t rounds) {
  for (const DpBucket& bucket : buckets) {
    volumes[{stage, bucket.kind}] += rounds * bucket.num_calls * bucket.bytes;
  }
}

DpBuckets tiny_buckets(int zero) {
  Layout layout = make_layout(1, 1, 3, 1, 6);
  layout.zero = zero;
  PlanOptions options;
  options.bucket_bytes = kBucketBytes;
  return dp_buckets(models::load_model("tiny"), models::load_cluster("dgx-a100-80gb"), layout,
                    options, 0);
}

}  // namespace

TEST_CASE("dp_buckets: bucket_sizes fills buckets in order, the last holds the remainder") {
  using Runs = std::vector<SizeRun>;
  CHECK(bucket_sizes(10, 4) == Runs{{4, 2}, {2, 1}});  // 4, 4, 2
  CHECK(bucket_sizes(8, 4) == Runs{{4, 2}});
  CHECK(bucket_sizes(3, 4) == Runs{{3, 1}});
  CHECK(bucket_sizes(0, 4).empty());
}

TEST_CASE("dp_buckets: even_split gives the first total % parts one byte more") {
  using Runs = std::vector<SizeRun>;
  CHECK(even_split(10, 4) == Runs{{3, 2}, {2, 2}});  // 3, 3, 2, 2
  CHECK(even_split(8, 4) == Runs{{2, 4}});
  CHECK(even_split(2, 4) == Runs{{1, 2}});  // no empty calls
  CHECK(zero_padded_count(217'664, 3) == 217'665);
  CHECK(zero_padded_count(6, 3) == 6);
}

TEST_CASE("dp_buckets: ZeRO 0 all-reduces the unpadded gradients once a step") {
  // DDP all-reduces the whole buffer; nothing is sharded, so nothing is padded: 435,328 bytes
  // = 2 * 200,000 + 35,328.
  const DpBuckets buckets = tiny_buckets(0);
  CHECK(sizes_of(buckets.step_grad) == std::vector<int64_t>{200'000, 200'000, 35'328});
  CHECK(total_calls(buckets.step_grad) == 3);
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  for (const DpBucket& bucket : buckets.step_grad) {
    CHECK(bucket.kind == CollectiveKind::kAllReduce);
    CHECK(bucket.group == CommGroup::kDp);
    // tp = 1: the dp group is ranks 0, 1, 2, one node, stride 1.
    CHECK(bucket.seconds == collective_seconds(cluster, bucket.kind, bucket.bytes, 3, 1, 0));
  }
  CHECK(buckets.step_param.empty());
  CHECK(buckets.chunk_grad.empty());
  CHECK(buckets.chunk_param.empty());
}

TEST_CASE("dp_buckets: ZeRO 1 and 2 shard the padded buffer") {
  // 435,330 padded bytes = 2 * 200,000 + 35,330.
  const std::vector<int64_t> padded{200'000, 200'000, 35'330};
  const DpBuckets one = tiny_buckets(1);
  CHECK(sizes_of(one.step_grad) == padded);
  CHECK(sizes_of(one.step_param) == padded);
  CHECK(one.step_grad.front().kind == CollectiveKind::kReduceScatter);
  CHECK(one.step_param.front().kind == CollectiveKind::kAllGather);
  CHECK(one.chunk_grad.empty());
  // ZeRO 2 reduce-scatters each backward's gradients (vpp = 1: the whole stage per op).
  const DpBuckets two = tiny_buckets(2);
  CHECK(two.step_grad.empty());
  CHECK(sizes_of(two.chunk_grad) == padded);
  CHECK(sizes_of(two.step_param) == padded);
  CHECK(two.chunk_param.empty());
}

TEST_CASE("dp_buckets: ZeRO 3 moves one layer per call") {
  // 435,330 bytes over 4 layers: 108,832.5, so two calls of 108,833 and two of 108,832.
  const std::vector<int64_t> layers{108'833, 108'833, 108'832, 108'832};
  const DpBuckets three = tiny_buckets(3);
  CHECK(sizes_of(three.chunk_grad) == layers);
  CHECK(sizes_of(three.chunk_param) == layers);
  CHECK(three.step_grad.empty());
  CHECK(three.step_param.empty());
}

TEST_CASE("dp_buckets: per-step volumes equal the collective inventory's, ZeRO 0-3") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  for (int zero = 0; zero <= 3; ++zero) {
    for (int64_t vpp : {1, 2}) {
      CAPTURE(zero);
      CAPTURE(vpp);
      Layout layout = make_layout(1, 2, 3, 1, 12);  // 2 stages, m = 4
      layout.zero = zero;
      layout.vpp = vpp;
      layout.schedule = vpp > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
      PlanOptions options;
      options.bucket_bytes = kBucketBytes / 4;
      const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
      REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
      Volumes inventory;
      for (const CollectiveTraffic& traffic : estimate.collectives) {
        if (traffic.group == CommGroup::kDp) {
          inventory[{traffic.stage, traffic.kind}] += traffic.total_message_bytes();
        }
      }
      Volumes from_buckets;
      const int64_t chunk_ops = layout.num_micro_batches() * layout.vpp;  // 4 v per step
      for (int64_t stage = 0; stage < layout.pp; ++stage) {
        const DpBuckets b = dp_buckets(model, cluster, layout, options, stage);
        // Per step: step lists once, chunk lists after each of the m v backward ops, ZeRO-3's
        // gathers before each forward and each backward op.
        add_volumes(from_buckets, stage, b.step_grad, 1);
        add_volumes(from_buckets, stage, b.step_param, 1);
        add_volumes(from_buckets, stage, b.chunk_grad, chunk_ops);
        add_volumes(from_buckets, stage, b.chunk_param, 2 * chunk_ops);
        // The estimate's full DP duration is the same calls' seconds.
        const double seconds = total_seconds(b.step_grad) + total_seconds(b.step_param) +
                               static_cast<double>(chunk_ops) *
                                   (total_seconds(b.chunk_grad) + 2 * total_seconds(b.chunk_param));
        // 1e-12 relative: the same doubles summed in another order.
        CHECK(estimate.stages[static_cast<size_t>(stage)].dp_grad_sync_seconds ==
              doctest::Approx(seconds).epsilon(1e-12));
      }
      // bf16 byte counts are even, so vpp = 2 halves each stage exactly and the per-chunk
      // shares add up to the inventory's stage volumes.
      CHECK(from_buckets == inventory);
    }
  }
}

}  // namespace meshplan::planner
