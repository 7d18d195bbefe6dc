#include "distributed_optimizer.h"

#include <algorithm>

#include "mpi_check.h"

namespace meshplan::executor {

DistributedOptimizer::DistributedOptimizer(float* params, const float* grads,
                                           int64_t num_parameters, const GradientSync& sync,
                                           const planner::Plan& plan, ProcessGroups& groups,
                                           MemoryTracker& memory, const AdamWConfig& config)
    : params_(params),
      grads_(grads),
      num_parameters_(num_parameters),
      sync_(sync),
      overlap_gather_(plan.options.overlap_param_gather),
      parameters_sharded_(planner::zero_shards_parameters(plan.layout)),
      dp_(static_cast<int>(planner::grad_group_size(plan.layout))),  // dp x cp
      dp_rank_(groups.group_rank(CommGroup::kDp)),
      groups_(groups),
      config_(config),
      gathers_(sync.buckets().size(), MPI_REQUEST_NULL) {
  int64_t state = num_parameters;
  if (sync_.sharded()) {
    state = 0;
    for (const DpBucket& bucket : sync_.buckets()) {
      state += bucket.block() / dp_;
    }
  }
  m_ = Tensor(&memory, state);
  v_ = Tensor(&memory, state);
}

void DistributedOptimizer::step(int64_t t) {
  if (!sync_.sharded()) {
    adamw_update(params_, m_.data(), v_.data(), grads_, num_parameters_, t, config_);
    return;
  }
  const std::vector<DpBucket>& buckets = sync_.buckets();
  for (size_t b = 0; b < buckets.size(); b++) {
    const DpBucket& bucket = buckets[b];
    const int64_t block = bucket.block() / dp_;
    if (parameters_sharded_) {
      // ZeRO 3: the shard is the only copy; the next op that reads weights gathers it.
      adamw_update(params_ + bucket.shard_offset, m_.data() + bucket.shard_offset,
                   v_.data() + bucket.shard_offset, sync_.shard_gradients(bucket), block, t,
                   config_);
      continue;
    }
    adamw_update(params_ + bucket.begin + dp_rank_ * block, m_.data() + bucket.shard_offset,
                 v_.data() + bucket.shard_offset, sync_.shard_gradients(bucket), block, t, config_);
    gathers_[b] = groups_.iall_gather_in_place(CommGroup::kDp, params_ + bucket.begin, block);
    if (!overlap_gather_) {
      groups_.wait(&gathers_[b], CommGroup::kDp, "parameter all-gather");
    }
  }
}

void DistributedOptimizer::wait_parameters(int chunk) {
  const std::vector<DpBucket>& buckets = sync_.buckets();
  for (size_t b = 0; b < buckets.size(); b++) {
    if (gathers_[b] != MPI_REQUEST_NULL && buckets[b].first_chunk <= chunk &&
        chunk <= buckets[b].last_chunk) {
      groups_.wait(&gathers_[b], CommGroup::kDp, "parameter all-gather");
    }
  }
}

void DistributedOptimizer::wait_all() {
  groups_.wait_all(&gathers_, CommGroup::kDp, "parameter all-gathers");
}

}  // namespace meshplan::executor
