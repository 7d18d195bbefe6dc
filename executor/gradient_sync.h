#pragma once
// Gradient reductions of one rank's stage, bucket by bucket (dp_buckets.h).
//
// ZeRO 0 and 1, after the pipeline's backward work, in this order per buffer:
//  1. sequence parallel: one all-reduce over tp of the gradients of the tp-replicated
//     parameters of all the stage's model chunks (norms, row-parallel biases, learned
//     positions), which are partial because each rank saw only its sequence shard (Korthikanti
//     et al. 2022, Sec. 4.2.2), packed as Megatron-LM's finalize_model_grads does; with
//     qk_norm the q/k-norm gains join that message, with or without sequence parallelism, as
//     each rank normalised only its own heads (the same function's q_layernorm rule);
//  2. tied embeddings with pp > 1: one all-reduce of the word-embedding gradient over the
//     embedding group (first and last stage), as Megatron-LM does;
//  3. data parallel: ZeRO 0 all-reduces the gradients; ZeRO 1 (Megatron's distributed
//     optimizer, Rajbhandari et al. 2020, Sec. 5.1) reduce-scatters them, so each rank gets the
//     summed gradients of its blocks. Under a deepspeed plan (planner::zero_grad_all_reduce)
//     ZeRO 1 and 2 all-reduce each bucket instead and keep this rank's block of the sum, as
//     DeepSpeed does (stage_1_and_2.py allreduce_and_copy_with_multiple_ranks): the same sums,
//     twice the traffic, which the planner counts.
// With overlap_grad_reduce, step 1 runs once every chunk's last micro-batch's weight gradients
// are done, and step 3 starts for a bucket once its chunks are done (and step 1, with sequence
// parallelism), non-blocking, while later backward work runs. The embedding all-reduce, and the
// buckets holding a tied embedding, wait until the stage's op list has been issued in full: started
// earlier, the 2-rank all-reduce could block a stage that still owes its peer a pipeline send.
//
// ZeRO 2 and 3 (Rajbhandari et al. 2020, Sec. 5.2) keep only this rank's gradient partition:
// every micro-batch's gradients are reduce-scattered over dp, bucket by bucket, into an fp32
// accumulator that holds this rank's blocks alone (padded / dp elements), and the full-size
// buffer is zeroed and reused by the next micro-batch. A bucket's k-th reduce-scatter (k = 1..m)
// starts once every chunk it holds has completed the weight gradients of k micro-batches (after
// kBackward, or kBackwardWeight under zb-h1), so each bucket is reduce-scattered exactly m times
// a step and the message bytes are m times the padded buffer, as the planner counts them. The
// sum is linear, so a contribution may ride in any one of those rounds; what matters is that
// each enters exactly one, which before_gradient_write() guarantees by completing a chunk's
// pending rounds before anything writes into its gradients again.
// Steps 1 and 2 need this rank's whole gradient of a tensor, summed over the micro-batches, so
// those tensors (tp-replicated ones under sequence parallelism, the tied embedding of the
// embedding group) are deferred: before each of a bucket's first m - 1 rounds their gradients
// move into a side buffer of their own size (the rounds carry zeros there), and they come back
// for the last round after their one all-reduce: once every chunk's last weight gradient is
// done (step 1) or once the op list is done (step 2), so steps 1 and 2 issue the same messages as
// under ZeRO 0 and 1. Without overlap_grad_reduce every round completes before the next op.

#include <vector>

#include "dp_buckets.h"
#include "memory_tracker.h"
#include "parameters.h"
#include "process_groups.h"

namespace meshplan::executor {

class GradientSync {
 public:
  /// `grads` is the flat gradient buffer, padded_size = planner::dp_buffer_count elements.
  GradientSync(const std::vector<ParameterSpec>& specs, const std::vector<int>& chunk_of_spec,
               int num_chunks, float* grads, int64_t padded_size, const planner::Plan& plan,
               ProcessGroups& groups, MemoryTracker& memory);

  /// Before a step's op list (clears the ZeRO 2/3 accumulator and the counts).
  void begin_step();
  /// Before an op that adds into `chunk`'s gradients (B, W, or both): under ZeRO 2/3 completes
  /// the reduce-scatters still reading the buckets that hold the chunk.
  void before_gradient_write(int chunk);
  /// One more micro-batch's weight gradients of `chunk` are done.
  void micro_batch_done(int chunk);
  /// After the op list: the remaining reductions, all complete on return.
  void finish();

  /// ZeRO 1-3 with dp > 1: the optimizer updates this rank's block of every bucket.
  bool sharded() const { return sharded_; }
  const std::vector<DpBucket>& buckets() const { return buckets_; }
  /// After finish(), sharded: the summed gradient of this rank's block of `bucket` (block() / dp
  /// elements): at the bucket's start in the gradient buffer under ZeRO 1 (the in-place
  /// reduce-scatter puts it there), in the accumulator under ZeRO 2/3.
  const float* shard_gradients(const DpBucket& bucket) const;

 private:
  // A tensor whose gradient waits for a tp or embedding-group all-reduce (ZeRO 2/3).
  struct Deferred {
    int64_t begin = 0;  // in the flat buffer
    int64_t size = 0;
    int64_t side_offset = 0;  // in side_
    int chunk = 0;
    bool tied = false;  // restored at finish() (embedding group), else at the chunk's end
    bool restored = false;
  };

  // Whether `spec`'s gradient is partial over tp (sequence-parallel replicated, or q/k norm).
  bool tp_reduced_(const ParameterSpec& spec) const;
  void reduce_replicated_();
  void reduce_tied_embeddings_();
  void start_ready_buckets_(bool all);
  void chunk_final_(int chunk);
  // Starts a sharded bucket's reduction: a reduce-scatter, or DeepSpeed's all-reduce.
  MPI_Request start_shard_reduce_(const DpBucket& bucket);
  // Where this rank's summed block sits in the bucket once its reduction completes.
  int64_t own_block_offset_(const DpBucket& bucket) const;
  // ZeRO 2/3.
  void start_rounds_(bool at_finish);
  void complete_round_(size_t bucket);
  void restore_(bool tied, int chunk);

  const std::vector<ParameterSpec>& specs_;
  const std::vector<int>& chunk_of_spec_;
  float* grads_;
  bool sequence_parallel_;
  // tp > 1 with sequence parallelism or q/k norms: some replicated gradients are partial.
  bool replicated_partial_ = false;
  bool overlap_;
  bool sharded_;            // ZeRO 1-3 with dp > 1
  bool per_micro_batch_;    // ZeRO 2/3 with dp > 1
  bool all_reduce_shards_;  // ZeRO 1-2 under a deepspeed plan: buckets all-reduced
  int dp_;
  int64_t num_micro_batches_;
  ProcessGroups& groups_;
  MemoryTracker& memory_;
  std::vector<DpBucket> buckets_;
  std::vector<bool> holds_tied_embedding_;   // [bucket]
  std::vector<int64_t> micro_batches_done_;  // [chunk]
  std::vector<bool> chunk_final_flags_;      // [chunk] all m weight gradients done
  std::vector<bool> chunk_done_;             // [chunk] final, and replicated gradients reduced
  std::vector<bool> bucket_started_;
  std::vector<MPI_Request> pending_;
  // ZeRO 2/3.
  Tensor accumulator_;                  // padded / dp: this rank's block of every bucket
  std::vector<int64_t> rounds_;         // [bucket] reduce-scatters started this step
  std::vector<MPI_Request> in_flight_;  // [bucket]
  std::vector<Deferred> deferred_;
  Tensor side_;
};

}  // namespace meshplan::executor
