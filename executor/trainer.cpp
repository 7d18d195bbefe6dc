#include "trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "mpi_check.h"
#include "ops/gemm_clock.h"
#include "pipeline_runner.h"

namespace meshplan::executor {

Trainer::Trainer(const planner::Plan& plan, std::shared_ptr<const TokenSource> data,
                 const AdamWConfig& adamw, MPI_Comm world, double collective_timeout_seconds)
    : plan_(plan),
      groups_(plan.layout, plan.model.tied_embeddings, world, collective_timeout_seconds),
      dims_(make_shard_dims(plan, static_cast<int>(groups_.coords().tp_rank),
                            static_cast<int>(groups_.coords().cp_rank),
                            groups_.group_rank(CommGroup::kEp))),
      ctx_{dims_, groups_, memory_, &moe_stats_},
      data_(std::move(data)),
      adamw_(adamw) {
  const int stage = this->stage();
  const int vpp = static_cast<int>(plan.layout.vpp);
  specs_ = stage_parameter_specs(dims_, plan_, stage, &chunk_of_spec_);
  for (size_t i = 0; i < specs_.size(); i++) {
    num_parameters_ += specs_[i].size;
    if (specs_[i].expert) {
      num_expert_parameters_ += specs_[i].size;
    } else {
      dense_specs_.push_back(specs_[i]);
      dense_chunk_of_spec_.push_back(chunk_of_spec_[i]);
    }
  }
  // The dense prefix is what the data-parallel buckets cover; the experts follow it (ZeRO 0
  // only with experts, so unpadded: validate_plan_for_executor).
  const int64_t dense_padded =
      planner::dp_buffer_count(plan.layout, num_parameters_ - num_expert_parameters_);
  padded_size_ = dense_padded + num_expert_parameters_;
  grads_ = Tensor(&memory_, padded_size_);
  weights_.resize(static_cast<size_t>(vpp));
  grad_views_.resize(static_cast<size_t>(vpp));
  for (int c = 0; c < vpp; c++) {
    const ChunkPlacement placement = chunk_placement(plan_, stage, c);
    weights_[static_cast<size_t>(c)].layers.resize(static_cast<size_t>(placement.num_layers));
    grad_views_[static_cast<size_t>(c)].layers.resize(static_cast<size_t>(placement.num_layers));
  }
  bind_weights(&grad_views_, grads_.data(), specs_, chunk_of_spec_);
  sync_ = std::make_unique<GradientSync>(dense_specs_, dense_chunk_of_spec_, vpp, grads_.data(),
                                         dense_padded, plan_, groups_, memory_);
  schedule_ = planner::generate_schedule(plan.layout.schedule, plan.layout.pp, plan.layout.vpp,
                                         plan.layout.num_micro_batches(), true,
                                         plan.layout.microbatch_group);
  check_tag_range(schedule_);
  if (planner::zero_shards_parameters(plan.layout)) {
    init_zero3_parameters_(stage);
  } else {
    params_ = Tensor(&memory_, padded_size_);
    initialize_parameters(params_.data(), specs_, kInitSeed);
    bind_weights(&weights_, params_.data(), specs_, chunk_of_spec_);
  }
  const float loss_scale =
      1.0f / static_cast<float>(plan.layout.global_batch * plan.model.seq_length);
  for (int c = 0; c < vpp; c++) {
    chunks_.emplace_back(chunk_placement(plan_, stage, c), weights_[static_cast<size_t>(c)],
                         grad_views_[static_cast<size_t>(c)],
                         ChunkRecompute::of(plan.layout, plan.options.distribute_saved_activations),
                         plan.options.flash_attention, loss_scale);
  }
  optimizer_ = std::make_unique<DistributedOptimizer>(
      params_.data(), grads_.data(), num_parameters_, *sync_, plan_, groups_, memory_, adamw_);
}

void Trainer::init_zero3_parameters_(int stage) {
  // Only this rank's block of every bucket stays; the full initial values are drawn once, in a
  // temporary buffer.
  const int64_t dp = planner::grad_group_size(plan_.layout);  // dp x cp
  params_ = Tensor(&memory_, padded_size_ / dp);
  Tensor full(&memory_, padded_size_);
  initialize_parameters(full.data(), specs_, kInitSeed);
  const int64_t dp_rank = groups_.group_rank(CommGroup::kDp);
  for (const DpBucket& bucket : sync_->buckets()) {
    const int64_t block = bucket.block() / dp;
    std::copy_n(full.data() + bucket.begin + dp_rank * block, block,
                params_.data() + bucket.shard_offset);
  }
  int64_t ops_reading_weights = 0;
  for (const planner::PipelineOp& op : schedule_.stages[static_cast<size_t>(stage)]) {
    ops_reading_weights += op.kind == planner::OpKind::kForward ||
                           op.kind == planner::OpKind::kBackward ||
                           op.kind == planner::OpKind::kBackwardInput;
  }
  gather_ = std::make_unique<ParameterGather>(
      params_.data(), sync_->buckets(), padded_size_, &weights_, specs_, chunk_of_spec_,
      ops_reading_weights, plan_.options.overlap_param_gather, groups_, memory_);
}

double Trainer::compute_gradients() {
  groups_.reset_traffic();
  moe_stats_ = MoeStats{};
  std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
  sync_->begin_step();
  if (gather_) {
    gather_->begin_step();
  }
  const planner::Layout& layout = plan_.layout;
  const int64_t samples_per_dp_rank = layout.global_batch / layout.dp;
  PipelineStep step{
      schedule_,
      chunks_,
      *data_,
      *sync_,
      ctx_,
      stage(),
      steps_done_ * layout.global_batch + groups_.coords().dp_rank * samples_per_dp_rank,
      [this](int chunk) {
        if (gather_) {
          gather_->acquire();
        } else {
          optimizer_->wait_parameters(chunk);
        }
      },
      [this](int) {
        if (gather_) {
          gather_->release();
        }
      },
      planner::pipeline_scatter_gather(layout, plan_.options)};
  const double loss_sum = run_pipeline_step(step);
  sync_->finish();
  if (num_expert_parameters_ > 0) {
    // Megatron-Core reduces expert gradients over the expert data parallel group, once a step.
    groups_.all_reduce_sum(CommGroup::kExpertDp,
                           grads_.data() + (padded_size_ - num_expert_parameters_),
                           num_expert_parameters_);
  }
  // Monitoring, not model traffic (so not counted): the loss sums of the last stage's tp rank 0
  // of every dp rank, and every rank's part of the load-balancing losses (tp is 1 with experts).
  const double local[2] = {groups_.coords().tp_rank == 0 ? loss_sum : 0.0, moe_stats_.aux_loss};
  double total[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(local, total, 2, MPI_DOUBLE, MPI_SUM, groups_.world(), &request));
  groups_.wait_world(&request, "the loss all-reduce");
  return total[0] / static_cast<double>(layout.global_batch * plan_.model.seq_length) + total[1];
}

StepOutcome Trainer::train_step() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double gemm_start = gemm_seconds();
  StepOutcome outcome;
  outcome.loss = compute_gradients();
  optimizer_->step(steps_done_ + 1);
  steps_done_++;
  outcome.step = steps_done_;
  outcome.traffic = groups_.traffic();
  // The slowest rank's times (monitoring, not counted).
  const double local[2] = {std::chrono::duration<double>(Clock::now() - start).count(),
                           gemm_seconds() - gemm_start};
  double slowest[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(local, slowest, 2, MPI_DOUBLE, MPI_MAX, groups_.world(), &request));
  groups_.wait_world(&request, "the step-time all-reduce");
  outcome.step_time_s = slowest[0];
  outcome.gemm_time_s = slowest[1];
  return outcome;
}

