#pragma once
// Gradient reductions after the pipeline's backward work, in this order per buffer:
//  1. sequence parallel: one all-reduce over tp of the gradients of the tp-replicated
//     parameters of each model chunk (norms, row-parallel biases, learned positions), which are
//     partial because each rank saw only its sequence shard (Korthikanti et al. 2022, Sec. 4.2.2);
//  2. tied embeddings with pp > 1: one all-reduce of the word-embedding gradient over the
//     embedding group (first and last stage), as Megatron-LM does;
//  3. data parallel: ZeRO 0 all-reduces the flat gradient buffer in buckets; ZeRO 1 (Megatron's
//     distributed optimizer, Rajbhandari et al. 2020, Sec. 5.1) reduce-scatters the flat buffer,
//     padded to a multiple of dp, so each rank gets the summed gradient of its shard.
// With overlap_grad_reduce (ZeRO 0), steps 1 and 3 start for a chunk as soon as its last
// micro-batch's weight gradients are done, while later backward work runs (step 3
// non-blocking). The embedding all-reduce and ZeRO 1's reduce-scatter wait until the stage's op
// list has been issued in full: started earlier, they could block a stage that still owes a
// peer a pipeline send.

#include <vector>

#include "memory_tracker.h"
#include "parameters.h"
#include "process_groups.h"

namespace meshplan::executor {

/// PyTorch DDP's default bucket size, bucket_cap_mb = 25 (MiB) (torch.nn.parallel.
/// DistributedDataParallel documentation), in fp32 elements.
inline constexpr int64_t kDpBucketElements = 25 * 1024 * 1024 / 4;

class GradientSync {
 public:
  /// `grads` is the flat gradient buffer, padded_size elements (a multiple of dp).
  GradientSync(const std::vector<ParameterSpec>& specs, const std::vector<int>& chunk_of_spec,
               int num_chunks, float* grads, int64_t padded_size, const planner::Plan& plan,
               ProcessGroups& groups, MemoryTracker& memory);

  /// The last micro-batch's weight gradients of `chunk` are done.
  void chunk_final(int chunk);
  /// After the op list: the remaining reductions, all complete on return. With ZeRO 1 (dp > 1)
  /// the summed gradients of this rank's shard are in shard_gradients().
  void finish();
  const float* shard_gradients() const { return shard_.data(); }

 private:
  void reduce_replicated_(int chunk);
  void start_data_parallel_(int chunk);

  const std::vector<ParameterSpec>& specs_;
  const std::vector<int>& chunk_of_spec_;
  float* grads_;
  int64_t padded_size_;
  std::vector<std::pair<int64_t, int64_t>> chunk_ranges_;  // [begin, end) in the flat buffer
  bool sequence_parallel_;
  bool overlap_;
  int zero_;
  int dp_;
  ProcessGroups& groups_;
  MemoryTracker& memory_;
  std::vector<bool> chunk_done_;
  std::vector<MPI_Request> pending_;
  Tensor shard_;
};

}  // namespace meshplan::executor
