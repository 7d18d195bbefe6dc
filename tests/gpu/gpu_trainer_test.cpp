// The GPU trainer against the CPU executor's Trainer (the reference): the same plan (the CPU one
// on local-cpu, its twin on an H200 cluster with precision fp32), the same data and initial
// weights, 5 steps, per-step losses within 1e-4 (issue 13 §3). Run on world size W ranks, the
// layout has dp = W: under mpirun -np 2 the ZeRO 0 gradient all-reduce runs over NCCL and its
// calls and bytes must equal the CPU executor's and the planner's.
//
// The refusals (validate_plan_for_gpu) need no GPU and always run. The GPU cases need one
// visible CUDA device per rank: where there are fewer, the binary prints why and exits 77
// (ctest: skipped, never passed), after the host cases passed.

#define DOCTEST_CONFIG_IMPLEMENT
#include "gpu/gpu_trainer.h"

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "../executor/tiny_plan.h"
#include "data_source.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_execute.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "trainer.h"

namespace ex = meshplan::executor;
namespace gpu = meshplan::executor::gpu;
namespace planner = meshplan::planner;
namespace models = meshplan::models;

namespace {

constexpr int kSteps = 5;  // issue 13 §3

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The CPU plan's twin on a GPU cluster: the H200 preset with precision fp32.
planner::Plan gpu_twin(planner::Plan plan) {
  plan.cluster = models::load_cluster("dgx-h200");
  plan.cluster.precision = models::Precision::kFp32;
  return plan;
}

std::string refusal(const planner::Plan& plan) {
  try {
    gpu::validate_plan_for_gpu(plan, "p.json");
  } catch (const meshplan::InputError& e) {
    return e.what();
  }
  return "";
}

// Per-step losses of both trainers, and the step-1 traffic of each, for `cpu_plan`.
void compare_with_cpu(const planner::Plan& cpu_plan) {
  const auto data =
      std::shared_ptr<const ex::TokenSource>(ex::make_synthetic_source(cpu_plan.model.vocab_size));
  ex::AdamWConfig adamw;
  ex::Trainer cpu(cpu_plan, data, adamw, MPI_COMM_WORLD);
  gpu::GpuTrainer on_gpu(gpu_twin(cpu_plan), data, adamw, MPI_COMM_WORLD,
                         ex::kDefaultCollectiveTimeoutSeconds);
  for (int step = 1; step <= kSteps; step++) {
    const ex::StepOutcome expected = cpu.train_step();
    const ex::StepOutcome measured = on_gpu.train_step();
    INFO("step " << step << ": CPU loss " << expected.loss << ", GPU loss " << measured.loss);
    // Issue 13 §3's bar: the kernels and cuBLAS sum in other orders than Eigen (fp32 rounding),
    // which five AdamW steps carry into the loss well below 1e-4.
    CHECK(std::fabs(measured.loss - expected.loss) <= 1e-4);
    CHECK(measured.traffic == expected.traffic);
  }
  // The arena holds at least the parameters, gradients and both AdamW moments (4 x 4 B each).
  CHECK(on_gpu.arena().high_water_bytes() >= static_cast<size_t>(16 * on_gpu.num_parameters()));
}

// One step's reduced gradients of both trainers, tensor by tensor (llm.c's test_gpt2 prints the
// largest difference of each): the first place to look when the losses differ.
void compare_gradients(const planner::Plan& cpu_plan) {
  const auto data =
      std::shared_ptr<const ex::TokenSource>(ex::make_synthetic_source(cpu_plan.model.vocab_size));
  ex::Trainer cpu(cpu_plan, data, ex::AdamWConfig{}, MPI_COMM_WORLD);
  gpu::GpuTrainer on_gpu(gpu_twin(cpu_plan), data, ex::AdamWConfig{}, MPI_COMM_WORLD,
                         ex::kDefaultCollectiveTimeoutSeconds);
  const double cpu_loss = cpu.compute_gradients();
  const double gpu_loss = on_gpu.compute_gradients();
  CHECK(std::fabs(gpu_loss - cpu_loss) <= 1e-5);  // one forward: fp32 rounding only
  const std::vector<float> measured = on_gpu.gradients();
  REQUIRE(on_gpu.specs().size() == cpu.specs().size());
  for (const ex::ParameterSpec& spec : cpu.specs()) {
    float largest = 0;
    float difference = 0;
    for (int64_t i = spec.offset; i < spec.offset + spec.size; i++) {
      largest = std::max(largest, std::fabs(cpu.gradients()[i]));
      difference =
          std::max(difference, std::fabs(measured[static_cast<size_t>(i)] - cpu.gradients()[i]));
    }
    std::printf("# %-28s max |grad| %.3e, max |GPU - CPU| %.3e\n", spec.name.c_str(), largest,
                difference);
    INFO(spec.name << ": max |grad| " << largest << ", max |GPU - CPU| " << difference);
    // Summation order (cuBLAS, atomics, warp reductions) against Eigen's moves the last bits of
    // each op, about 1e-6 relative, compounded over the layers; a wrong index or a missed
    // term moves whole gradients (relative error of order 1).
    CHECK(difference <= 1e-3f * std::max(largest, 1e-6f));
  }
}

}  // namespace

