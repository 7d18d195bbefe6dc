#include "gpu/gpu_trainer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include "dp_buckets.h"
#include "gpu/cuda_check.h"
#include "gpu/kernels.h"
#include "meshplan/dp_buckets.h"
#include "mpi_check.h"

namespace meshplan::executor::gpu {

namespace {

// Most micro-batches between their forward and their backward at any point of the op list:
// how many activation sets the run holds (1 for 1F1B on one stage, m for GPipe).
int max_in_flight(const std::vector<planner::PipelineOp>& ops) {
  int in_flight = 0;
  int most = 1;
  for (const planner::PipelineOp& op : ops) {
    in_flight += op.kind == planner::OpKind::kForward ? 1 : 0;
    in_flight -= op.kind == planner::OpKind::kBackward ? 1 : 0;
    most = std::max(most, in_flight);
  }
  return most;
}

template <typename T>
void copy_to_device(T* device, const std::vector<T>& host, cudaStream_t stream) {
  MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T),
                                      cudaMemcpyHostToDevice, stream));
}

}  // namespace

GpuTrainer::GpuTrainer(const planner::Plan& plan, std::shared_ptr<const TokenSource> data,
                       const AdamWConfig& adamw, MPI_Comm world, double collective_timeout_seconds)
    : plan_(plan),
      groups_(plan.layout, plan.model.tied_embeddings, world, collective_timeout_seconds),
      dims_(make_shard_dims(plan, /*tp_rank=*/0, /*cp_rank=*/0)),
      data_(std::move(data)),
      adamw_(adamw) {
  specs_ = stage_parameter_specs(dims_, plan_, /*stage=*/0, &chunk_of_spec_);
  for (const ParameterSpec& spec : specs_) {
    num_parameters_ += spec.size;
  }
  padded_size_ = planner::dp_buffer_count(plan.layout, num_parameters_);
  for (const DpBucket& bucket : make_dp_buckets(plan, 0, {{0, num_parameters_}}, padded_size_)) {
    buckets_.emplace_back(bucket.begin, bucket.end);
  }
  schedule_ = planner::generate_schedule(plan.layout.schedule, plan.layout.pp, plan.layout.vpp,
                                         plan.layout.num_micro_batches(), true,
                                         plan.layout.microbatch_group);
  num_slots_ = max_in_flight(schedule_.stages[0]);
  MESHPLAN_CUDA_CHECK(cudaStreamCreate(&stream_));
  Carver sizing(nullptr);
  carve_(&sizing);
  arena_ = std::make_unique<DeviceArena>(sizing.total_bytes());
  Carver carver(arena_.get());
  carve_(&carver);
  cublas_ = std::make_unique<CublasHandle>(stream_);
  nccl_ = std::make_unique<NcclGroups>(groups_);
  std::vector<float> initial(static_cast<size_t>(padded_size_), 0.0f);
  initialize_parameters(initial.data(), specs_, kInitSeed);
  copy_to_device(params_, initial, stream_);
  MESHPLAN_CUDA_CHECK(
      cudaMemsetAsync(adam_m_, 0, static_cast<size_t>(num_parameters_) * 4, stream_));
  MESHPLAN_CUDA_CHECK(
      cudaMemsetAsync(adam_v_, 0, static_cast<size_t>(num_parameters_) * 4, stream_));
  // d(loss) / d(token loss) = 1 / (global_batch seq_length), as the CPU ModelChunk's loss_scale.
  const float loss_scale =
      1.0f / static_cast<float>(plan.layout.global_batch * plan.model.seq_length);
  copy_to_device(scratch_.d_losses, std::vector<float>(static_cast<size_t>(dims_.N), loss_scale),
                 stream_);
  const int num_layers = chunk_placement(plan_, 0, 0).num_layers;
  weights_.resize(1);
  grad_views_.resize(1);
  weights_[0].layers.resize(static_cast<size_t>(num_layers));
  grad_views_[0].layers.resize(static_cast<size_t>(num_layers));
  bind_weights(&weights_, params_, specs_, chunk_of_spec_);
  bind_weights(&grad_views_, grads_, specs_, chunk_of_spec_);
  model_ = std::make_unique<GpuModel>(dims_, weights_[0], grad_views_[0], *cublas_, scratch_);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `initial` goes out of scope next
}

GpuTrainer::~GpuTrainer() {
  model_.reset();
  nccl_.reset();
  cublas_.reset();
  arena_.reset();
  if (stream_ != nullptr) {
    cudaStreamDestroy(stream_);
  }
}

void GpuTrainer::carve_(Carver* carver) {
  params_ = carver->take<float>(padded_size_, "parameters");
  grads_ = carver->take<float>(padded_size_, "gradients");
  adam_m_ = carver->take<float>(num_parameters_, "AdamW m");
  adam_v_ = carver->take<float>(num_parameters_, "AdamW v");
  const int num_layers = chunk_placement(plan_, 0, 0).num_layers;
  slots_.clear();
  for (int s = 0; s < num_slots_; s++) {
    slots_.push_back(carve_micro_batch(carver, dims_, num_layers));
  }
  scratch_ = carve_scratch(carver, dims_);
}

