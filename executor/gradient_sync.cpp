#include "gradient_sync.h"

#include <algorithm>

#include "meshplan/dp_buckets.h"
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
      sharded_(planner::zero_shards_optimizer(plan.layout)),
      per_micro_batch_(planner::zero_shards_gradients(plan.layout)),
      all_reduce_shards_(sharded_ && planner::zero_grad_all_reduce(plan.layout, plan.options)),
      dp_(static_cast<int>(planner::grad_group_size(plan.layout))),  // dp x cp
      num_micro_batches_(plan.layout.num_micro_batches()),
      groups_(groups),
      memory_(memory),
      micro_batches_done_(static_cast<size_t>(num_chunks), 0),
      chunk_final_flags_(static_cast<size_t>(num_chunks), false),
      chunk_done_(static_cast<size_t>(num_chunks), false) {
  // The q/k-norm gains' gradients are partial over tp whatever sequence parallelism does: each
  // rank normalised only its heads (Megatron-Core finalize_model_grads.py
  // _allreduce_non_tensor_model_parallel_grads at d98e8a64 sums "q_layernorm" and "k_layernorm"
  // whenever qk_layernorm, beside the sequence-parallel norms, in one coalesced all-reduce).
  const bool multi_tp = groups_.size(CommGroup::kTp) > 1;
  replicated_partial_ =
      multi_tp &&
      (sequence_parallel_ || std::any_of(specs.begin(), specs.end(),
                                         [](const ParameterSpec& s) { return s.tp_partial; }));
  std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(num_chunks), {0, 0});
  for (size_t i = 0; i < specs.size(); i++) {
    auto& range = ranges[static_cast<size_t>(chunk_of_spec[i])];
    range.second = specs[i].offset + specs[i].size;
  }
  for (size_t c = 1; c < ranges.size(); c++) {
    ranges[c].first = ranges[c - 1].second;
    ranges[c].second = std::max(ranges[c].second, ranges[c].first);
  }
  buckets_ = make_dp_buckets(plan, static_cast<int>(groups_.coords().pp_rank), ranges, padded_size);
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
  if (!per_micro_batch_) {
    return;
  }
  accumulator_ = Tensor(&memory_, padded_size / dp_);
  rounds_.assign(buckets_.size(), 0);
  in_flight_.assign(buckets_.size(), MPI_REQUEST_NULL);
  int64_t side_size = 0;
  for (size_t i = 0; i < specs_.size(); i++) {
    const bool tied = embedding_group && is_tied_embedding(specs_[i]);
    if (tied || (replicated_partial_ && tp_reduced_(specs_[i]))) {
      deferred_.push_back({specs_[i].offset, specs_[i].size, side_size, chunk_of_spec_[i], tied});
      side_size += specs_[i].size;
    }
  }
  side_ = Tensor(&memory_, side_size);
}

void GradientSync::begin_step() {
  std::fill(micro_batches_done_.begin(), micro_batches_done_.end(), 0);
  std::fill(chunk_final_flags_.begin(), chunk_final_flags_.end(), false);
  std::fill(chunk_done_.begin(), chunk_done_.end(), false);
  std::fill(bucket_started_.begin(), bucket_started_.end(), false);
  if (per_micro_batch_) {
    std::fill(accumulator_.data(), accumulator_.data() + accumulator_.size(), 0.0f);
    std::fill(side_.data(), side_.data() + side_.size(), 0.0f);
    std::fill(rounds_.begin(), rounds_.end(), 0);
    for (Deferred& d : deferred_) {
      d.restored = false;
    }
  }
}

void GradientSync::before_gradient_write(int chunk) {
  if (!per_micro_batch_) {
    return;
  }
  for (size_t b = 0; b < buckets_.size(); b++) {
    if (buckets_[b].first_chunk <= chunk && chunk <= buckets_[b].last_chunk) {
      complete_round_(b);
    }
  }
}

