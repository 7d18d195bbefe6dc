// The Chrome trace: one process per rank, one thread per stream, a slice per op, a flow arrow
// per pipeline transfer; the same result gives the same bytes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../simulator/hand_built.h"
#include "meshplan/models.h"
#include "meshplan/reports.h"

namespace meshplan::reports {
namespace {

using simulator::testing::uniform_input;

// tp = 2, pp = 2, dp = 1, 1F1B with m = 3, every rank simulated: ranks 0, 1 (stage 0) and
// 2, 3 (stage 1) in tp-dp-pp order. f = 1 s, b = 2 s, sends 0.25 s.
simulator::SimulationResult small_result() {
  simulator::SimulationInput input =
      uniform_input(planner::ScheduleKind::kOneFOneB, 2, 1, 3, 1.0, 2.0);
  input.layout.tp = 2;
  input.all_ranks = true;
  for (auto& stage : input.stages) {
    stage.transfer_seconds = 0.25;
  }
  return simulator::simulate(input);
}

}  // namespace

TEST_CASE("trace: one process per rank, named threads, slices and flows") {
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(small_result()));
  std::set<int64_t> processes;
  std::map<int64_t, std::set<std::string>> threads;  // pid -> thread names
  std::map<int64_t, int> forwards;                   // pid -> "F ..." slices
  int starts = 0, finishes = 0;
  for (const auto& event : trace.at("traceEvents")) {
    const std::string ph = event.at("ph");
    if (ph == "M" && event.at("name") == "process_name") {
      CHECK(processes.insert(event.at("pid").get<int64_t>()).second);  // once per rank
    } else if (ph == "M" && event.at("name") == "thread_name") {
      threads[event.at("pid")].insert(event.at("args").at("name").get<std::string>());
    } else if (ph == "X" && event.at("name").get<std::string>().rfind("F ", 0) == 0) {
      ++forwards[event.at("pid")];
      CHECK(event.at("dur").get<double>() == 1e6);  // f = 1 s, in microseconds
    } else if (ph == "s") {
      ++starts;
    } else if (ph == "f") {
      ++finishes;
      CHECK(event.at("bp") == "e");
    }
  }
  CHECK(processes == std::set<int64_t>{0, 1, 2, 3});
  // Stage 0 sends activations (pp-send-next), stage 1 gradients (pp-send-prev); both compute.
  CHECK(threads[0] == std::set<std::string>{"compute", "pp-send-next"});
  CHECK(threads[3] == std::set<std::string>{"compute", "pp-send-prev"});
  for (int64_t pid : {0, 1, 2, 3}) {
    CHECK(forwards[pid] == 3);  // m = 3 forwards per rank
  }
  // Each of the tp = 2 pipelines sends m = 3 activations and 3 gradients: 12 arrows.
  CHECK(starts == 12);
  CHECK(finishes == 12);
}

TEST_CASE("trace: every flow end lies inside a slice of its thread") {
  // Viewers bind 's' and 'f' ("bp":"e") to the slice enclosing them; a flow end outside every
  // slice would draw no arrow.
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(small_result()));
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> slices;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == "X") {
      const double ts = event.at("ts");
      slices[{event.at("pid"), event.at("tid")}].emplace_back(ts,
                                                              ts + event.at("dur").get<double>());
    }
  }
  int flows = 0;
  for (const auto& event : trace.at("traceEvents")) {
    const std::string ph = event.at("ph");
    if (ph != "s" && ph != "f") {
      continue;
    }
    const double ts = event.at("ts");
    bool inside = false;
    for (const auto& [begin, end] : slices[{event.at("pid"), event.at("tid")}]) {
      inside = inside || (begin < ts && ts < end);
    }
    CHECK(inside);
    ++flows;
  }
  CHECK(flows == 24);  // 12 arrows, two ends each
}

TEST_CASE("trace: the same result gives the same bytes") {
  CHECK(chrome_trace_json(small_result()) == chrome_trace_json(small_result()));
}

