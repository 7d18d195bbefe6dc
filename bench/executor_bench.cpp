// executor_bench: CPU step time of the executor on 1 and 2 ranks, and the share of it spent in
// GEMMs (Eigen products). Run it plainly: it starts each case under mpirun itself
// (`mpirun -np R executor_bench --case NAME`, MPIEXEC overrides the launcher) and prints one
// nccl-tests style table. Figures are wall-clock on this host; nothing here is asserted.

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshplan/executor.h"
#include "meshplan/models.h"

namespace {

using meshplan::executor::ExecuteOptions;
using meshplan::executor::StepRecord;

constexpr int kWarmupSteps = 1;  // allocation and first-touch costs
constexpr int kTimedSteps = 5;

struct BenchCase {
  const char* name;
  const char* model;  // "tiny" or "small"
  int64_t tp, pp, dp;
};

// "small": tiny's layout (SwiGLU, RMSNorm, RoPE, GQA) at hidden 256, sequence 128, so GEMMs
// dominate as they do in real models.
meshplan::models::TransformerConfig bench_model(const std::string& name) {
  meshplan::models::TransformerConfig m = meshplan::models::load_model("tiny");
  if (name == "small") {
    m.name = "small";
    m.hidden_size = 256;
    m.num_attention_heads = 8;
    m.num_kv_heads = 4;
    m.head_dim = 32;
    m.ffn_hidden_size = 704;
    m.seq_length = 128;
  }
  return m;
}

const std::vector<BenchCase>& cases() {
  static const std::vector<BenchCase> list = {
      {"tiny-1", "tiny", 1, 1, 1},     {"tiny-tp2", "tiny", 2, 1, 1},
      {"small-1", "small", 1, 1, 1},   {"small-tp2", "small", 2, 1, 1},
      {"small-pp2", "small", 1, 2, 1}, {"small-dp2", "small", 1, 1, 2}};
  return list;
}

int run_case(const BenchCase& c) {
  MPI_Init(nullptr, nullptr);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  meshplan::planner::Plan plan;
  plan.model = bench_model(c.model);
  plan.cluster = meshplan::models::load_cluster("local-cpu");
  plan.layout.tp = c.tp;
  plan.layout.pp = c.pp;
  plan.layout.dp = c.dp;
  plan.layout.micro_batch = 4;
  plan.layout.global_batch = 16;
  plan.num_gpus = plan.layout.num_gpus();
  ExecuteOptions options;
  options.steps = kWarmupSteps + kTimedSteps;
  double step_seconds = 0;
  double gemm_seconds = 0;
  meshplan::executor::ExecuteCallbacks callbacks;
  callbacks.on_step = [&](const StepRecord& s) {
    if (s.step > kWarmupSteps) {
      step_seconds += s.step_time_s;
      gemm_seconds += s.gemm_time_s;
    }
  };
  try {
    meshplan::executor::execute_plan(plan, options, MPI_COMM_WORLD, callbacks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "executor_bench: %s: %s\n", c.name, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    const double tokens = static_cast<double>(plan.layout.global_batch * plan.model.seq_length);
    fmt::print("{:>12} {:>6} {:>6} {:>6} {:>6} {:>12.5f} {:>12.0f} {:>8.1f}\n", c.model,
               plan.num_gpus, c.tp, c.pp, c.dp, step_seconds / kTimedSteps,
               tokens * kTimedSteps / step_seconds, 100.0 * gemm_seconds / step_seconds);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--case") == 0) {
    for (const BenchCase& c : cases()) {
      if (c.name == std::string(argv[2])) {
        return run_case(c);
      }
    }
    std::fprintf(stderr, "executor_bench: unknown case %s\n", argv[2]);
    return 2;
  }
  const char* launcher = std::getenv("MPIEXEC");
  const std::string mpirun = launcher != nullptr ? launcher : "mpirun";
  const std::string flags =
      std::string("--oversubscribe") + (::geteuid() == 0 ? " --allow-run-as-root" : "");
  fmt::print(
      "# executor_bench: fp32 CPU step time, global batch 16 x micro-batch 4, {} timed "
      "steps after {} warm-up; one rank per process, {} cores online\n",
      kTimedSteps, kWarmupSteps, ::sysconf(_SC_NPROCESSORS_ONLN));
  fmt::print(
      "# tiny: l=4 h=64 a=4 g=2 f=176 V=256 s=32; small: l=4 h=256 a=8 g=4 f=704 V=256 "
      "s=128\n");
  fmt::print("#{:>11} {:>6} {:>6} {:>6} {:>6} {:>12} {:>12} {:>8}\n", "model", "ranks", "tp", "pp",
             "dp", "step_time", "tokens/s", "gemm");
  fmt::print("#{:>11} {:>6} {:>6} {:>6} {:>6} {:>12} {:>12} {:>8}\n", "", "", "", "", "", "(s)",
             "(tokens/s)", "(%)");
  std::fflush(stdout);
  int failures = 0;
  for (const BenchCase& c : cases()) {
    const std::string command = fmt::format("{} {} -np {} {} --case {}", mpirun, flags,
                                            c.tp * c.pp * c.dp, argv[0], c.name);
    if (std::system(command.c_str()) != 0) {
      fmt::print("# {}: FAILED ({})\n", c.name, command);
      failures++;
    }
  }
  fmt::print("# {} of {} cases ran ({})\n", cases().size() - failures, cases().size(),
             failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