void GradientSync::micro_batch_done(int chunk) {
  if (++micro_batches_done_[static_cast<size_t>(chunk)] == num_micro_batches_) {
    chunk_final_(chunk);
  }
  if (per_micro_batch_) {
    start_rounds_(false);
  }
}

void GradientSync::chunk_final_(int chunk) {
  if (!per_micro_batch_ && !overlap_) {
    return;  // everything runs in finish()
  }
  chunk_final_flags_[static_cast<size_t>(chunk)] = true;
  if (!replicated_partial_) {
    chunk_done_[static_cast<size_t>(chunk)] = true;
  } else if (std::all_of(chunk_final_flags_.begin(), chunk_final_flags_.end(),
                         [](bool final) { return final; })) {
    // The replicated gradients of every chunk in one all-reduce, once the last chunk is final
    // (Megatron-LM's finalize_model_grads); under ZeRO 2/3 they come back whole first.
    if (per_micro_batch_) {
      for (size_t c = 0; c < chunk_final_flags_.size(); c++) {
        before_gradient_write(static_cast<int>(c));
        restore_(false, static_cast<int>(c));
      }
    }
    reduce_replicated_();
    std::fill(chunk_done_.begin(), chunk_done_.end(), true);
  }
  if (!per_micro_batch_) {
    start_ready_buckets_(false);
  }
}

bool GradientSync::tp_reduced_(const ParameterSpec& spec) const {
  return (sequence_parallel_ && spec.tp_replicated) || spec.tp_partial;
}

void GradientSync::reduce_replicated_() {
  if (!replicated_partial_) {
    return;
  }
  // Pack the stage's partial replicated gradients into one message, as one all-reduce.
  int64_t total = 0;
  for (const ParameterSpec& spec : specs_) {
    total += tp_reduced_(spec) ? spec.size : 0;
  }
  if (total == 0) {
    return;
  }
  Tensor packed(&memory_, total);
  int64_t at = 0;
  for (const ParameterSpec& spec : specs_) {
    if (tp_reduced_(spec)) {
      std::copy_n(grads_ + spec.offset, spec.size, packed.data() + at);
      at += spec.size;
    }
  }
  groups_.all_reduce_sum(CommGroup::kTp, packed.data(), total);
  at = 0;
  for (const ParameterSpec& spec : specs_) {
    if (tp_reduced_(spec)) {
      std::copy_n(packed.data() + at, spec.size, grads_ + spec.offset);
      at += spec.size;
    }
  }
}

void GradientSync::reduce_tied_embeddings_() {
  if (groups_.size(CommGroup::kEmbedding) <= 1) {
    return;
  }
  for (const ParameterSpec& spec : specs_) {
    if (is_tied_embedding(spec)) {
      groups_.all_reduce_sum(CommGroup::kEmbedding, grads_ + spec.offset, spec.size);
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
      pending_.push_back(start_shard_reduce_(bucket));
    } else {
      pending_.push_back(
          groups_.iall_reduce_sum(CommGroup::kDp, grads_ + bucket.begin, bucket.block()));
    }
  }
}

void GradientSync::start_rounds_(bool at_finish) {
  for (size_t b = 0; b < buckets_.size(); b++) {
    const DpBucket& bucket = buckets_[b];
    int64_t available = num_micro_batches_;
    for (int c = bucket.first_chunk; c <= bucket.last_chunk; c++) {
      available = std::min(available, micro_batches_done_[static_cast<size_t>(c)]);
    }
    while (rounds_[b] < available) {
      const bool last = rounds_[b] + 1 == num_micro_batches_;
      if (last && holds_tied_embedding_[b] && !at_finish) {
        break;  // after the embedding all-reduce, in finish()
      }
      if (last && replicated_partial_ && !chunk_done_.front()) {
        break;  // after the replicated gradients' tp all-reduce (chunk_final_)
      }
      complete_round_(b);
      if (!last) {
        // Deferred gradients not yet reduced wait in the side buffer.
        for (Deferred& d : deferred_) {
          const int64_t begin = std::max(d.begin, bucket.begin);
          const int64_t end = std::min(d.begin + d.size, bucket.end);
          if (d.restored || begin >= end) {
            continue;
          }
          float* side = side_.data() + d.side_offset + (begin - d.begin);
          for (int64_t i = begin; i < end; i++) {
            *side++ += grads_[i];
            grads_[i] = 0.0f;
          }
        }
      }
      in_flight_[b] = start_shard_reduce_(bucket);
      rounds_[b]++;
      if (!overlap_) {
        complete_round_(b);
      }
    }
  }
}

