// compare's inputs (compare.h): meshplan execute's --json, Megatron-LM and torchtitan logs.

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshplan/compare.h"
#include "meshplan/json_io.h"
#include "meshplan/units.h"

namespace meshplan::reports {

namespace {

// Mean of `times` leaving out the first `skip` entries (warm-up), or of all when that would
// leave none.
// The run's step time: the mean of its logged steps after the first `skip` (warm-up), or of
// all of them when there are no more than that.
void set_step_time(MeasuredRun& run, size_t skip) {
  const std::vector<double>& times = run.step_times_s;
  const size_t first = times.size() > skip ? skip : 0;
  double sum = 0;
  for (size_t i = first; i < times.size(); i++) {
    sum += times[i];
  }
  run.steps_averaged = static_cast<int64_t>(times.size() - first);
  run.step_time_s = sum / static_cast<double>(run.steps_averaged);
}

// The token of `allowed` characters after `key` (and blanks) in `line`, searching from `from`;
// empty when `key` is absent. Hand-written, not std::regex: libstdc++'s regex recurses per
// character and overflows the stack on a long log line.
std::string token_after(const std::string& line, const std::string& key, size_t from = 0,
                        const std::string& allowed = "0123456789.eE+-") {
  size_t at = line.find(key, from);
  if (at == std::string::npos) {
    return "";
  }
  at += key.size();
  while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) {
    at++;
  }
  const size_t end = line.find_first_not_of(allowed, at);
  return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// `line` without ANSI colour codes (ESC [ digits-and-semicolons m).
std::string strip_ansi(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); i++) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      size_t j = i + 2;
      while (j < line.size() &&
             (std::isdigit(static_cast<unsigned char>(line[j])) != 0 || line[j] == ';')) {
        j++;
      }
      if (j < line.size() && line[j] == 'm') {
        i = j;
        continue;
      }
    }
    out += line[i];
  }
  return out;
}

template <typename Enum>
Enum parse_enum(const std::string& text, std::initializer_list<Enum> values,
                const std::string& source, const std::string& field) {
  for (Enum value : values) {
    if (planner::to_string(value) == text) {
      return value;
    }
  }
  throw InputError(fmt::format("{}: {}: unknown value ({})", source, field, text));
}

// The pipeline stage of global rank `rank` in the plan's layout; InputError naming the line.
int64_t stage_of_rank(const planner::Plan& plan, double rank, const std::string& source,
                      int64_t line) {
  if (!(rank >= 0) || rank >= static_cast<double>(plan.num_gpus)) {
    throw InputError(fmt::format("{}: line {}: rank {} is not in the plan's {} ranks", source, line,
                                 rank, plan.num_gpus));
  }
  return planner::rank_coords(plan.layout, static_cast<int64_t>(rank)).pp_rank;
}

// Bytes of a memory figure: at most 2^62 (an exabyte: no device has that).
int64_t memory_bytes(double bytes, const std::string& source, int64_t line) {
  if (!(bytes >= 0) || bytes > 4.6e18) {
    throw InputError(
        fmt::format("{}: line {}: memory: out of range ({:.6g} bytes)", source, line, bytes));
  }
  return static_cast<int64_t>(bytes);
}

// A number of a log line; InputError "<source>: line N: <field>: not a number (<text>)" for
// one that overflows or is not finite.
double log_number(const std::string& text, const std::string& source, int64_t line,
                  const std::string& field) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(value)) {
    throw InputError(
        fmt::format("{}: line {}: {}: not a finite number ({})", source, line, field, text));
  }
  return value;
}

// An iteration or step number of a log line (at most 1e15).
int64_t log_count(const std::string& text, const std::string& source, int64_t line,
                  const std::string& field) {
  const double value = log_number(text, source, line, field);
  if (value > 1e15) {
    throw InputError(fmt::format("{}: line {}: {}: out of range ({})", source, line, field, text));
  }
  return static_cast<int64_t>(value);
}

void record_peak(MeasuredRun& run, int64_t stage, int64_t bytes) {
  int64_t& peak = run.peak_memory_bytes[stage];
  peak = std::max(peak, bytes);
}

}  // namespace

