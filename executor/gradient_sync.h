#pragma once
// Gradient reductions after the pipeline's backward work, in this order per buffer:
//  1. sequence parallel: one all-reduce over tp of the gradients of the tp-replicated
//     parameters of each model chunk (norms, row-parallel biases, learned positions), which are
//     partial because each rank saw only its sequence shard (Korthikanti et al. 2022, Sec. 4.2.2);
//  2. tied embeddings with pp > 1: one all-reduce of the word-embedding gradient over the
//     embedding group (first and last stage), as Megatron-LM does;
//  3. data parallel, bucket by bucket (dp_buckets.h): ZeRO 0 all-reduces the gradients; ZeRO 1
//     (Megatron's distributed optimizer, Rajbhandari et al. 2020, Sec. 5.1) reduce-scatters
//     them, so each rank gets the summed gradients of its blocks.
// With overlap_grad_reduce, steps 1 and 3 start as soon as the last micro-batch's weight
// gradients of the chunks a bucket holds are done, non-blocking, while later backward work
// runs. The embedding all-reduce, and the buckets holding a tied embedding, wait until the
// stage's op list has been issued in full: started earlier, the 2-rank all-reduce could block a
// stage that still owes its peer a pipeline send.

#include <vector>

#include "dp_buckets.h"
#include "memory_tracker.h"
#include "parameters.h"
#include "process_groups.h"

namespace meshplan::executor {

class GradientSync {
 public:
  /// `grads` is the flat gradient buffer, padded_size elements (a multiple of dp under ZeRO 1).
  GradientSync(const std::vector<ParameterSpec>& specs, const std::vector<int>& chunk_of_spec,
               int num_chunks, float* grads, int64_t padded_size, const planner::Plan& plan,
               ProcessGroups& groups, MemoryTracker& memory);

  /// The last micro-batch's weight gradients of `chunk` are done.
  void chunk_final(int chunk);
  /// After the op list: the remaining reductions, all complete on return. Under ZeRO 1 (dp > 1)
  /// the summed gradient of this rank's block of each bucket is at the bucket's start in the
  /// gradient buffer (the in-place reduce-scatter puts it there).
  void finish();

  bool sharded() const { return sharded_; }
  const std::vector<DpBucket>& buckets() const { return buckets_; }

 private:
  void reduce_replicated_(int chunk);
  void start_ready_buckets_(bool all);

  const std::vector<ParameterSpec>& specs_;
  const std::vector<int>& chunk_of_spec_;
  float* grads_;
  bool sequence_parallel_;
  bool overlap_;
  bool sharded_;  // ZeRO 1 with dp > 1
  int dp_;
  ProcessGroups& groups_;
  MemoryTracker& memory_;
  std::vector<DpBucket> buckets_;
  std::vector<bool> holds_tied_embedding_;  // [bucket]
  std::vector<bool> chunk_done_;
  std::vector<bool> bucket_started_;
  std::vector<MPI_Request> pending_;
};

}  // namespace meshplan::executor