TEST_CASE("host: the GPU executor refuses by name what it does not run") {
  planner::Plan plan = gpu_twin(ex::testing::tiny_plan(ex::testing::make_layout(1, 1, 1)));
  CHECK(refusal(plan).empty());
  planner::Plan bf16 = plan;
  bf16.cluster.precision = models::Precision::kBf16Mixed;
  CHECK(refusal(bf16) ==
        "p.json: cluster.precision: the GPU executor runs fp32 only (bf16 mixed precision is not "
        "implemented yet; plan with a cluster file whose precision is fp32), issue 13 (bf16)");
  planner::Plan tp2 = gpu_twin(ex::testing::tiny_plan(ex::testing::make_layout(2, 1, 1)));
  CHECK(refusal(tp2) == "p.json: layout.tp: the GPU executor runs tp = 1 only, issue 13 (2)");
  planner::Plan pp2 = gpu_twin(ex::testing::tiny_plan(ex::testing::make_layout(1, 2, 1)));
  CHECK(refusal(pp2) == "p.json: layout.pp: the GPU executor runs pp = 1 only, issue 13 (2)");
  planner::Plan zero1 = gpu_twin(ex::testing::tiny_plan(ex::testing::make_layout(1, 1, 2)));
  zero1.layout.zero = 1;
  CHECK(refusal(zero1) ==
        "p.json: layout.zero: the GPU executor runs ZeRO 0 only (plain data-parallel "
        "all-reduce), issue 13 (1)");
  planner::Plan recompute = plan;
  recompute.layout.recompute = planner::Recompute::kFull;
  CHECK(refusal(recompute) ==
        "p.json: layout.recompute: the GPU executor runs without activation recompute only, "
        "issue 13 (full)");
  planner::Plan windowed = plan;
  windowed.model.sliding_window = windowed.model.seq_length / 4;
  CHECK(refusal(windowed).find("p.json: model.sliding_window: sliding-window attention is not "
                               "implemented in the GPU executor yet") == 0);
  planner::Plan no_flash = plan;
  no_flash.options.flash_attention = false;
  CHECK(refusal(no_flash).find("options.flash_attention") != std::string::npos);
  planner::Plan fp8 = plan;
  fp8.options.gemm_precision = planner::GemmPrecision::kFp8;
  CHECK(refusal(fp8) ==
        "p.json: options.precision: the GPU executor runs fp32 GEMMs only, issue 13 (fp8)");
  planner::Plan sp = plan;
  sp.layout.sequence_parallel = true;
  CHECK(refusal(sp).find("layout.sequence_parallel") != std::string::npos);
  // Named before the layout and the model (a flex plan is an MoE plan at ep > 1).
  planner::Plan flex = gpu_twin(ex::testing::tiny_plan(ex::testing::make_layout(1, 1, 2)));
  flex.model = models::load_model("tiny-moe");
  flex.layout.ep = 2;
  flex.options.moe_dispatcher = planner::MoeDispatcher::kFlex;
  CHECK(refusal(flex) ==
        "p.json: options.moe_dispatcher: the GPU executor has no mixture-of-experts layers, so "
        "no flex (DeepEP) token dispatcher, issue 13 (flex)");
}