int64_t Trainer::stored_parameters_() const {
  return gather_ ? params_.size() : num_parameters_;
}

void Trainer::wait_pending() {
  optimizer_->wait_all();
}

float* Trainer::mutable_parameters() {
  optimizer_->wait_all();
  return params_.data();
}

namespace {

// (name, full index, value) triples of every element of `specs` in `values`, as bytes.
std::string pack_parameters(const std::vector<ParameterSpec>& specs, const float* values) {
  std::string payload;
  auto append = [&payload](const void* data, size_t size) {
    payload.append(static_cast<const char*>(data), size);
  };
  for (const ParameterSpec& spec : specs) {
    const uint32_t name_size = static_cast<uint32_t>(spec.name.size());
    const int64_t count = spec.size;
    append(&name_size, sizeof(name_size));
    append(spec.name.data(), spec.name.size());
    append(&count, sizeof(count));
    for (int64_t i = 0; i < count; i++) {
      const int64_t index = spec.full_index(i);
      append(&index, sizeof(index));
      append(values + spec.offset + i, sizeof(float));
    }
  }
  return payload;
}

// Collective: every rank's `payload` concatenated in rank order on `root` (empty elsewhere).
std::string gather_payloads(const std::string& payload, int root, MPI_Comm world) {
  int size = 0;
  int rank = 0;
  MPI_CHECK(MPI_Comm_size(world, &size));
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  const int length = static_cast<int>(payload.size());
  std::vector<int> lengths(static_cast<size_t>(size));
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, world));
  std::vector<int> displacements(static_cast<size_t>(size), 0);
  for (int r = 1; r < size; r++) {
    displacements[r] = displacements[r - 1] + lengths[r - 1];
  }
  std::string all(rank == root ? static_cast<size_t>(displacements.back() + lengths.back()) : 0,
                  '\0');
  MPI_CHECK(MPI_Gatherv(payload.data(), length, MPI_CHAR, all.data(), lengths.data(),
                        displacements.data(), MPI_CHAR, root, world));
  return all;
}

