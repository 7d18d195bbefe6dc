#pragma once
// One rank's training on one GPU, fp32 (issue 13 §2's equivalence mode): the CPU Trainer's
// parameters (same flat layout, same initial values), data order and loss, with the model on the
// device (gpu_model.h), fp32 AdamW (ops/adamw.h's update, as a kernel) and, with dp > 1, the
// ZeRO 0 gradient all-reduce bucket by bucket over NCCL's dp communicator (the planner's buckets,
// dp_buckets.h, so calls and bytes are counted as the CPU executor counts them). Every device
// buffer comes from one arena sized exactly for the run; nothing is allocated inside a step.
//
// Runs only what validate_plan_for_gpu (gpu_execute.h) accepts: tp = pp = vpp = cp = ep = 1, no
// sequence parallelism, ZeRO 0, no recompute, flash attention, fp32. The current CUDA device
// must be set.

#include <mpi.h>

#include <memory>
#include <vector>

#include "data_source.h"
#include "gpu/device_arena.h"
#include "gpu/gpu_model.h"
#include "gpu/linear.h"
#include "gpu/nccl_groups.h"
#include "meshplan/schedule.h"
#include "ops/adamw.h"
#include "process_groups.h"
#include "trainer.h"

namespace meshplan::executor::gpu {

class GpuTrainer {
 public:
  /// Collective over `world` (size plan.num_gpus): the process groups and NCCL communicators.
  GpuTrainer(const planner::Plan& plan, std::shared_ptr<const TokenSource> data,
             const AdamWConfig& adamw, MPI_Comm world, double collective_timeout_seconds);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  /// One optimizer step (collective): loss (global batch mean), slowest rank's time, traffic.
  StepOutcome train_step();
  /// The forward and backward of one step and the dp all-reduce, without the optimizer (as
  /// Trainer::compute_gradients): returns the global batch's mean token loss on every rank;
  /// gradients() then holds the reduced gradients.
  double compute_gradients();

  int64_t steps_done() const { return steps_done_; }
  int stage() const { return 0; }
  const DeviceArena& arena() const { return *arena_; }
  /// Largest device memory in use seen after a step: cudaMemGetInfo's total - free (the CUDA
  /// context, cuBLAS and NCCL workspaces and any other process on the GPU included).
  int64_t device_used_bytes() const { return device_used_bytes_; }
  int64_t num_parameters() const { return num_parameters_; }
  /// The parameters and the gradients (flat layout of parameters.h) copied to the host.
  std::vector<float> parameters() const;
  std::vector<float> gradients() const;
  const std::vector<ParameterSpec>& specs() const { return specs_; }

 private:
  void carve_(Carver* carver);
  double run_op_list_();
  void reduce_gradients_();

  planner::Plan plan_;
  ProcessGroups groups_;
  ShardDims dims_;
  std::shared_ptr<const TokenSource> data_;
  AdamWConfig adamw_;
  std::vector<ParameterSpec> specs_;
  std::vector<int> chunk_of_spec_;
  int64_t num_parameters_ = 0;
  int64_t padded_size_ = 0;  // planner::dp_buffer_count
  planner::PipelineSchedule schedule_;
  int num_slots_ = 1;  // micro-batches in flight at once in the op list
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceArena> arena_;
  std::unique_ptr<CublasHandle> cublas_;
  std::unique_ptr<NcclGroups> nccl_;
  float* params_ = nullptr;  // (padded_size_)
  float* grads_ = nullptr;   // (padded_size_)
  float* adam_m_ = nullptr;  // (num_parameters_)
  float* adam_v_ = nullptr;  // (num_parameters_)
  std::vector<ChunkWeights> weights_;
  std::vector<ChunkWeights> grad_views_;
  std::vector<GpuMicroBatch> slots_;
  GpuScratch scratch_{};
  std::unique_ptr<GpuModel> model_;
  std::vector<std::pair<int64_t, int64_t>> buckets_;  // dp all-reduce ranges [begin, end)
  int64_t steps_done_ = 0;
  int64_t device_used_bytes_ = 0;
};

}  // namespace meshplan::executor::gpu
