// meshplan execute, the driver: the plan shared from rank 0, the data, the training loop with
// checkpoints, and the measurements gathered on rank 0 beside the planner's prediction.

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint.h"
#include "collective_agreement.h"
#include "meshplan/errors.h"
#include "meshplan/executor.h"
#include "meshplan/json_io.h"
#include "mpi_check.h"
#include "shard_dims.h"
#include "trainer.h"

namespace meshplan::executor {

namespace {

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                     CollectiveKind::kReduceScatter, CollectiveKind::kSendRecv};
constexpr CommGroup kGroups[] = {CommGroup::kTp, CommGroup::kPp, CommGroup::kDp,
                                 CommGroup::kEmbedding};
constexpr int kNumTrafficSlots = 16;  // 4 kinds x 4 groups

// Peak resident set of this process (VmHWM in /proc/self/status, kB), 0 where unavailable.
int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return 0;
}

void check_options(const ExecuteOptions& options) {
  if (options.steps < 1) {
    throw InputError(fmt::format("--steps: must be at least 1 ({})", options.steps));
  }
  if (!(options.learning_rate > 0)) {
    throw InputError(fmt::format("--lr: must be positive ({})", options.learning_rate));
  }
  if (!options.checkpoint_dir.empty() && options.checkpoint_every < 1) {
    throw InputError(
        fmt::format("--checkpoint-every: must be at least 1 with --checkpoint-dir "
                    "({})",
                    options.checkpoint_every));
  }
  if (options.checkpoint_dir.empty() && options.checkpoint_every != 0) {
    throw InputError(
        fmt::format("--checkpoint-every: needs --checkpoint-dir ({})", options.checkpoint_every));
  }
  if (options.resume && options.checkpoint_dir.empty()) {
    throw InputError("--resume: needs --checkpoint-dir");
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
    std::ifstream in(options.data, std::ios::binary);
    if (!in) {
      error = fmt::format("{}: --data: cannot read file (expected synthetic or a text file)",
                          options.data);
    } else {
      std::stringstream buffer;
      buffer << in.rdbuf();
      text = buffer.str();
    }
  }
  agree_on_input_errors(world, error);
  return make_text_source(broadcast_string(world, text), options.data, plan.model.vocab_size,
                          static_cast<int>(plan.model.seq_length));
}

ExecuteReport gather_measurements(const planner::Plan& plan, const Trainer& trainer,
                                  const TrafficCounts& traffic, MPI_Comm world) {
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  // Per rank: stage, allocator peak, RSS peak, then the 16 traffic slots.
  std::vector<long long> mine(3 + kNumTrafficSlots, 0);
  mine[0] = trainer.stage();
  mine[1] = trainer.memory().peak_bytes();
  mine[2] = peak_rss_bytes();
  for (int k = 0; k < 4; k++) {
    for (int g = 0; g < 4; g++) {
      const auto it = traffic.find({kKinds[k], kGroups[g]});
      mine[3 + k * 4 + g] = it == traffic.end() ? 0 : it->second;
    }
  }
  std::vector<long long> all(rank == 0 ? mine.size() * static_cast<size_t>(size) : 0);
  MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_LONG_LONG, all.data(),
                       static_cast<int>(mine.size()), MPI_LONG_LONG, 0, world));
  ExecuteReport report;
  if (rank != 0) {
    return report;
  }
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const int pp = static_cast<int>(plan.layout.pp);
  report.memory.resize(static_cast<size_t>(pp));
  std::vector<std::map<std::pair<CollectiveKind, CommGroup>, std::pair<int64_t, int64_t>>> bytes(
      static_cast<size_t>(pp));
  for (int s = 0; s < pp; s++) {
    report.memory[s].stage = s;
    if (s < static_cast<int>(estimate.stages.size())) {
      const planner::MemoryBreakdown& predicted = estimate.stages[s].memory;
      report.memory[s].predicted_bytes = predicted.total_bytes();
      report.memory[s].predicted_tensor_bytes = predicted.total_bytes() - predicted.reserved_bytes;
    }
  }
  for (int r = 0; r < size; r++) {
    const long long* row = all.data() + static_cast<size_t>(r) * mine.size();
    StageMemory& memory = report.memory[static_cast<size_t>(row[0])];
    memory.measured_bytes = std::max<int64_t>(memory.measured_bytes, row[1]);
    memory.peak_rss_bytes = std::max<int64_t>(memory.peak_rss_bytes, row[2]);
    for (int k = 0; k < 4; k++) {
      for (int g = 0; g < 4; g++) {
        // Every rank of a stage issues the same collectives; the largest count is reported.
        auto& entry = bytes[static_cast<size_t>(row[0])][{kKinds[k], kGroups[g]}];
        entry.first = std::max<int64_t>(entry.first, row[3 + k * 4 + g]);
      }
    }
  }
  for (const planner::CollectiveTraffic& c : estimate.collectives) {
    bytes[static_cast<size_t>(c.stage)][{c.kind, c.group}].second += c.total_message_bytes();
  }
  for (int s = 0; s < pp; s++) {
    for (const auto& [key, pair] : bytes[static_cast<size_t>(s)]) {
      if (pair.first != 0 || pair.second != 0) {
        report.collectives.push_back({s, key.first, key.second, pair.first, pair.second});
      }
    }
  }
  return report;
}

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
  validate_plan_for_executor(plan, path);
  return plan;
}

ExecuteReport execute_plan(const planner::Plan& plan, const ExecuteOptions& options, MPI_Comm world,
                           const std::function<void(const StepRecord&)>& on_step) {
  set_errors_return(world);
  check_options(options);
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  AdamWConfig adamw;
  adamw.learning_rate = options.learning_rate;
  Trainer trainer(plan, load_data(plan, options, world), adamw, world);
  if (options.resume) {
    read_checkpoint(options.checkpoint_dir, trainer, plan, options, world);
  }
  const double tokens_per_step =
      static_cast<double>(plan.layout.global_batch * plan.model.seq_length);
  std::vector<StepRecord> steps;
  TrafficCounts last_traffic;
  for (int64_t i = 0; i < options.steps; i++) {
    if (rank == options.kill_rank && trainer.steps_done() + 1 == options.kill_step) {
      ::raise(SIGKILL);  // fault injection (tests): this rank dies mid-run
    }
    const StepOutcome outcome = trainer.train_step();
    StepRecord record{outcome.step, outcome.loss, outcome.step_time_s,
                      tokens_per_step / outcome.step_time_s, outcome.gemm_time_s};
    steps.push_back(record);
    last_traffic = outcome.traffic;
    if (on_step) {
      on_step(record);
    }
    if (!options.checkpoint_dir.empty() && outcome.step % options.checkpoint_every == 0) {
      write_checkpoint(options.checkpoint_dir, trainer, plan, options, world);
    }
  }
  trainer.wait_pending();
  ExecuteReport report = gather_measurements(plan, trainer, last_traffic, world);
  report.steps = std::move(steps);
  return report;
}

}  // namespace meshplan::executor
