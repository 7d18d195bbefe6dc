#pragma once
// The optimizer step of one rank: AdamW (ops/adamw.h) on all of the stage's parameters, or under
// ZeRO 1-3 (Megatron's distributed optimizer; Rajbhandari et al. 2020, Sec. 5.1-5.3) on this
// rank's block of every data-parallel bucket only, with AdamW state for those blocks alone and
// their summed gradients from GradientSync::shard_gradients. ZeRO 1 and 2 then all-gather each
// bucket's updated parameters; with overlap_param_gather the gathers are non-blocking and the
// next step waits for a chunk's buckets just before that chunk's first forward (Megatron-LM
// --overlap-param-gather). Under ZeRO 3 `params` is this rank's shard (its blocks back to back)
// and nothing is gathered here: parameter_gather.h gathers before each op that reads weights.

#include <vector>

#include "gradient_sync.h"
#include "memory_tracker.h"
#include "ops/adamw.h"
#include "process_groups.h"

namespace meshplan::executor {

class DistributedOptimizer {
 public:
  DistributedOptimizer(float* params, const float* grads, int64_t num_parameters,
                       const GradientSync& sync, const planner::Plan& plan, ProcessGroups& groups,
                       MemoryTracker& memory, const AdamWConfig& config);

  /// Step t (from 1) with the reduced gradients of GradientSync::finish().
  void step(int64_t t);
  /// Parameters of `chunk` are current (their gathers are complete).
  void wait_parameters(int chunk);
  void wait_all();

  /// AdamW moments (whole, or this rank's ZeRO blocks back to back).
  Tensor& first_moment() { return m_; }
  Tensor& second_moment() { return v_; }

 private:
  float* params_;
  const float* grads_;
  int64_t num_parameters_;
  const GradientSync& sync_;
  bool overlap_gather_;
  bool parameters_sharded_;  // ZeRO 3 with dp > 1
  int dp_;
  int dp_rank_;
  ProcessGroups& groups_;
  AdamWConfig config_;
  Tensor m_;
  Tensor v_;
  std::vector<MPI_Request> gathers_;  // [bucket], MPI_REQUEST_NULL when complete
};

}  // namespace meshplan::executor
