// Chrome trace event format (the JSON Object Format of the Trace Event Format document, which
// Perfetto's importer reads): metadata events name processes and threads, complete events
// ('X') are slices, flow events ('s', 'f') draw arrows between slices.

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "meshplan/reports.h"

namespace meshplan::reports {
namespace {

using simulator::SimulationResult;
using simulator::StreamKind;
using simulator::TaskKind;
using simulator::TaskRecord;

int thread_id(StreamKind stream) {
  return static_cast<int>(stream) + 1;
}

// Integer nanoseconds. A slice's ts and end are each rounded once and dur = end - ts, so a slice
// ends exactly where the simulation ended it: one that ends when the next on its thread starts
// touches it, never overlaps it (ts and dur rounded separately could overlap by 1 ns, and
// Perfetto drops partially overlapping slices).
int64_t nanoseconds(double seconds) {
  return std::llround(seconds * 1e9);
}

// The trace format's unit is the microsecond whatever "displayTimeUnit" says (Trace Event
// Format spec; Perfetto follows it since 2022, google/perfetto#274): integer nanoseconds are
// printed as microseconds with exactly three decimals, which Perfetto's JSON importer turns
// back into the same nanoseconds (llround(ts * 1000), json_utils CoerceToTs).
std::string microseconds(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const int64_t magnitude = ns < 0 ? -ns : ns;
  return fmt::format("{}{}.{:03d}", sign, magnitude / 1000, magnitude % 1000);
}

std::string slice_name(const SimulationResult& result, const TaskRecord& task) {
  const std::string op = result.layout.vpp > 1
                             ? fmt::format("mb {} chunk {}", task.micro_batch, task.chunk)
                             : fmt::format("mb {}", task.micro_batch);
  switch (task.kind) {
    case TaskKind::kForward:
      return "F " + op;
    case TaskKind::kBackward:
      return "B " + op;
    case TaskKind::kBackwardInput:
      return "B (input) " + op;
    case TaskKind::kBackwardWeight:
      return "W " + op;
    case TaskKind::kOptimizerStep:
      return "optimizer step";
    case TaskKind::kTpComm:
      return "tp comm " + op;
    case TaskKind::kEpAllToAll:
      return "ep all-to-all " + op;
    case TaskKind::kPpTransfer:
      return (task.stream == StreamKind::kPpForward ? "send activation " : "send gradient ") + op;
    case TaskKind::kRecvWait:
      return "wait " + op;
    case TaskKind::kGradReduce:
      return fmt::format("grad bucket {}", task.bucket);
    case TaskKind::kEmbeddingSync:
      return "embedding grad all-reduce";
    case TaskKind::kParamGather:
      return fmt::format("param bucket {}", task.bucket);
    case TaskKind::kJoin:
      return "join";
    case TaskKind::kCpComm:
      return "cp comm " + op;
  }
  return "?";
}

const char* category(TaskKind kind) {
  if (simulator::is_compute(kind)) {
    return "compute";
  }
  return kind == TaskKind::kRecvWait ? "wait" : "communication";
}

// {"name":NAME,"ph":"M","pid":PID[,"tid":TID],"args":{ARGS}}
std::string metadata(const char* name, int64_t pid, int tid, const std::string& args) {
  const std::string thread = tid > 0 ? fmt::format(",\"tid\":{}", tid) : "";
  return fmt::format("{{\"name\":\"{}\",\"ph\":\"M\",\"pid\":{}{},\"args\":{{{}}}}}", name, pid,
                     thread, args);
}

// next[i]: the task after i on the same stream of the same rank, -1 if none.
std::vector<int32_t> next_on_stream(const std::vector<TaskRecord>& tasks) {
  std::vector<int32_t> next(tasks.size(), -1);
  std::map<std::pair<int32_t, int>, int32_t> previous;
  for (int32_t i = 0; i < static_cast<int32_t>(tasks.size()); ++i) {
    if (tasks[i].rank < 0) {
      continue;
    }
    auto [it, inserted] =
        previous.emplace(std::make_pair(tasks[i].rank, thread_id(tasks[i].stream)), i);
    if (!inserted) {
      next[it->second] = i;
      it->second = i;
    }
  }
  return next;
}

}  // namespace

std::string chrome_trace_json(const SimulationResult& result) {
  std::string out = "{\"otherData\":";
  out += nlohmann::json{{"model", result.model_name},
                        {"cluster", result.cluster_name},
                        {"step_time_s", result.step_time_s}}
             .dump();
  out += ",\"traceEvents\":[\n";
  bool first = true;
  auto event = [&](const std::string& text) {
    out += first ? "" : ",\n";
    out += text;
    first = false;
  };
  for (size_t rank = 0; rank < result.ranks.size(); ++rank) {
    const simulator::SimulatedRank& r = result.ranks[rank];
    event(metadata("process_name", r.global_rank, 0,
                   fmt::format("\"name\":\"rank {} (stage {}, dp {}, tp {})\"", r.global_rank,
                               r.coords.pp_rank, r.coords.dp_rank, r.coords.tp_rank)));
    event(metadata("process_sort_index", r.global_rank, 0, fmt::format("\"sort_index\":{}", rank)));
  }
  std::set<std::pair<int32_t, int>> threads;  // (rank, tid) of every stream with work
  for (const TaskRecord& task : result.tasks) {
    if (task.rank >= 0) {
      threads.emplace(task.rank, thread_id(task.stream));
    }
  }
  for (const auto& [rank, tid] : threads) {
    const int64_t pid = result.ranks[rank].global_rank;
    const std::string name = simulator::to_string(static_cast<StreamKind>(tid - 1));
    event(metadata("thread_name", pid, tid, fmt::format("\"name\":\"{}\"", name)));
    event(metadata("thread_sort_index", pid, tid, fmt::format("\"sort_index\":{}", tid)));
  }
  for (const simulator::TaskSpan& span : simulator::task_spans(result)) {
    const TaskRecord& task = result.tasks[span.first_task];
    double alone_seconds = 0;  // the pieces' durations without contention
    for (int32_t piece = span.first_task; piece <= span.last_task; ++piece) {
      alone_seconds += result.tasks[piece].alone_seconds;
    }
    std::string args = fmt::format("\"alone_ms\":{:.6f}", alone_seconds * 1e3);
    if (task.micro_batch >= 0) {
      args += fmt::format(",\"micro_batch\":{},\"chunk\":{}", task.micro_batch, task.chunk);
    }
    event(fmt::format(
        "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},"
        "\"dur\":{},\"args\":{{{}}}}}",
        slice_name(result, task), category(task.kind), result.ranks[task.rank].global_rank,
        thread_id(task.stream), microseconds(nanoseconds(span.start_seconds)),
        microseconds(nanoseconds(span.end_seconds) - nanoseconds(span.start_seconds)), args));
  }
  // Flow arrows: from the transfer on the sender's channel to the first op after the receive
  // on the receiver's compute stream. Both ends sit at the middle of their slice, so that each
  // binds to the slice enclosing it ('s' always does, 'f' with "bp":"e") whatever order a
  // viewer gives events of equal time.
  const std::vector<int32_t> next = next_on_stream(result.tasks);
  for (int32_t i = 0; i < static_cast<int32_t>(result.tasks.size()); ++i) {
    const TaskRecord& transfer = result.tasks[i];
    if (transfer.kind != TaskKind::kPpTransfer || transfer.peer < 0) {
      continue;
    }
    int32_t consumer = next[transfer.peer];
    while (consumer >= 0 && result.tasks[consumer].kind == TaskKind::kRecvWait) {
      consumer = next[consumer];  // several receives in a row: the op after them
    }
    if (consumer < 0) {
      continue;
    }
    const TaskRecord& target = result.tasks[consumer];
    const char* name = transfer.stream == StreamKind::kPpForward ? "activation" : "gradient";
    event(fmt::format(
        "{{\"name\":\"{}\",\"cat\":\"transfer\",\"ph\":\"s\",\"id\":{},\"pid\":{},\"tid\":{},"
        "\"ts\":{}}}",
        name, i, result.ranks[transfer.rank].global_rank, thread_id(transfer.stream),
        microseconds(nanoseconds(0.5 * (transfer.start_seconds + transfer.end_seconds)))));
    event(fmt::format(
        "{{\"name\":\"{}\",\"cat\":\"transfer\",\"ph\":\"f\",\"bp\":\"e\",\"id\":{},\"pid\":{},"
        "\"tid\":{},\"ts\":{}}}",
        name, i, result.ranks[target.rank].global_rank, thread_id(target.stream),
        microseconds(nanoseconds(0.5 * (target.start_seconds + target.end_seconds)))));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace meshplan::reports
