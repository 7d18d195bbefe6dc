// meshplan execute, the driver: the plan shared from rank 0, the data, the training loop with
// checkpoints, and the measurements gathered on rank 0 beside the planner's prediction.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint.h"
#include "collective_agreement.h"
#include "execute_parts.h"
#include "meshplan/errors.h"
#include "meshplan/executor.h"
#include "meshplan/json_io.h"
#include "mpi_check.h"
#include "shard_dims.h"
#include "trainer.h"

#if MESHPLAN_HAVE_GPU
#include "gpu/gpu_execute.h"
#endif

namespace meshplan::executor {

namespace {

void check_options(const ExecuteOptions& options) {
  // At most 10^9: a CPU step of the smallest plan takes milliseconds, so more would run for
  // weeks; steps_done + steps stays far inside 64 bits on --resume.
  constexpr int64_t kMaxSteps = 1'000'000'000;
  if (options.steps < 1 || options.steps > kMaxSteps) {
    throw InputError(
        fmt::format("--steps: must be between 1 and {} ({})", kMaxSteps, options.steps));
  }
  // AdamW's step is about lr per weight: above 1 every weight moves by more than its own
  // typical size each step (inf gave NaN losses and exit 0).
  if (!(options.learning_rate > 0) || !(options.learning_rate <= 1)) {
    throw InputError(fmt::format("--lr: must be in (0, 1] ({})", options.learning_rate));
  }
  // A resumed run needs no interval: without one it writes no checkpoint.
  const int64_t least_every = options.resume ? 0 : 1;
  if (!options.checkpoint_dir.empty() && options.checkpoint_every < least_every) {
    throw InputError(
        fmt::format("--checkpoint-every: must be at least {} with --checkpoint-dir{} "
                    "({})",
                    least_every, options.resume ? " --resume" : "", options.checkpoint_every));
  }
  // A fresh run checkpoints at multiples of the interval up to --steps: none when it is larger.
  if (!options.checkpoint_dir.empty() && !options.resume &&
      options.checkpoint_every > options.steps) {
    throw InputError(fmt::format(
        "--checkpoint-every: larger than --steps ({}): no checkpoint would be written ({})",
        options.steps, options.checkpoint_every));
  }
  if (options.keep_checkpoints < 1) {
    throw InputError(
        fmt::format("--keep-checkpoints: must be at least 1 ({})", options.keep_checkpoints));
  }
  if (options.overwrite_checkpoints && options.checkpoint_dir.empty()) {
    throw InputError("--overwrite-checkpoints: needs --checkpoint-dir");
  }
  if (options.checkpoint_dir.empty() && options.checkpoint_every != 0) {
    throw InputError(
        fmt::format("--checkpoint-every: needs --checkpoint-dir ({})", options.checkpoint_every));
  }
  if (options.resume && options.checkpoint_dir.empty()) {
    throw InputError("--resume: needs --checkpoint-dir");
  }
  // Finite and at most a day: a larger deadline is no watchdog at all.
  if (!(options.collective_timeout_seconds > 0) || options.collective_timeout_seconds > 86400) {
    throw InputError(fmt::format("--collective-timeout: must be in (0, 86400] seconds ({})",
                                 options.collective_timeout_seconds));
  }
}

}  // namespace

void refuse_model_for_gpu_executor(const models::TransformerConfig& model,
                                   const std::string& source) {
  if (model.is_windowed()) {
    throw InputError(fmt::format(
        "{}: model.sliding_window: sliding-window attention is not implemented in the GPU "
        "executor yet; its flash kernel masks causally only ({} < seq_length {})",
        source, model.sliding_window, model.seq_length));
  }
  if (model.activation != models::Activation::kGelu &&
      model.activation != models::Activation::kSwiglu) {
    throw InputError(
        fmt::format("{}: model.activation: the gated GELU MLPs (geglu, quick_geglu) are not "
                    "implemented in the GPU executor yet; it has GELU and SwiGLU kernels ({})",
                    source, models::to_string(model.activation)));
  }
  if (model.glu_linear_offset != 0.0 || model.activation_clamp_value != 0.0) {
    const bool offset = model.glu_linear_offset != 0.0;
    throw InputError(fmt::format(
        "{}: model.{}: gpt-oss's gated-unit {} is not implemented in the GPU executor yet ({:g})",
        source, offset ? "glu_linear_offset" : "activation_clamp_value",
        offset ? "offset" : "clamp",
        offset ? model.glu_linear_offset : model.activation_clamp_value));
  }
  if (model.attention_sinks) {
    throw InputError(fmt::format(
        "{}: model.attention_sinks: learned attention sinks are not implemented in the GPU "
        "executor yet (true)",
        source));
  }
  if (model.is_moe()) {
    // Its layers hold dense MLP weights only (gpu/gpu_layer.cpp reads fc1 and fc2): an MoE plan
    // at ep 1 passes refuse_parallelism's ep check and would find no MLP to run.
    throw InputError(fmt::format(
        "{}: model.num_experts: mixture-of-experts layers are not implemented in the GPU "
        "executor yet; they run on the CPU executor ({})",
        source, model.num_experts));
  }
  if (model.norm_unit_offset) {
    throw InputError(fmt::format(
        "{}: model.norm_unit_offset: Gemma's (1 + weight) RMSNorm is not implemented in the GPU "
        "executor yet (true)",
        source));
  }
  if (model.scale_embeddings) {
    throw InputError(fmt::format(
        "{}: model.scale_embeddings: Gemma's sqrt(h) embedding scale is not implemented in the "
        "GPU executor yet (true)",
        source));
  }
  if (model.qk_norm) {
    throw InputError(fmt::format(
        "{}: model.qk_norm: per-head q/k RMSNorms are not implemented in the GPU executor yet "
        "(true)",
        source));
  }
  if (model.has_partial_rotary()) {
    throw InputError(fmt::format(
        "{}: model.rotary_percent: partial rotary is not implemented in the GPU executor yet "
        "({})",
        source, model.rotary_percent));
  }
  if (model.has_rope_scaling()) {
    throw InputError(fmt::format(
        "{}: model.rope_scaling: scaled rotary frequencies are not implemented in the GPU "
        "executor yet ({} x{:g})",
        source, models::to_string(model.rope_scaling.type), model.rope_scaling.factor));
  }
  if (!model.no_rope_freq.empty()) {
    throw InputError(fmt::format(
        "{}: model.no_rope_freq: NoPE layers are not implemented in the GPU executor yet ({} of "
        "{} layers)",
        source, std::count(model.no_rope_freq.begin(), model.no_rope_freq.end(), 1),
        model.num_layers));
  }
  if (model.qk_l2_norm) {
    throw InputError(fmt::format(
        "{}: model.qk_l2_norm: the q/k L2 norm is not implemented in the GPU executor yet (true)",
        source));
  }
  if (model.sandwich_norm) {
    throw InputError(fmt::format(
        "{}: model.sandwich_norm: Gemma 2/3's post-attention and post-MLP norms are not "
        "implemented in the GPU executor yet (true)",
        source));
  }
  if (model.has_logit_softcapping()) {
    const bool attention = model.attn_logit_softcapping > 0.0;
    throw InputError(fmt::format(
        "{}: model.{}: Gemma 2's logit soft-capping is not implemented in the GPU executor yet "
        "({})",
        source, attention ? "attn_logit_softcapping" : "final_logit_softcapping",
        attention ? model.attn_logit_softcapping : model.final_logit_softcapping));
  }
  if (model.has_attention_scale_override()) {
    throw InputError(fmt::format(
        "{}: model.query_pre_attn_scalar: an attention scale other than 1/sqrt(head_dim) is not "
        "implemented in the GPU executor yet ({} != head_dim {})",
        source, model.query_pre_attn_scalar, model.head_dim));
  }
}

std::shared_ptr<const TokenSource> load_data(const planner::Plan& plan,
                                             const ExecuteOptions& options, MPI_Comm world) {
  if (options.data == "synthetic") {
    return make_synthetic_source(plan.model.vocab_size);
  }
  // Rank 0 reads the file and shares it, so every rank trains on the same bytes.
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::string error;
  std::string text;
  if (rank == 0) {
    try {
      text = read_input_file(options.data);
    } catch (const InputError& e) {  // "<path>: cannot read file (a directory)", too large
      const std::string reason = std::string(e.what()).substr(options.data.size() + 2);
      error =
          fmt::format("{}: --data: {} (expected synthetic or a text file)", options.data, reason);
    }
  }
  agree_on_input_errors(world, error);
  return make_text_source(broadcast_string(world, text), options.data, plan.model.vocab_size,
                          static_cast<int>(plan.model.seq_length));
}

namespace {

#if !MESHPLAN_HAVE_GPU
// An input error (exit 2, on every rank alike), as the CPU executor's refusal of a bf16 plan is.
[[noreturn]] void throw_built_without_gpu(const planner::Plan& plan, const std::string& source) {
  throw InputError(
      fmt::format("{}: cluster: {} runs on GPUs, but this meshplan was built without CUDA "
                  "(configure where nvcc, cuBLAS and NCCL are found, MESHPLAN_GPU=ON)",
                  source, plan.cluster.name));
}
#endif

}  // namespace

planner::Plan load_plan(const std::string& path, MPI_Comm world) {
  set_errors_return(world);
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  std::string error;
  std::string text;
  if (rank == 0) {
    try {
      text = read_json_file(path).dump();
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  agree_on_input_errors(world, error);
  // Every rank parses the same text: the same plan, or the same error.
  const planner::Plan plan =
      planner::plan_from_json(nlohmann::json::parse(broadcast_string(world, text)), path);
  if (plan.num_gpus != size) {
    throw InputError(fmt::format("{}: num_gpus: the plan has {} ranks, mpirun started {}", path,
                                 plan.num_gpus, size));
  }
  validate_mtp_for_executor(plan, path);
  if (!models::is_cpu_cluster(plan.cluster)) {
#if MESHPLAN_HAVE_GPU
    gpu::validate_plan_for_gpu(plan, path);
#else
    throw_built_without_gpu(plan, path);
#endif
  }
  validate_plan_for_executor(plan, path);
  return plan;
}

void check_output_file(const std::string& path, const std::string& flag, MPI_Comm world) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::string error;
  if (rank == 0 && writes_through(path)) {
    // A device, pipe or link is written through (write_file_atomic): no temporary beside it.
    if (::access(path.c_str(), W_OK) != 0) {
      error = fmt::format("{}: {}: cannot write the file ({})", path, flag, std::strerror(errno));
    }
  } else if (rank == 0) {
    // The temporary name write_file_atomic writes first (json_io.cpp).
    const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
    std::FILE* file = std::fopen(temporary.c_str(), "wb");
    if (file == nullptr) {
      error = fmt::format("{}: {}: cannot write the file ({})", path, flag, std::strerror(errno));
    } else {
      std::fclose(file);
      std::remove(temporary.c_str());
      if (std::filesystem::is_directory(path)) {
        error = fmt::format("{}: {}: cannot write the file (a directory)", path, flag);
      }
    }
  }
  agree_on_input_errors(world, error);
}

ExecuteReport execute_plan(const planner::Plan& plan, const ExecuteOptions& options, MPI_Comm world,
                           const ExecuteCallbacks& callbacks) {
  set_errors_return(world);
  check_options(options);
  if (!models::is_cpu_cluster(plan.cluster)) {
#if MESHPLAN_HAVE_GPU
    return gpu::execute_plan_on_gpu(plan, options, world, callbacks);
#else
    throw_built_without_gpu(plan, "plan");
#endif
  }
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::unique_ptr<Checkpoints> checkpoints;
  if (!options.checkpoint_dir.empty()) {
    checkpoints = std::make_unique<Checkpoints>(plan, options, world);
  }
  const AdamWConfig adamw = executor_adamw_config(options.learning_rate, plan.options.weight_decay);
  Trainer trainer(plan, load_data(plan, options, world), adamw, world,
                  options.collective_timeout_seconds);
  if (options.resume) {
    const std::string directory = checkpoints->resume(trainer);
    if (callbacks.on_checkpoint) {
      callbacks.on_checkpoint({true, trainer.steps_done(), directory});
    }
  }
  std::vector<StepRecord> steps;
  TrafficCounts last_traffic;
  for (int64_t i = 0; i < options.steps; i++) {
    const StepOutcome outcome = run_step(trainer, plan, rank, options, callbacks, steps);
    last_traffic = outcome.traffic;
    if (checkpoints && options.checkpoint_every > 0 &&
        outcome.step % options.checkpoint_every == 0) {
      const std::string directory = checkpoints->write(trainer);
      if (callbacks.on_checkpoint) {
        callbacks.on_checkpoint({false, outcome.step, directory});
      }
    }
  }
  trainer.wait_pending();
  ExecuteReport report = gather_measurements(
      plan, {trainer.stage(), trainer.memory().peak_bytes(), 0, last_traffic}, world);
  report.steps = std::move(steps);
  return report;
}

}  // namespace meshplan::executor