// The full tensors, by name, from the triples of pack_parameters (any number concatenated).
std::map<std::string, std::vector<float>> unpack_parameters(const std::string& all) {
  std::map<std::string, std::vector<float>> full;
  size_t at = 0;
  auto read = [&all, &at](void* out, size_t bytes) {
    std::memcpy(out, all.data() + at, bytes);
    at += bytes;
  };
  while (at < all.size()) {
    uint32_t name_size = 0;
    read(&name_size, sizeof(name_size));
    std::string name = all.substr(at, name_size);
    at += name_size;
    int64_t count = 0;
    read(&count, sizeof(count));
    std::vector<float>& tensor = full[name];
    for (int64_t i = 0; i < count; i++) {
      int64_t index = 0;
      float value = 0;
      read(&index, sizeof(index));
      read(&value, sizeof(value));
      if (static_cast<int64_t>(tensor.size()) <= index) {
        tensor.resize(static_cast<size_t>(index) + 1, 0.0f);
      }
      tensor[static_cast<size_t>(index)] = value;
    }
  }
  return full;
}

}  // namespace

std::map<std::string, std::vector<float>> Trainer::gather_full_parameters(int root) {
  optimizer_->wait_all();
  Tensor gathered;
  const float* values = params_.data();
  if (gather_) {
    gathered = Tensor(&memory_, padded_size_);
    gather_->gather_into(gathered.data());
    values = gathered.data();
  }
  return unpack_parameters(gather_payloads(pack_parameters(specs_, values), root, groups_.world()));
}

std::string Trainer::shard_bytes() {
  optimizer_->wait_all();
  const Tensor& adam_m = optimizer_->first_moment();
  const Tensor& adam_v = optimizer_->second_moment();
  std::string bytes;
  auto append = [&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
  };
  const int64_t stored = stored_parameters_();
  const int64_t header[3] = {steps_done_, stored, adam_m.size()};
  append(header, sizeof(header));
  append(params_.data(), static_cast<size_t>(stored) * sizeof(float));
  append(adam_m.data(), static_cast<size_t>(adam_m.bytes()));
  append(adam_v.data(), static_cast<size_t>(adam_v.bytes()));
  return bytes;
}

void Trainer::load_shard_bytes(const std::string& bytes, const std::string& source) {
  optimizer_->wait_all();
  Tensor& adam_m = optimizer_->first_moment();
  Tensor& adam_v = optimizer_->second_moment();
  const int64_t stored = stored_parameters_();
  int64_t header[3] = {0, 0, 0};
  const size_t expected = sizeof(header) + static_cast<size_t>(stored) * sizeof(float) +
                          2 * static_cast<size_t>(adam_m.bytes());
  if (bytes.size() >= sizeof(header)) {
    std::memcpy(header, bytes.data(), sizeof(header));
  }
  // Say what differs: the header's counts first (a shard of another layout), then the size.
  if (bytes.size() >= sizeof(header) && header[1] != stored) {
    throw InputError(
        fmt::format("{}: checkpoint shard does not match this rank's parameters (it stores {} "
                    "parameters, this rank {})",
                    source, header[1], stored));
  }
  if (bytes.size() >= sizeof(header) && header[2] != adam_m.size()) {
    throw InputError(
        fmt::format("{}: checkpoint shard does not match this rank's optimizer state (it stores "
                    "{} AdamW moments, this rank {})",
                    source, header[2], adam_m.size()));
  }
  if (bytes.size() != expected) {
    throw InputError(fmt::format(
        "{}: checkpoint shard does not match this rank's parameters ({} bytes, expected {})",
        source, bytes.size(), expected));
  }
  const char* at = bytes.data() + sizeof(header);
  std::memcpy(params_.data(), at, static_cast<size_t>(stored) * sizeof(float));
  at += static_cast<size_t>(stored) * sizeof(float);
  std::memcpy(adam_m.data(), at, static_cast<size_t>(adam_m.bytes()));
  at += adam_m.bytes();
  std::memcpy(adam_v.data(), at, static_cast<size_t>(adam_v.bytes()));
  steps_done_ = header[0];
}

}  // namespace meshplan::executor
