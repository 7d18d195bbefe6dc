// execute's measurements, shared by the CPU and the GPU driver: each rank's row (stage, memory,
// the last step's collectives), gathered on rank 0 and set beside the planner's estimate.

#include <fmt/format.h>

#include <fstream>
#include <map>

#include "execute_parts.h"
#include "meshplan/cost_model.h"
#include "mpi_check.h"

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

// This rank's row of the measurement table: stage, allocator peak, RSS peak, device bytes in use,
// then per traffic slot (kind k, group g at kRowHeader + 2 (kNumGroups k + g)) the step's bytes
// and calls.
constexpr int kRowHeader = 4;

std::vector<long long> measurement_row(const RankMeasurement& mine) {
  std::vector<long long> row(kRowHeader + 2 * kNumTrafficSlots, 0);
  row[0] = mine.stage;
  row[1] = mine.peak_bytes;
  row[2] = peak_rss_bytes();
  row[3] = mine.device_used_bytes;
  for (int k = 0; k < kNumKinds; k++) {
    for (int g = 0; g < kNumGroups; g++) {
      const auto it = mine.traffic.find({kKinds[k], kGroups[g]});
      if (it != mine.traffic.end()) {
        row[kRowHeader + 2 * (k * kNumGroups + g)] = it->second.bytes;
        row[kRowHeader + 1 + 2 * (k * kNumGroups + g)] = it->second.calls;
      }
    }
  }
  return row;
}

// Rank 0: memory and collectives per stage from every rank's row, beside the planner's estimate
// of the plan. A stage's ranks issue the same collectives, so each entry is the largest over
// them, but for the expert all-to-alls: a rank's bytes there follow its tokens' routing, and the
// planner's are the balanced share, exact for the mean over the stage's ranks (the ep group's
// sum is ep times the planner's whatever the routing: tests/executor/traffic_test.cpp).
ExecuteReport compare_with_planner(const planner::Plan& plan, const std::vector<long long>& rows,
                                   size_t row_size) {
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const size_t pp = static_cast<size_t>(plan.layout.pp);
  ExecuteReport report;
  report.memory.resize(pp);
  std::vector<std::map<std::pair<CollectiveKind, CommGroup>, CollectiveRecord>> by_kind(pp);
  std::vector<int64_t> all_to_all_bytes_sum(pp, 0);
  std::vector<int64_t> ranks_in_stage(pp, 0);
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
    memory.device_used_bytes = std::max<int64_t>(memory.device_used_bytes, row[3]);
    const size_t stage = static_cast<size_t>(row[0]);
    ranks_in_stage[stage] += 1;
    for (int slot = 0; slot < kNumTrafficSlots; slot++) {
      CollectiveRecord& c = by_kind[static_cast<size_t>(row[0])]
                                   [{kKinds[slot / kNumGroups], kGroups[slot % kNumGroups]}];
      c.measured_bytes = std::max<int64_t>(c.measured_bytes, row[kRowHeader + 2 * slot]);
      c.measured_calls = std::max<int64_t>(c.measured_calls, row[kRowHeader + 1 + 2 * slot]);
      if (kKinds[slot / kNumGroups] == CollectiveKind::kAllToAll &&
          kGroups[slot % kNumGroups] == CommGroup::kEp) {
        all_to_all_bytes_sum[stage] += row[kRowHeader + 2 * slot];
      }
    }
  }
  for (size_t s = 0; s < pp; s++) {
    const auto it = by_kind[s].find({CollectiveKind::kAllToAll, CommGroup::kEp});
    if (it != by_kind[s].end() && ranks_in_stage[s] > 0) {
      // The mean. Every rank's bytes are whole token rows (h e bytes, more than the stage's
      // ranks), so a sum other than ranks x the planner's differs from it by more than the
      // rounding.
      it->second.measured_bytes =
          (all_to_all_bytes_sum[s] + ranks_in_stage[s] - 1) / ranks_in_stage[s];
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

}  // namespace

ExecuteReport gather_measurements(const planner::Plan& plan, const RankMeasurement& mine,
                                  MPI_Comm world) {
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  const std::vector<long long> row = measurement_row(mine);
  std::vector<long long> all(rank == 0 ? row.size() * static_cast<size_t>(size) : 0);
  MPI_CHECK(MPI_Gather(row.data(), static_cast<int>(row.size()), MPI_LONG_LONG, all.data(),
                       static_cast<int>(row.size()), MPI_LONG_LONG, 0, world));
  return rank == 0 ? compare_with_planner(plan, all, row.size()) : ExecuteReport{};
}

}  // namespace meshplan::executor