void GradientSync::complete_round_(size_t b) {
  if (in_flight_[b] == MPI_REQUEST_NULL) {
    return;
  }
  groups_.wait(&in_flight_[b], CommGroup::kDp, "gradient reduction");
  const DpBucket& bucket = buckets_[b];
  const int64_t block = bucket.block() / dp_;
  const float* mine = grads_ + bucket.begin + own_block_offset_(bucket);
  float* sum = accumulator_.data() + bucket.shard_offset;
  for (int64_t i = 0; i < block; i++) {
    sum[i] += mine[i];
  }
  std::fill(grads_ + bucket.begin, grads_ + bucket.end, 0.0f);
}

void GradientSync::restore_(bool tied, int chunk) {
  for (Deferred& d : deferred_) {
    if (d.tied != tied || d.restored || (!tied && d.chunk != chunk)) {
      continue;
    }
    const float* side = side_.data() + d.side_offset;
    for (int64_t i = 0; i < d.size; i++) {
      grads_[d.begin + i] += side[i];
    }
    d.restored = true;
  }
}

void GradientSync::finish() {
  if (per_micro_batch_) {
    for (size_t b = 0; b < buckets_.size(); b++) {
      complete_round_(b);
    }
    restore_(true, 0);
    reduce_tied_embeddings_();
    start_rounds_(true);
    for (size_t b = 0; b < buckets_.size(); b++) {
      complete_round_(b);
    }
    return;
  }
  if (!std::all_of(chunk_done_.begin(), chunk_done_.end(), [](bool done) { return done; })) {
    reduce_replicated_();  // not overlapped: every chunk's at once
    std::fill(chunk_done_.begin(), chunk_done_.end(), true);
  }
  reduce_tied_embeddings_();
  start_ready_buckets_(true);
  if (!pending_.empty()) {
    groups_.wait_all(&pending_, CommGroup::kDp, "gradient reductions");
    pending_.clear();
  }
  if (all_reduce_shards_) {
    // ZeRO 1 all-reduced whole buckets: this rank's block moves to the bucket's start, where
    // the reduce-scatter would have left it (shard_gradients).
    for (const DpBucket& bucket : buckets_) {
      const int64_t offset = own_block_offset_(bucket);
      if (offset > 0) {
        std::copy_n(grads_ + bucket.begin + offset, bucket.block() / dp_, grads_ + bucket.begin);
      }
    }
  }
}

MPI_Request GradientSync::start_shard_reduce_(const DpBucket& bucket) {
  if (all_reduce_shards_) {
    return groups_.iall_reduce_sum(CommGroup::kDp, grads_ + bucket.begin, bucket.block());
  }
  return groups_.ireduce_scatter_in_place(CommGroup::kDp, grads_ + bucket.begin,
                                          bucket.block() / dp_);
}

int64_t GradientSync::own_block_offset_(const DpBucket& bucket) const {
  // The in-place reduce-scatter leaves this rank's block at the bucket's start; the all-reduce
  // leaves every block where it is, this rank's at its index in the group.
  return all_reduce_shards_ ? groups_.group_rank(CommGroup::kDp) * (bucket.block() / dp_) : 0;
}

const float* GradientSync::shard_gradients(const DpBucket& bucket) const {
  return per_micro_batch_ ? accumulator_.data() + bucket.shard_offset : grads_ + bucket.begin;
}

}  // namespace meshplan::executor
