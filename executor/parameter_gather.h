#pragma once
// ZeRO 3 (Rajbhandari et al. 2020, Sec. 5.3): each rank stores only its block of every
// data-parallel bucket of its stage's parameters (padded / dp elements, the layout of its AdamW
// state). Before each op that reads the weights (a forward; a backward, or B of a zero-bubble
// schedule: W reads none) the stage's parameters are all-gathered over dp, bucket by bucket, into
// a temporary full-size buffer that the model's weight pointers are bound to, and after the op
// the buffer is freed and the pointers cleared. The buckets are the planner's (dp_buckets.h):
// one per layer, as PyTorch FSDP gathers one unit per transformer block before its forward and
// again before its backward (docs.pytorch.org/docs/stable/notes/fsdp.html), so a step issues
// 2 m L all-gathers of padded / L elements each, the planner's count. With
// overlap_param_gather the next op's gathers start, non-blocking, as soon as the current op
// releases its buffer (prefetch), and the op waits for them; the first gather of a step starts
// at its first forward, after the update.
//
// Unlike FSDP, an op's layer gathers all complete before the op runs (the buckets split the
// stage's dp blocks evenly, not at layer boundaries), so the gathered copy is the whole stage,
// and a stage with interleaved chunks (vpp > 1) is refused by validate_plan_for_executor.

#include <mpi.h>

#include <vector>

#include "dp_buckets.h"
#include "memory_tracker.h"
#include "parameters.h"
#include "process_groups.h"

namespace meshplan::executor {

class ParameterGather {
 public:
  /// `shard` holds this rank's blocks (padded_size / dp); `weights` are the chunks' pointers
  /// (one chunk), bound while a gathered copy lives. `ops_per_step` is the number of acquire()
  /// calls in a step (2 m).
  ParameterGather(const float* shard, const std::vector<DpBucket>& buckets, int64_t padded_size,
                  std::vector<ChunkWeights>* weights, const std::vector<ParameterSpec>& specs,
                  const std::vector<int>& chunk_of_spec, int64_t ops_per_step, bool prefetch,
                  ProcessGroups& groups, MemoryTracker& memory);

  void begin_step() { acquired_ = 0; }
  /// Binds the weights to a complete gathered copy (gathering it now unless prefetched).
  void acquire();
  /// Frees the copy and clears the pointers; with prefetch starts the next op's gather.
  void release();
  /// Collective over dp: the whole stage's parameters into `full` (padded_size elements).
  void gather_into(float* full);

 private:
  void start_gather_();
  void wait_gather_();

  const float* shard_;
  const std::vector<DpBucket>& buckets_;
  int64_t padded_size_;
  std::vector<ChunkWeights>* weights_;
  const std::vector<ParameterSpec>& specs_;
  const std::vector<int>& chunk_of_spec_;
  int64_t ops_per_step_;
  bool prefetch_;
  int dp_;
  int dp_rank_;
  ProcessGroups& groups_;
  MemoryTracker& memory_;
  int64_t acquired_ = 0;
  Tensor gathered_;
  std::vector<MPI_Request> requests_;  // [bucket] of the gather in flight
};

}  // namespace meshplan::executor
