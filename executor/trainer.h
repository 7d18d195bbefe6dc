#pragma once
// One rank's share of training a plan: its parameters (flat buffer), gradients, AdamW state
// (whole, or its ZeRO shard), its model chunks, the schedule's op list for its stage, and the
// gradient reductions. train_step() is collective over the world communicator.

#include <mpi.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data_source.h"
#include "distributed_optimizer.h"
#include "gradient_sync.h"
#include "meshplan/executor.h"
#include "meshplan/plan_file.h"
#include "meshplan/schedule.h"
#include "model_chunk.h"
#include "ops/adamw.h"
#include "parameter_gather.h"
#include "process_groups.h"

namespace meshplan::executor {

struct StepOutcome {
  int64_t step = 0;        // counted from 1
  double loss = 0;         // mean token loss of the global batch, on every rank
  double step_time_s = 0;  // slowest rank's wall time for the step
  double gemm_time_s = 0;  // largest time any rank spent in GEMMs during the step
  TrafficCounts traffic;   // this rank's collective calls and message bytes during the step
};

class Trainer {
 public:
  /// Collective over `world` (size plan.num_gpus). The plan must have passed
  /// validate_plan_for_executor. Every wait on another rank has the deadline
  /// `collective_timeout_seconds` (executor/watchdog.h).
  Trainer(const planner::Plan& plan, std::shared_ptr<const TokenSource> data,
          const AdamWConfig& adamw, MPI_Comm world,
          double collective_timeout_seconds = kDefaultCollectiveTimeoutSeconds);

  StepOutcome train_step();
  /// The forward and backward of one step and the gradient reductions, without the optimizer:
  /// returns the global batch's mean token loss (on every rank); gradients() then holds the
  /// reduced gradients (with dp > 1: under ZeRO 1 only this rank's block of each bucket, at the
  /// bucket's start; under ZeRO 2 and 3 none, the blocks are in GradientSync's accumulator).
  double compute_gradients();

  int64_t steps_done() const { return steps_done_; }
  int stage() const { return static_cast<int>(groups_.coords().pp_rank); }
  const ProcessGroups& groups() const { return groups_; }
  const MemoryTracker& memory() const { return memory_; }
  /// Parameters this rank allocates (without the ZeRO padding).
  int64_t num_parameters() const { return num_parameters_; }
  const std::vector<ParameterSpec>& specs() const { return specs_; }
  /// The last step's mixture-of-experts report (routing counts, load-balancing loss).
  const MoeStats& moe_stats() const { return moe_stats_; }
  /// Completes the parameter gathers a step left running (overlap_param_gather): call before
  /// the trainer goes away, or MPI would still write into its freed buffers.
  void wait_pending();
  /// The parameters this rank stores (every pending ZeRO gather completed first): all of them,
  /// in the flat layout, or under ZeRO 3 with dp > 1 its blocks back to back.
  float* mutable_parameters();
  const float* gradients() const { return grads_.data(); }

  /// Collective: the full model on `root` (name -> full tensor, row-major), assembled from every
  /// rank's shards; empty elsewhere.
  std::map<std::string, std::vector<float>> gather_full_parameters(int root);

  /// This rank's checkpoint shard (parameters, AdamW moments, step) as bytes, and back. Loading
  /// throws InputError naming `source` when the shard does not fit this rank.
  std::string shard_bytes();
  void load_shard_bytes(const std::string& bytes, const std::string& source);

 private:
  int64_t stored_parameters_() const;  // in params_ and in a checkpoint shard
  /// ZeRO 3 with dp > 1: params_ = this rank's blocks of the initial values; gather_ set up.
  void init_zero3_parameters_(int stage);

  planner::Plan plan_;
  MemoryTracker memory_;
  ProcessGroups groups_;
  ShardDims dims_;
  MoeStats moe_stats_;
  RankContext ctx_;
  std::shared_ptr<const TokenSource> data_;
  AdamWConfig adamw_;
  std::vector<ParameterSpec> specs_;
  std::vector<int> chunk_of_spec_;
  std::vector<ParameterSpec> dense_specs_;  // specs_ less the routed experts (a prefix of it)
  std::vector<int> dense_chunk_of_spec_;
  int64_t num_parameters_ = 0;
  int64_t num_expert_parameters_ = 0;  // the buffer's last ones (stage_parameter_specs)
  int64_t padded_size_ = 0;            // planner::dp_buffer_count: a multiple of dp under ZeRO 1-3
  Tensor params_;  // padded_size_ elements, or this rank's padded_size_ / dp under ZeRO 3
  Tensor grads_;
  std::vector<ChunkWeights> weights_;
  std::vector<ChunkWeights> grad_views_;
  std::vector<ModelChunk> chunks_;
  planner::PipelineSchedule schedule_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<DistributedOptimizer> optimizer_;
  std::unique_ptr<ParameterGather> gather_;  // ZeRO 3 with dp > 1
  int64_t steps_done_ = 0;
};

}  // namespace meshplan::executor
