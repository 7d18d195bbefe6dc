// meshplan execute, the driver: the plan shared from rank 0, the data, the training loop with
// checkpoints, and the measurements gathered on rank 0 beside the planner's prediction.

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
                                     CollectiveKind::kReduceScatter, CollectiveKind::kSendRecv,
                                     CollectiveKind::kAllToAll};
constexpr CommGroup kGroups[] = {CommGroup::kTp,        CommGroup::kPp, CommGroup::kDp,
                                 CommGroup::kEmbedding, CommGroup::kCp, CommGroup::kEp,
                                 CommGroup::kExpertDp};
constexpr int kNumKinds = 5;
constexpr int kNumGroups = 7;
constexpr int kNumTrafficSlots = kNumKinds * kNumGroups;

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
  // A resumed run needs no interval: without one it writes no checkpoint.
  const int64_t least_every = options.resume ? 0 : 1;
  if (!options.checkpoint_dir.empty() && options.checkpoint_every < least_every) {
    throw InputError(
        fmt::format("--checkpoint-every: must be at least {} with --checkpoint-dir{} "
                    "({})",
                    least_every, options.resume ? " --resume" : "", options.checkpoint_every));
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

// This rank's row of the measurement table: stage, allocator peak, RSS peak, then per traffic
// slot (kind k, group g at 2 (kNumGroups k + g)) the step's bytes and calls.
std::vector<long long> measurement_row(const Trainer& trainer, const TrafficCounts& traffic) {
  std::vector<long long> row(3 + 2 * kNumTrafficSlots, 0);
  row[0] = trainer.stage();
  row[1] = trainer.memory().peak_bytes();
  row[2] = peak_rss_bytes();
  for (int k = 0; k < kNumKinds; k++) {
    for (int g = 0; g < kNumGroups; g++) {
      const auto it = traffic.find({kKinds[k], kGroups[g]});
      if (it != traffic.end()) {
        row[3 + 2 * (k * kNumGroups + g)] = it->second.bytes;
        row[4 + 2 * (k * kNumGroups + g)] = it->second.calls;
      }
    }
  }
  return row;
}

// Rank 0: memory and collectives per stage from every rank's row (the largest over a stage's
// ranks, which all issue the same collectives), beside the planner's estimate of the plan.
ExecuteReport compare_with_planner(const planner::Plan& plan, const std::vector<long long>& rows,
                                   size_t row_size) {
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const size_t pp = static_cast<size_t>(plan.layout.pp);
  ExecuteReport report;
  report.memory.resize(pp);
  std::vector<std::map<std::pair<CollectiveKind, CommGroup>, CollectiveRecord>> by_kind(pp);
  for (size_t s = 0; s < pp && s < estimate.stages.size(); s++) {
    const planner::MemoryBreakdown& predicted = estimate.stages[s].memory;
    report.memory[s].predicted_bytes = predicted.total_bytes();
    report.memory[s].predicted_tensor_bytes = predicted.total_bytes() - predicted.reserved_bytes;
  }
  for (size_t at = 0; at < rows.size(); at += row_size) {
    const long long* row = rows.data() + at;
    StageMemory& memory = report.memory[static_cast<size_t>(row[0])];
    memory.measured_bytes = std::max<int64_t>(memory.measured_bytes, row[1]);
    memory.peak_rss_bytes = std::max<int64_t>(memory.peak_rss_bytes, row[2]);
    for (int slot = 0; slot < kNumTrafficSlots; slot++) {
      CollectiveRecord& c = by_kind[static_cast<size_t>(row[0])]
                                   [{kKinds[slot / kNumGroups], kGroups[slot % kNumGroups]}];
      c.measured_bytes = std::max<int64_t>(c.measured_bytes, row[3 + 2 * slot]);
      c.measured_calls = std::max<int64_t>(c.measured_calls, row[4 + 2 * slot]);
    }
  }
  for (const planner::CollectiveTraffic& c : estimate.collectives) {
    CollectiveRecord& record = by_kind[static_cast<size_t>(c.stage)][{c.kind, c.group}];
    record.predicted_bytes += c.total_message_bytes();
    record.predicted_calls += c.calls_per_step;
  }
  for (size_t s = 0; s < pp; s++) {
    report.memory[s].stage = static_cast<int64_t>(s);
    for (auto& [key, c] : by_kind[s]) {
      if (c.measured_calls != 0 || c.predicted_calls != 0) {
        c.stage = static_cast<int64_t>(s);
        c.kind = key.first;
        c.group = key.second;
        report.collectives.push_back(c);
      }
    }
  }
  return report;
}

// Collective: every rank's measurements, compared on rank 0 (the others get an empty report).
ExecuteReport gather_measurements(const planner::Plan& plan, const Trainer& trainer,
                                  const TrafficCounts& traffic, MPI_Comm world) {
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  const std::vector<long long> mine = measurement_row(trainer, traffic);
  std::vector<long long> all(rank == 0 ? mine.size() * static_cast<size_t>(size) : 0);
  MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_LONG_LONG, all.data(),
                       static_cast<int>(mine.size()), MPI_LONG_LONG, 0, world));
  return rank == 0 ? compare_with_planner(plan, all, mine.size()) : ExecuteReport{};
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

void check_output_file(const std::string& path, const std::string& flag, MPI_Comm world) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::string error;
  if (rank == 0) {
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
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  std::unique_ptr<Checkpoints> checkpoints;
  if (!options.checkpoint_dir.empty()) {
    checkpoints = std::make_unique<Checkpoints>(plan, options, world);
  }
  AdamWConfig adamw;
  adamw.learning_rate = options.learning_rate;
  Trainer trainer(plan, load_data(plan, options, world), adamw, world,
                  options.collective_timeout_seconds);
  if (options.resume) {
    const std::string directory = checkpoints->resume(trainer);
    if (callbacks.on_checkpoint) {
      callbacks.on_checkpoint({true, trainer.steps_done(), directory});
    }
  }
  const double tokens_per_step =
      static_cast<double>(plan.layout.global_batch * plan.model.seq_length);
  std::vector<StepRecord> steps;
  TrafficCounts last_traffic;
  for (int64_t i = 0; i < options.steps; i++) {
    if (rank == options.kill_rank && trainer.steps_done() + 1 == options.kill_step) {
      ::raise(options.kill_signal);  // fault injection (tests): this rank dies or hangs
    }
    const StepOutcome outcome = trainer.train_step();
    StepRecord record{outcome.step, outcome.loss, outcome.step_time_s,
                      tokens_per_step / outcome.step_time_s, outcome.gemm_time_s};
    steps.push_back(record);
    last_traffic = outcome.traffic;
    if (callbacks.on_step) {
      callbacks.on_step(record);
    }
    if (checkpoints && options.checkpoint_every > 0 &&
        outcome.step % options.checkpoint_every == 0) {
      const std::string directory = checkpoints->write(trainer);
      if (callbacks.on_checkpoint) {
        callbacks.on_checkpoint({false, outcome.step, directory});
      }
    }
  }
  trainer.wait_pending();
  ExecuteReport report = gather_measurements(plan, trainer, last_traffic, world);
  report.steps = std::move(steps);
  return report;
}

}  // namespace meshplan::executor