double GpuTrainer::run_op_list_() {
  const planner::Layout& layout = plan_.layout;
  // Megatron-LM's sample order (data_source.h): this dp rank's share of the step's batch.
  const int64_t first_sample = steps_done_ * layout.global_batch +
                               groups_.coords().dp_rank * (layout.global_batch / layout.dp);
  std::vector<int> free_slots(static_cast<size_t>(num_slots_));
  for (int s = 0; s < num_slots_; s++) {
    free_slots[static_cast<size_t>(s)] = num_slots_ - 1 - s;
  }
  std::map<int64_t, int> slot_of;  // micro-batch -> slot
  std::vector<int32_t> tokens(static_cast<size_t>(dims_.N));
  std::vector<int32_t> targets(static_cast<size_t>(dims_.N));
  std::vector<float> losses(static_cast<size_t>(dims_.N));
  double loss_sum = 0;
  for (const planner::PipelineOp& op : schedule_.stages[0]) {
    if (op.kind == planner::OpKind::kForward) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      slot_of[op.micro_batch] = slot;
      GpuMicroBatch& mb = slots_[static_cast<size_t>(slot)];
      fill_micro_batch(*data_, first_sample + op.micro_batch * dims_.B, dims_.S, dims_.positions,
                       dims_.B, tokens.data(), targets.data());
      copy_to_device(mb.tokens, tokens, stream_);
      copy_to_device(mb.targets, targets, stream_);
      model_->forward(mb);
      MESHPLAN_CUDA_CHECK(cudaMemcpyAsync(losses.data(), mb.losses, losses.size() * 4,
                                          cudaMemcpyDeviceToHost, stream_));
      MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (const float loss : losses) {
        loss_sum += loss;  // in double, as ModelChunk sums its token losses
      }
    } else if (op.kind == planner::OpKind::kBackward) {
      const int slot = slot_of.at(op.micro_batch);
      model_->backward(slots_[static_cast<size_t>(slot)]);
      slot_of.erase(op.micro_batch);
      free_slots.push_back(slot);
    } else {
      // validate_plan_for_gpu admits one-stage schedules without a B/W split only.
      throw std::logic_error("GpuTrainer: an op list with transfers or a B/W split");
    }
  }
  return loss_sum;
}

void GpuTrainer::reduce_gradients_() {
  // ZeRO 0: every bucket all-reduced after the backward. With one model chunk the CPU executor's
  // overlap_grad_reduce, too, starts every bucket once the chunk's last backward is done
  // (gradient_sync.h), so there is no backward work left to overlap here.
  for (const auto& [begin, end] : buckets_) {
    nccl_->all_reduce_sum(CommGroup::kDp, grads_ + begin, end - begin, stream_);
  }
}

double GpuTrainer::compute_gradients() {
  nccl_->reset_traffic();
  MESHPLAN_CUDA_CHECK(
      cudaMemsetAsync(grads_, 0, static_cast<size_t>(padded_size_) * sizeof(float), stream_));
  const double loss_sum = run_op_list_();
  reduce_gradients_();
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Monitoring, not model traffic (not counted): every dp rank's loss sum.
  double total = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&loss_sum, &total, 1, MPI_DOUBLE, MPI_SUM, groups_.world(), &request));
  groups_.wait_world(&request, "the loss all-reduce");
  return total / static_cast<double>(plan_.layout.global_batch * plan_.model.seq_length);
}

StepOutcome GpuTrainer::train_step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  StepOutcome outcome;
  outcome.loss = compute_gradients();
  adamw_update(params_, adam_m_, adam_v_, grads_, num_parameters_, steps_done_ + 1,
               adamw_.learning_rate, adamw_.beta1, adamw_.beta2, adamw_.epsilon,
               adamw_.weight_decay, stream_);
  MESHPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  steps_done_++;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  MESHPLAN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  device_used_bytes_ = std::max(device_used_bytes_, static_cast<int64_t>(total_bytes - free_bytes));
  // The slowest rank's time (monitoring, not counted).
  const double local = std::chrono::duration<double>(Clock::now() - start).count();
  double slowest = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, groups_.world(), &request));
  groups_.wait_world(&request, "the step-time all-reduce");
  outcome.step = steps_done_;
  outcome.step_time_s = slowest;
  outcome.gemm_time_s = 0;  // not measured on the GPU (cuBLAS runs asynchronously)
  outcome.traffic = nccl_->traffic();
  return outcome;
}

std::vector<float> GpuTrainer::gradients() const {
  std::vector<float> host(static_cast<size_t>(num_parameters_));
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(host.data(), grads_, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<float> GpuTrainer::parameters() const {
  std::vector<float> host(static_cast<size_t>(num_parameters_));
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(host.data(), params_, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace meshplan::executor::gpu