// A plan on presets: llama3-8b (32 layers) on 32 H100s as tp 2 x pp 4 x dp 4, micro-batch 1 of
// a global batch of 64 (16 micro-batches, divisible by pp), ZeRO 1, so every stream kind has
// work: compute, tp comm, both pipeline directions, data-parallel reductions and gathers.
planner::Plan preset_plan(planner::ScheduleKind schedule) {
  planner::Plan plan;
  plan.model = models::load_model("llama3-8b");
  plan.cluster = models::load_cluster("dgx-h100");
  plan.num_gpus = 32;
  plan.layout.tp = 2;
  plan.layout.pp = 4;
  plan.layout.dp = 4;
  plan.layout.vpp = schedule == planner::ScheduleKind::kInterleaved ? 2 : 1;
  plan.layout.micro_batch = 1;
  plan.layout.global_batch = 64;
  plan.layout.zero = 1;
  plan.layout.schedule = schedule;
  return plan;
}

TEST_CASE("trace: no two slices on one thread partially overlap (Perfetto drops those)") {
  // Perfetto's trace processor drops a complete event that starts inside another on its thread
  // and ends after it. The simulator runs one task at a time per stream, so in the file each
  // slice on a (pid, tid) must end at or before the next one starts.
  for (const planner::ScheduleKind schedule :
       {planner::ScheduleKind::kGpipe, planner::ScheduleKind::kOneFOneB,
        planner::ScheduleKind::kInterleaved, planner::ScheduleKind::kZbH1}) {
    CAPTURE(planner::to_string(schedule));
    simulator::SimulationOptions options;
    const simulator::SimulationResult result =
        simulator::simulate_plan(preset_plan(schedule), options, "preset");
    const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(result));
    // Times are microseconds (the format's unit; Perfetto ignores displayTimeUnit), read back
    // into nanoseconds as Perfetto's JSON importer does: llround(value * 1000).
    CHECK(!trace.contains("displayTimeUnit"));
    auto perfetto_ns = [](const nlohmann::json& value) {
      return std::llround(value.get<double>() * 1000.0);
    };
    std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> slices;
    for (const auto& event : trace.at("traceEvents")) {
      if (event.at("ph") == "X") {
        const int64_t ts = perfetto_ns(event.at("ts"));
        slices[{event.at("pid"), event.at("tid")}].emplace_back(ts,
                                                                ts + perfetto_ns(event.at("dur")));
      }
    }
    CHECK(slices.size() >= 4 * 4);  // pp = 4 simulated ranks, at least 4 streams each
    int64_t num_slices = 0, num_overlapping = 0;
    for (auto& entry : slices) {
      std::vector<std::pair<int64_t, int64_t>>& spans = entry.second;
      std::sort(spans.begin(), spans.end());
      for (size_t i = 1; i < spans.size(); ++i) {
        // A stream runs one task at a time: the next slice starts at or after this one's end.
        num_overlapping += spans[i].first < spans[i - 1].second ? 1 : 0;
      }
      num_slices += static_cast<int64_t>(spans.size());
    }
    // At least the F and B of every micro-batch and chunk: pp = 4 ranks x 2 x m = 16 x vpp.
    CHECK(num_slices >= 4 * 2 * 16 * preset_plan(schedule).layout.vpp);
    CHECK(num_overlapping == 0);
  }
}

}  // namespace meshplan::reports

namespace meshplan::reports {
TEST_CASE("simulate's table states the replayed plan's options, as plan and explain do") {
  simulator::SimulationOptions options;
  options.bucket_bytes = 64 << 20;
  const simulator::SimulationResult replayed =
      simulator::simulate_plan(preset_plan(planner::ScheduleKind::kOneFOneB), options, "preset");
  const std::string table = simulation_report(replayed).table;
  // The plan's options (the default framework, megatron) with the bucket the replay used.
  CHECK(table.find("\n# options: flash attention on, overlap grad-reduce on, param-gather on, "
                   "tp-comm off, scatter-gather pipeline off, placement tp-dp-pp, bucket 64 MiB, "
                   "vocab padded to a multiple of 128 x tp\n") != std::string::npos);
  // A hand-built input has no plan: no options line.
  CHECK(simulation_report(small_result()).table.find("# options:") == std::string::npos);
}
}  // namespace meshplan::reports