MeasuredRun parse_execute_json(const std::string& text, const std::string& source) {
  const nlohmann::json json = parse_json_text(text, source);
  MeasuredRun run;
  run.format = "meshplan execute";
  run.memory_kind = "live tensors";
  if (!json.is_object() || !json.contains("steps") || !json["steps"].is_array() ||
      json["steps"].empty()) {
    throw InputError(
        fmt::format("{}: steps: missing or empty (not meshplan execute's --json)", source));
  }
  for (const nlohmann::json& step : json["steps"]) {
    const double seconds = require_number(step, "step_time_s", source + ": steps[]");
    // As validate's published times: a microsecond to a year.
    if (!(seconds >= 1e-6 && seconds <= 3.2e7)) {
      throw InputError(
          fmt::format("{}: steps[]: step_time_s: must be between 1e-6 and 3.2e7 seconds ({})",
                      source, seconds));
    }
    run.step_times_s.push_back(seconds);
  }
  // As execute's own footer: the first step pays for allocation and warm-up.
  set_step_time(run, 1);
  for (const nlohmann::json& memory : json.value("peak_memory_bytes", nlohmann::json::array())) {
    const std::string where = source + ": peak_memory_bytes[]";
    const int64_t stage = require_int(memory, "stage", where);
    const int64_t bytes = require_int(memory, "measured", where);
    if (stage < 0 || bytes < 0) {
      throw InputError(fmt::format("{}: stage and measured: must not be negative ({}, {})", where,
                                   stage, bytes));
    }
    record_peak(run, stage, bytes);
  }
  for (const nlohmann::json& c : json.value("collectives", nlohmann::json::array())) {
    const std::string where = source + ": collectives[]";
    MeasuredCollective measured;
    measured.stage = require_int(c, "stage", where);
    measured.kind =
        parse_enum(require_string(c, "kind", where),
                   {planner::CollectiveKind::kAllReduce, planner::CollectiveKind::kAllGather,
                    planner::CollectiveKind::kReduceScatter, planner::CollectiveKind::kSendRecv},
                   where, "kind");
    measured.group = parse_enum(require_string(c, "group", where),
                                {planner::CommGroup::kTp, planner::CommGroup::kPp,
                                 planner::CommGroup::kDp, planner::CommGroup::kEmbedding},
                                where, "group");
    measured.calls = require_int(c, "measured_calls", where);
    measured.message_bytes = require_int(c, "measured_bytes", where);
    if (measured.stage < 0 || measured.calls < 0 || measured.message_bytes < 0) {
      throw InputError(fmt::format(
          "{}: stage, measured_calls and measured_bytes: must not be negative ({}, {}, {})", where,
          measured.stage, measured.calls, measured.message_bytes));
    }
    run.collectives.push_back(measured);
  }
  return run;
}

// Megatron-LM training_log (megatron/training/training.py): " iteration N/ M | ... | elapsed
// time per iteration (ms): T | ...", the mean over the logging interval. report_memory
// (megatron/training/utils.py) prints "[Rank R] (after N iterations) memory (MB) | allocated: A
// | max allocated: X | ..." (older versions: "after N iterations memory (MB) | ...", rank 0), MB
// = 2^20 bytes. With --log-memory-to-tensorboard the last pipeline rank logs
// "mem-max-allocated-bytes".
MeasuredRun parse_megatron_log(const std::string& text, const std::string& source,
                               const planner::Plan& plan) {
  MeasuredRun run;
  run.format = "megatron-lm log";
  run.memory_kind = "max allocated";
  std::vector<int64_t> iterations;
  std::istringstream lines(text);
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    number++;
    const std::string ms_text = token_after(line, "elapsed time per iteration (ms):");
    if (!ms_text.empty()) {
      iterations.push_back(
          log_count(token_after(line, "iteration", 0, "0123456789"), source, number, "iteration"));
      const double ms = log_number(ms_text, source, number, "elapsed time per iteration (ms)");
      if (!(ms > 0)) {
        throw InputError(
            fmt::format("{}: line {}: elapsed time per iteration (ms): not positive ({})", source,
                        number, ms_text));
      }
      run.step_times_s.push_back(ms / 1e3);
    } else if (line.find("memory (MB) | allocated:") != std::string::npos) {
      const std::string rank_text = token_after(line, "[Rank ", 0, "0123456789");
      const double rank = rank_text.empty() ? 0 : log_number(rank_text, source, number, "Rank");
      const double mib =
          log_number(token_after(line, "max allocated:"), source, number, "max allocated");
      record_peak(run, stage_of_rank(plan, rank, source, number),
                  memory_bytes(mib * static_cast<double>(kBytesPerMiB), source, number));
    } else if (line.find("mem-max-allocated-bytes") != std::string::npos) {
      const size_t at = line.find("mem-max-allocated-bytes") + 23;
      const size_t value = line.find_first_not_of(" \t:=|", at);
      const std::string bytes =
          token_after(line.substr(value == std::string::npos ? at : value), "");
      record_peak(run, plan.layout.pp - 1,
                  memory_bytes(log_number(bytes, source, number, "mem-max-allocated-bytes"), source,
                               number));
    }
  }
  if (run.step_times_s.empty()) {
    throw InputError(fmt::format(
        "{}: no 'elapsed time per iteration (ms)' line (not a Megatron-LM log)", source));
  }
  // The first interval from iteration 0 holds the warm-up (allocation, NCCL setup): left out
  // when the log starts there and has more than one line.
  const bool starts_at_zero =
      iterations.size() > 1 && iterations[0] == iterations[1] - iterations[0];
  set_step_time(run, starts_at_zero ? 1 : 0);
  return run;
}

