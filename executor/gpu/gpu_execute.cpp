#include "gpu/gpu_execute.h"

#include <fmt/format.h>

#include "execute_parts.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_trainer.h"
#include "meshplan/errors.h"
#include "mpi_check.h"

namespace meshplan::executor::gpu {

namespace {

// The flash-attention kernel's largest head (flash_attention.cu, kMaxHeadSize).
constexpr int64_t kMaxFlashHeadDim = 256;
// gridDim.y's largest value: 65535 (CUDA C++ Programming Guide, "Compute Capabilities").
constexpr int64_t kMaxGridY = 65535;

[[noreturn]] void refuse(const std::string& source, const std::string& field,
                         const std::string& what, const std::string& value) {
  throw InputError(
      fmt::format("{}: {}: the GPU executor {}, issue 13 ({})", source, field, what, value));
}

void refuse_parallelism(const planner::Layout& layout, const std::string& source) {
  const std::pair<const char*, int64_t> sizes[] = {{"layout.tp", layout.tp},
                                                   {"layout.pp", layout.pp},
                                                   {"layout.vpp", layout.vpp},
                                                   {"layout.cp", layout.cp},
                                                   {"layout.ep", layout.ep}};
  for (const auto& [field, size] : sizes) {
    if (size != 1) {
      refuse(source, field, fmt::format("runs {} = 1 only", std::string(field).substr(7)),
             std::to_string(size));
    }
  }
  if (layout.sequence_parallel) {
    refuse(source, "layout.sequence_parallel", "runs without sequence parallelism only", "true");
  }
  if (layout.zero != 0) {
    refuse(source, "layout.zero", "runs ZeRO 0 only (plain data-parallel all-reduce)",
           std::to_string(layout.zero));
  }
  if (layout.recompute != planner::Recompute::kNone) {
    refuse(source, "layout.recompute", "runs without activation recompute only",
           planner::to_string(layout.recompute));
  }
  if (layout.schedule == planner::ScheduleKind::kZbH1) {
    refuse(source, "layout.schedule", "runs each backward whole, not split into B and W",
           planner::to_string(layout.schedule));
  }
}

}  // namespace

void validate_plan_for_gpu(const planner::Plan& plan, const std::string& source) {
  if (plan.cluster.precision != models::Precision::kFp32) {
    refuse(source, "cluster.precision",
           "runs fp32 only (bf16 mixed precision is not implemented yet; plan with a cluster "
           "file whose precision is fp32)",
           models::to_string(plan.cluster.precision));
  }
  if (plan.options.gemm_precision != planner::GemmPrecision::kBf16) {
    // The plan file's options.precision (omitted for bf16): FP8 GEMMs are not implemented.
    refuse(source, "options.precision", "runs fp32 GEMMs only",
           planner::to_string(plan.options.gemm_precision));
  }
  if (plan.options.moe_dispatcher != planner::MoeDispatcher::kAllToAll) {
    refuse(source, "options.moe_dispatcher",
           "has no mixture-of-experts layers, so no flex (DeepEP) token dispatcher",
           planner::to_string(plan.options.moe_dispatcher));
  }
  refuse_parallelism(plan.layout, source);
  refuse_model_for_gpu_executor(plan.model, source);
  if (plan.model.is_mla()) {
    refuse(source, "model.kv_lora_rank",
           "implements standard attention; multi-head latent attention runs on the CPU executor",
           std::to_string(plan.model.kv_lora_rank));
  }
  if (plan.model.parallel_residual) {
    refuse(source, "model.parallel_residual",
           "runs sequential blocks only; parallel attention and MLP runs on the CPU executor",
           "true");
  }
  if (!plan.options.flash_attention) {
    refuse(source, "options.flash_attention",
           "has the fused flash-attention kernel only, which stores no (T, T) tensor", "false");
  }
  if (plan.model.head_dim > kMaxFlashHeadDim) {
    refuse(source, "model.head_dim",
           fmt::format("runs head dims up to {} (the flash kernel's)", kMaxFlashHeadDim),
           std::to_string(plan.model.head_dim));
  }
  // One thread block column per (sequence, query head): CUDA's grid y limit.
  const int64_t sequence_heads = plan.layout.micro_batch * plan.model.num_attention_heads;
  if (sequence_heads > kMaxGridY) {
    refuse(source, "layout.micro_batch",
           fmt::format("runs micro_batch x attention heads up to {} (the flash kernel's grid)",
                       kMaxGridY),
           std::to_string(sequence_heads));
  }
}

int select_device(MPI_Comm world) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  set_check_rank(rank);
  // The ranks sharing this node, as OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID number them.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int local_rank = 0;
  int ranks_on_node = 0;
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_size(node, &ranks_on_node));
  MPI_CHECK(MPI_Comm_free(&node));
  int num_devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&num_devices);
  if (status != cudaSuccess || num_devices == 0) {
    throw RuntimeError(fmt::format(
        "rank {}: no GPU visible (cudaGetDeviceCount: {}); a GPU cluster's plan runs one rank "
        "per GPU",
        rank, status == cudaSuccess ? "0 devices" : cudaGetErrorString(status)));
  }
  if (ranks_on_node > num_devices) {
    throw RuntimeError(fmt::format(
        "rank {}: {} ranks on this node but {} GPU(s) visible; the GPU executor runs one rank "
        "per GPU",
        rank, ranks_on_node, num_devices));
  }
  MESHPLAN_CUDA_CHECK(cudaSetDevice(local_rank));
  return local_rank;
}

ExecuteReport execute_plan_on_gpu(const planner::Plan& plan, const ExecuteOptions& options,
                                  MPI_Comm world, const ExecuteCallbacks& callbacks) {
  if (!options.checkpoint_dir.empty()) {
    throw InputError(
        fmt::format("{}: --checkpoint-dir: the GPU executor writes no checkpoints yet (issue 13)",
                    options.checkpoint_dir));
  }
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::shared_ptr<const TokenSource> data = load_data(plan, options, world);
  select_device(world);
  const AdamWConfig adamw = executor_adamw_config(options.learning_rate, plan.options.weight_decay);
  GpuTrainer trainer(plan, std::move(data), adamw, world, options.collective_timeout_seconds);
  std::vector<StepRecord> steps;
  TrafficCounts last_traffic;
  for (int64_t i = 0; i < options.steps; i++) {
    last_traffic = run_step(trainer, plan, rank, options, callbacks, steps).traffic;
  }
  const RankMeasurement mine{trainer.stage(),
                             static_cast<int64_t>(trainer.arena().high_water_bytes()),
                             trainer.device_used_bytes(), last_traffic};
  ExecuteReport report = gather_measurements(plan, mine, world);
  report.steps = std::move(steps);
  return report;
}

}  // namespace meshplan::executor::gpu