TEST_CASE("gpu: fp32 losses equal the CPU Trainer's (tiny: SwiGLU, RMSNorm, RoPE, GQA, 1F1B)") {
  // global batch 16 over dp = W ranks in micro-batches of 2: 8 / W micro-batches per step.
  compare_with_cpu(ex::testing::tiny_plan(ex::testing::make_layout(1, 1, world_size())));
}

TEST_CASE("gpu: fp32 losses equal the CPU Trainer's (GPT-2 style: GELU, LayerNorm, tied, GPipe)") {
  planner::Layout layout = ex::testing::make_layout(1, 1, world_size(), 2, 8);
  layout.schedule = planner::ScheduleKind::kGpipe;  // every micro-batch in flight at once
  compare_with_cpu(ex::testing::make_plan(ex::testing::small_gpt2_model(), layout));
}

TEST_CASE("gpu: one step's gradients equal the CPU Trainer's, tensor by tensor") {
  compare_gradients(ex::testing::tiny_plan(ex::testing::make_layout(1, 1, world_size())));
  compare_gradients(ex::testing::make_plan(ex::testing::small_gpt2_model(),
                                           ex::testing::make_layout(1, 1, world_size(), 2, 8)));
}

TEST_CASE("gpu: the dp all-reduce issues the planner's calls and bytes") {
  const planner::Plan cpu_plan =
      ex::testing::tiny_plan(ex::testing::make_layout(1, 1, world_size()));
  const planner::Plan plan = gpu_twin(cpu_plan);
  gpu::GpuTrainer trainer(plan, ex::make_synthetic_source(plan.model.vocab_size), ex::AdamWConfig{},
                          MPI_COMM_WORLD, ex::kDefaultCollectiveTimeoutSeconds);
  const ex::StepOutcome outcome = trainer.train_step();
  int64_t predicted_bytes = 0;
  int64_t predicted_calls = 0;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  for (const planner::CollectiveTraffic& c : estimate.collectives) {
    predicted_bytes += c.total_message_bytes();
    predicted_calls += c.calls_per_step;
  }
  int64_t measured_bytes = 0;
  int64_t measured_calls = 0;
  for (const auto& [key, traffic] : outcome.traffic) {
    measured_bytes += traffic.bytes;
    measured_calls += traffic.calls;
  }
  CHECK(measured_calls == predicted_calls);
  CHECK(measured_bytes == predicted_bytes);
  if (world_size() > 1) {
    // ZeRO 0 all-reduces every fp32 gradient once: 4 bytes per parameter.
    CHECK(measured_bytes == 4 * trainer.num_parameters());
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context host(argc, argv);
  host.setOption("test-case", "host:*");
  if (rank != 0) {
    host.setOption("out", "/dev/null");
  }
  int failed = host.run();
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  int usable = status == cudaSuccess && devices >= world_size() ? 1 : 0;
  int all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (failed == 0 && all_usable == 0) {
    if (rank == 0) {
      std::printf(
          "gpu_trainer_tests: GPU cases skipped: need %d visible CUDA device(s), found %d "
          "(%s)\n",
          world_size(), status == cudaSuccess ? devices : 0,
          status == cudaSuccess ? "cudaGetDeviceCount" : cudaGetErrorString(status));
    }
    MPI_Finalize();
    return 77;  // ctest SKIP_RETURN_CODE
  }
  if (failed == 0) {
    gpu::select_device(MPI_COMM_WORLD);
    doctest::Context context(argc, argv);
    context.setOption("test-case", "gpu:*");
    if (rank != 0) {
      context.setOption("out", "/dev/null");
    }
    failed = context.run();
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
