#include "gradient_sync.h"

#include <algorithm>

#include "mpi_check.h"

namespace meshplan::executor {

namespace {

bool is_tied_embedding(const ParameterSpec& spec) {
  return spec.slot == Slot::kWte || (spec.slot == Slot::kLmHead && spec.name == "wte.weight");
}

}  // namespace

GradientSync::GradientSync(const std::vector<ParameterSpec>& specs,
                           const std::vector<int>& chunk_of_spec, int num_chunks, float* grads,
                           int64_t padded_size, const planner::Plan& plan, ProcessGroups& groups,
                           MemoryTracker& memory)
    : specs_(specs),
      chunk_of_spec_(chunk_of_spec),
      grads_(grads),
      sequence_parallel_(plan.layout.sequence_parallel),
      overlap_(plan.options.overlap_grad_reduce),
      sharded_(plan.layout.zero == 1 && plan.layout.dp > 1),
      dp_(static_cast<int>(plan.layout.dp)),
      groups_(groups),
      memory_(memory),
      chunk_done_(static_cast<size_t>(num_chunks), false) {
  std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(num_chunks), {0, 0});
  for (size_t i = 0; i < specs.size(); i++) {
    auto& range = ranges[static_cast<size_t>(chunk_of_spec[i])];
    range.second = specs[i].offset + specs[i].size;
  }
  for (size_t c = 1; c < ranges.size(); c++) {
    ranges[c].first = ranges[c - 1].second;
    ranges[c].second = std::max(ranges[c].second, ranges[c].first);
  }
  buckets_ = make_dp_buckets(ranges, padded_size, sharded_ ? dp_ : 1);
  const bool embedding_group = groups_.size(CommGroup::kEmbedding) > 1;
  for (const DpBucket& bucket : buckets_) {
    bool tied = false;
    for (const ParameterSpec& spec : specs_) {
      tied = tied || (embedding_group && is_tied_embedding(spec) && spec.offset < bucket.end &&
                      spec.offset + spec.size > bucket.begin);
    }
    holds_tied_embedding_.push_back(tied);
  }
  bucket_started_.assign(buckets_.size(), false);
}

void GradientSync::chunk_final(int chunk) {
  if (!overlap_) {
    return;  // everything runs in finish()
  }
  reduce_replicated_(chunk);
  chunk_done_[static_cast<size_t>(chunk)] = true;
  start_ready_buckets_(false);
}

void GradientSync::reduce_replicated_(int chunk) {
  if (!sequence_parallel_) {
    return;
  }
  // Pack the chunk's replicated gradients into one message, as one all-reduce.
  int64_t total = 0;
  for (size_t i = 0; i < specs_.size(); i++) {
    if (chunk_of_spec_[i] == chunk && specs_[i].tp_replicated) {
      total += specs_[i].size;
    }
  }
  if (total == 0) {
    return;
  }
  Tensor packed(&memory_, total);
  int64_t at = 0;
  for (size_t i = 0; i < specs_.size(); i++) {
    if (chunk_of_spec_[i] == chunk && specs_[i].tp_replicated) {
      std::copy_n(grads_ + specs_[i].offset, specs_[i].size, packed.data() + at);
      at += specs_[i].size;
    }
  }
  groups_.all_reduce_sum(CommGroup::kTp, packed.data(), total);
  at = 0;
  for (size_t i = 0; i < specs_.size(); i++) {
    if (chunk_of_spec_[i] == chunk && specs_[i].tp_replicated) {
      std::copy_n(packed.data() + at, specs_[i].size, grads_ + specs_[i].offset);
      at += specs_[i].size;
    }
  }
}

void GradientSync::start_ready_buckets_(bool all) {
  if (dp_ <= 1) {
    return;
  }
  for (size_t b = 0; b < buckets_.size(); b++) {
    const DpBucket& bucket = buckets_[b];
    bool ready = all || !holds_tied_embedding_[b];
    for (int c = bucket.first_chunk; c <= bucket.last_chunk && ready; c++) {
      ready = chunk_done_[static_cast<size_t>(c)];
    }
    if (bucket_started_[b] || !ready) {
      continue;
    }
    bucket_started_[b] = true;
    if (sharded_) {
      pending_.push_back(groups_.ireduce_scatter_in_place(CommGroup::kDp, grads_ + bucket.begin,
                                                          bucket.block() / dp_));
    } else {
      pending_.push_back(
          groups_.iall_reduce_sum(CommGroup::kDp, grads_ + bucket.begin, bucket.block()));
    }
  }
}

void GradientSync::finish() {
  for (size_t c = 0; c < chunk_done_.size(); c++) {
    if (!chunk_done_[c]) {
      reduce_replicated_(static_cast<int>(c));
      chunk_done_[c] = true;
    }
  }
  if (groups_.size(CommGroup::kEmbedding) > 1) {
    for (const ParameterSpec& spec : specs_) {
      if (is_tied_embedding(spec)) {
        groups_.all_reduce_sum(CommGroup::kEmbedding, grads_ + spec.offset, spec.size);
      }
    }
  }
  start_ready_buckets_(true);
  if (!pending_.empty()) {
    MPI_CHECK(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    pending_.clear();
  }
  std::fill(chunk_done_.begin(), chunk_done_.end(), false);
  std::fill(bucket_started_.begin(), bucket_started_.end(), false);
}

}  // namespace meshplan::executor
