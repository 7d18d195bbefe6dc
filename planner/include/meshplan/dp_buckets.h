#pragma once
// The data-parallel collectives of one pipeline stage, bucket by bucket: the one place that
// decides which ZeRO stage reduces and gathers what, when, in how many calls of how many bytes.
// The planner's estimate, its collective inventory and the simulator all read this list.
// Units: bytes, seconds.

#include <cstdint>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// `num_calls` consecutive collective calls, each on one bucket of `bytes`, of a stage's
/// data-parallel group (run-length: a 175B stage has thousands of equal DDP buckets).
struct DpBucket {
  int64_t bytes = 0;  // nccl-tests "size" of each call (see CollectiveTraffic::message_bytes)
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CommGroup group = CommGroup::kDp;
  double seconds = 0;  // one call alone: the slowest of the stage's dp groups
  int64_t num_calls = 1;
};

/// A stage's data-parallel calls, by when they run. Empty lists when dp = 1.
struct DpBuckets {
  // Once per step, as the last backward fills them: ZeRO-0 all-reduce of the unpadded
  // gradients (PyTorch DDP, Li et al. 2020, Sec. 3.2.3), ZeRO-1 reduce-scatter of the
  // dp-padded ones (Rajbhandari et al. 2020, Sec. 5.1).
  std::vector<DpBucket> step_grad;
  // Once per step after the optimizer: ZeRO-1/2 all-gather of the updated parameters.
  std::vector<DpBucket> step_param;
  // After each backward op of a chunk (every micro-batch), 1/vpp of the stage: ZeRO-2
  // reduce-scatter in bucket_bytes buckets (ibid. Sec. 5.2, DeepSpeed's reduce_bucket_size),
  // ZeRO-3 in one bucket per layer (ibid. Sec. 7.2.2; FSDP wraps each transformer block).
  std::vector<DpBucket> chunk_grad;
  // Before each forward and each backward op of a chunk: ZeRO-3 all-gather, one per layer.
  std::vector<DpBucket> chunk_param;
};

/// ZeRO shards evenly over dp: ceil(n / dp) * dp elements (DDP's all-reduce is not padded).
int64_t zero_padded_count(int64_t count, int64_t dp);

/// A run of `count` equal sizes.
struct SizeRun {
  int64_t bytes = 0;
  int64_t count = 0;
  bool operator==(const SizeRun&) const = default;
};

/// Consecutive buckets of at most `bucket_bytes` covering `total_bytes`, the last one holding
/// the remainder, as DDP fills them: {bucket, total / bucket} then {total % bucket, 1}; empty
/// runs left out. Precondition: bucket_bytes > 0.
std::vector<SizeRun> bucket_sizes(int64_t total_bytes, int64_t bucket_bytes);

/// `total_bytes` in `num_parts` near-equal parts: {ceil, total % parts} then {floor, the rest};
/// parts of 0 bytes are left out. Precondition: num_parts > 0.
std::vector<SizeRun> even_split(int64_t total_bytes, int64_t num_parts);

/// Every data-parallel call of pipeline stage `stage` in one step (see DpBuckets), costed by
/// collective_seconds over the nodes the stage's dp groups touch. options.bucket_bytes must
/// be positive.
DpBuckets dp_buckets(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage);

/// Sum of seconds * num_calls.
double total_seconds(const std::vector<DpBucket>& buckets);
/// Sum of bytes * num_calls.
int64_t total_bytes(const std::vector<DpBucket>& buckets);
/// Number of calls: sum of num_calls.
int64_t total_calls(const std::vector<DpBucket>& buckets);

}  // namespace meshplan::planner