// torchtitan MetricsProcessor.log (torchtitan/components/metrics.py, e347b1e5): "step: N  loss:
// L  [grad_norm: G  ]memory: X GiB(P%)  tps: T  tflops: F  mfu: M%", with ANSI colours, X =
// max_reserved in GiB and T = local tokens / (seconds * non-data-parallel size), so one step
// takes global_batch * s / (T * num_gpus) seconds. torchrun may prefix "[rankR]:".
MeasuredRun parse_torchtitan_log(const std::string& text, const std::string& source,
                                 const planner::Plan& plan) {
  MeasuredRun run;
  run.format = "torchtitan log";
  run.memory_kind = "max reserved";
  std::istringstream lines(text);
  int64_t number = 0;
  int64_t first_step = -1;
  const double tokens_per_step =
      static_cast<double>(plan.layout.global_batch * plan.model.seq_length);
  for (std::string raw; std::getline(lines, raw);) {
    number++;
    const std::string line = strip_ansi(raw);
    const size_t step_at = line.find("step:");
    if (step_at == std::string::npos || line.find("loss:", step_at) == std::string::npos ||
        line.find("GiB", step_at) == std::string::npos) {
      continue;
    }
    std::string tps_text = token_after(line, "tps:", step_at, "0123456789,.");
    const std::string gib_text = token_after(line, "memory:", step_at);
    if (tps_text.empty() || gib_text.empty()) {
      continue;
    }
    std::erase(tps_text, ',');
    const double tps = log_number(tps_text, source, number, "tps");
    if (!(tps > 0)) {
      throw InputError(
          fmt::format("{}: line {}: tps: not positive ({})", source, number, tps_text));
    }
    if (first_step < 0) {
      first_step =
          log_count(token_after(line, "step:", step_at, "0123456789"), source, number, "step");
    }
    run.step_times_s.push_back(tokens_per_step / (tps * static_cast<double>(plan.num_gpus)));
    const std::string rank_text =
        line.rfind("[rank", 0) == 0 ? token_after(line, "[rank", 0, "0123456789") : std::string();
    const double rank = rank_text.empty() ? 0 : log_number(rank_text, source, number, "rank");
    const double gib = log_number(gib_text, source, number, "memory");
    record_peak(run, stage_of_rank(plan, rank, source, number),
                memory_bytes(gib * static_cast<double>(kBytesPerGiB), source, number));
  }
  if (run.step_times_s.empty()) {
    throw InputError(fmt::format(
        "{}: no 'step: N loss: ... memory: X GiB ... tps: T' line (not a torchtitan log)", source));
  }
  // Step 1 compiles and warms up; left out when the log has more.
  set_step_time(run, first_step == 1 ? 1 : 0);
  return run;
}

MeasuredRun read_measured_run(const std::string& path, const planner::Plan& plan) {
  const std::string text = read_input_file(path);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    MeasuredRun run = parse_execute_json(text, path);
    // A stage the plan lacks is another plan's report.
    for (const auto& [stage, bytes] : run.peak_memory_bytes) {
      if (stage >= plan.layout.pp) {
        throw InputError(fmt::format("{}: peak_memory_bytes: stage {} is not in the plan (pp {})",
                                     path, stage, plan.layout.pp));
      }
    }
    for (const MeasuredCollective& c : run.collectives) {
      if (c.stage >= plan.layout.pp) {
        throw InputError(fmt::format("{}: collectives: stage {} is not in the plan (pp {})", path,
                                     c.stage, plan.layout.pp));
      }
    }
    return run;
  }
  if (text.find("elapsed time per iteration (ms)") != std::string::npos) {
    return parse_megatron_log(text, path, plan);
  }
  if (text.find("tps:") != std::string::npos && text.find("step:") != std::string::npos) {
    return parse_torchtitan_log(text, path, plan);
  }
  throw InputError(fmt::format(
      "{}: not meshplan execute's --json, a Megatron-LM log ('elapsed time per iteration (ms)') "
      "or a torchtitan log ('step: N ... tps: T')",
      path));
}

}  // namespace meshplan::reports
