#include "parameter_gather.h"

#include <algorithm>

#include "mpi_check.h"

namespace meshplan::executor {

ParameterGather::ParameterGather(const float* shard, const std::vector<DpBucket>& buckets,
                                 int64_t padded_size, std::vector<ChunkWeights>* weights,
                                 const std::vector<ParameterSpec>& specs,
                                 const std::vector<int>& chunk_of_spec, int64_t ops_per_step,
                                 bool prefetch, ProcessGroups& groups, MemoryTracker& memory)
    : shard_(shard),
      buckets_(buckets),
      padded_size_(padded_size),
      weights_(weights),
      specs_(specs),
      chunk_of_spec_(chunk_of_spec),
      ops_per_step_(ops_per_step),
      prefetch_(prefetch),
      dp_(groups.size(CommGroup::kDp)),
      dp_rank_(groups.group_rank(CommGroup::kDp)),  // in the dp x cp gradient group
      groups_(groups),
      memory_(memory) {}

void ParameterGather::start_gather_() {
  gathered_ = Tensor(&memory_, padded_size_);
  requests_.clear();
  for (const DpBucket& bucket : buckets_) {
    // In place: this rank's block goes to its position in the bucket, the rest arrives.
    const int64_t block = bucket.block() / dp_;
    std::copy_n(shard_ + bucket.shard_offset, block,
                gathered_.data() + bucket.begin + dp_rank_ * block);
    requests_.push_back(
        groups_.iall_gather_in_place(CommGroup::kDp, gathered_.data() + bucket.begin, block));
  }
}

void ParameterGather::wait_gather_() {
  groups_.wait_all(&requests_, CommGroup::kDp, "ZeRO-3 parameter all-gather");
  requests_.clear();
}

void ParameterGather::acquire() {
  if (gathered_.empty()) {
    start_gather_();
  }
  wait_gather_();
  acquired_++;
  bind_weights(weights_, gathered_.data(), specs_, chunk_of_spec_);
}

void ParameterGather::release() {
  for (ChunkWeights& w : *weights_) {
    const size_t num_layers = w.layers.size();
    w = ChunkWeights{};
    w.layers.resize(num_layers);
  }
  gathered_.reset();
  if (prefetch_ && acquired_ < ops_per_step_) {
    start_gather_();
  }
}

void ParameterGather::gather_into(float* full) {
  for (const DpBucket& bucket : buckets_) {
    const int64_t block = bucket.block() / dp_;
    groups_.all_gather(CommGroup::kDp, full + bucket.begin, shard_ + bucket.shard_offset, block);
  }
}

}  // namespace meshplan::executor
