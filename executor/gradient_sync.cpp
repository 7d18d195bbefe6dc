#include "gradient_sync.h"

#include <algorithm>

#include "mpi_check.h"

namespace meshplan::executor {

GradientSync::GradientSync(const std::vector<ParameterSpec>& specs,
                           const std::vector<int>& chunk_of_spec, int num_chunks, float* grads,
                           int64_t padded_size, const planner::Plan& plan, ProcessGroups& groups,
                           MemoryTracker& memory)
    : specs_(specs),
      chunk_of_spec_(chunk_of_spec),
      grads_(grads),
      padded_size_(padded_size),
      chunk_ranges_(static_cast<size_t>(num_chunks), {0, 0}),
      sequence_parallel_(plan.layout.sequence_parallel),
      overlap_(plan.options.overlap_grad_reduce),
      zero_(plan.layout.zero),
      dp_(static_cast<int>(plan.layout.dp)),
      groups_(groups),
      memory_(memory),
      chunk_done_(static_cast<size_t>(num_chunks), false) {
  for (int c = 0; c < num_chunks; c++) {
    int64_t begin = -1;
    int64_t end = -1;
    for (size_t i = 0; i < specs.size(); i++) {
      if (chunk_of_spec[i] == c) {
        begin = begin < 0 ? specs[i].offset : begin;
        end = specs[i].offset + specs[i].size;
      }
    }
    chunk_ranges_[static_cast<size_t>(c)] = {std::max<int64_t>(begin, 0),
                                             std::max<int64_t>(end, 0)};
  }
}

void GradientSync::chunk_final(int chunk) {
  if (!overlap_ || zero_ != 0) {
    return;  // everything runs in finish()
  }
  reduce_replicated_(chunk);
  start_data_parallel_(chunk);
  chunk_done_[static_cast<size_t>(chunk)] = true;
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

void GradientSync::start_data_parallel_(int chunk) {
  if (dp_ <= 1 || zero_ != 0) {
    return;
  }
  const auto [begin, end] = chunk_ranges_[static_cast<size_t>(chunk)];
  for (int64_t at = begin; at < end; at += kDpBucketElements) {
    const int64_t count = std::min(kDpBucketElements, end - at);
    pending_.push_back(groups_.iall_reduce_sum(CommGroup::kDp, grads_ + at, count));
  }
}

void GradientSync::finish() {
  for (size_t c = 0; c < chunk_done_.size(); c++) {
    if (!chunk_done_[c]) {
      reduce_replicated_(static_cast<int>(c));
      start_data_parallel_(static_cast<int>(c));
    }
  }
  if (!pending_.empty()) {
    MPI_CHECK(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    pending_.clear();
  }
  std::fill(chunk_done_.begin(), chunk_done_.end(), false);
  if (groups_.size(CommGroup::kEmbedding) > 1) {
    for (const ParameterSpec& spec : specs_) {
      if (spec.slot == Slot::kWte || (spec.slot == Slot::kLmHead && spec.name == "wte.weight")) {
        groups_.all_reduce_sum(CommGroup::kEmbedding, grads_ + spec.offset, spec.size);
      }
    }
  }
  if (dp_ > 1 && zero_ == 1) {
    const int64_t shard = padded_size_ / dp_;
    if (shard_.empty()) {
      shard_ = Tensor(&memory_, shard);
    }
    groups_.reduce_scatter(CommGroup::kDp, shard_.data(), grads_, shard);
  }
}

}  // namespace meshplan::executor
