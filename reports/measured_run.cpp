// compare's inputs (compare.h): meshplan execute's --json, Megatron-LM, torchtitan and DeepSpeed
// logs.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

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

// Every printable character but the blank and '|', for token_after: a log field whole.
const std::string kFieldCharacters = [] {
  std::string characters;
  for (char c = '!'; c <= '~'; ++c) {
    if (c != '|') {
      characters += c;
    }
  }
  return characters;
}();

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
  if (!(rank >= 0) || rank >= static_cast<double>(plan.num_gpus) || rank != std::floor(rank)) {
    throw InputError(fmt::format("{}: line {}: rank {} is not in the plan's {} ranks", source, line,
                                 rank, plan.num_gpus));
  }
  return planner::rank_coords(plan.layout, static_cast<int64_t>(rank)).pp_rank;
}

// A measured step time, as validate's published times: a microsecond to a year (a log's
// 1e-300 ms printed a 300-digit error before). InputError "<where>: must be between ...".
double checked_step_time(double seconds, const std::string& where) {
  if (!(seconds >= 1e-6 && seconds <= 3.2e7)) {
    throw InputError(
        fmt::format("{}: must be between 1e-6 and 3.2e7 seconds ({:.6g})", where, seconds));
  }
  return seconds;
}

// Bytes of a memory figure: at most 2^50, a pebibyte (no device has that; 1e9 GiB was taken).
int64_t memory_bytes(double bytes, const std::string& source, int64_t line) {
  if (!(bytes >= 0) || bytes > 1.126e15) {
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

// Whether a log's first interval is the run's first (it ends at step or iteration N, N being the
// interval), so holds the warm-up (allocation, NCCL setup): left out when another follows.
bool first_interval_is_warm_up(const std::vector<int64_t>& interval_ends) {
  return interval_ends.size() > 1 && interval_ends[0] == interval_ends[1] - interval_ends[0];
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
    run.step_times_s.push_back(
        checked_step_time(require_number(step, "step_time_s", source + ": steps[]"),
                          source + ": steps[]: step_time_s"));
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
    if (c.contains("predicted_calls") && c.contains("predicted_bytes")) {
      measured.predicted_calls = require_int(c, "predicted_calls", where);
      measured.predicted_bytes = require_int(c, "predicted_bytes", where);
    }
    if (measured.stage < 0 || measured.calls < 0 || measured.message_bytes < 0) {
      throw InputError(fmt::format(
          "{}: stage, measured_calls and measured_bytes: must not be negative ({}, {}, {})", where,
          measured.stage, measured.calls, measured.message_bytes));
    }
    run.collectives.push_back(measured);
  }
  return run;
}

namespace {

// training_log prints " global batch size: {:5d} |" on every iteration line (megatron/training/
// training.py; Megatron-DeepSpeed's the same): a log of another batch did another amount of work
// per step, so its step time is another plan's.
void check_megatron_batch(const std::string& line, const std::string& source, int64_t number,
                          const planner::Plan& plan) {
  const std::string batch_text = token_after(line, "global batch size:", 0, "0123456789");
  if (batch_text.empty()) {
    return;
  }
  const int64_t batch = log_count(batch_text, source, number, "global batch size");
  if (batch != plan.layout.global_batch) {
    throw InputError(fmt::format(
        "{}: line {}: global batch size: {}, the plan's is {} (a log of another plan's run)",
        source, number, batch, plan.layout.global_batch));
  }
}

}  // namespace

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
    // The whole field up to the next blank or '|', so "nan" or "5,000.5" is refused by
    // log_number rather than read as no time or as 5.
    const std::string ms_text =
        token_after(line, "elapsed time per iteration (ms):", 0, kFieldCharacters);
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
      check_megatron_batch(line, source, number, plan);
    } else if (line.find("memory (MB) | allocated:") != std::string::npos) {
      const std::string rank_text = token_after(line, "[Rank ", 0, "0123456789.");
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
  set_step_time(run, first_interval_is_warm_up(iterations) ? 1 : 0);
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

namespace {

// A rank given by a "[rankR]:" line prefix (torchrun's tee), else global rank 0: DeepSpeed prints
// these lines on rank 0 only (PipelineEngine.train_batch `if self.global_rank == 0`; engine.step's
// report_progress; see_memory_usage returns on other ranks).
double deepspeed_line_rank(const std::string& line, const std::string& source, int64_t number) {
  if (line.rfind("[rank", 0) != 0) {
    return 0;
  }
  return log_number(token_after(line, "[rank", 0, "0123456789"), source, number, "rank");
}

// The log's global batch, samples/sec x iter time, against the plan's: each is printed rounded to
// 3 decimals, so the product is off by at most (samples/sec + iter time) x 0.0005 (+ 0.5 for the
// batch being whole). A log of another batch is another plan's run.
void check_deepspeed_batch(double iter_time_s, double samples_per_s, const planner::Plan& plan,
                           const std::string& source, int64_t number) {
  const double implied = iter_time_s * samples_per_s;
  const double bound = (iter_time_s + samples_per_s) * 0.0005 + 0.5;
  const double planned = static_cast<double>(plan.layout.global_batch);
  if (std::abs(implied - planned) > bound) {
    throw InputError(fmt::format(
        "{}: line {}: samples/sec x iter time = {:.1f} sequences per step, not the plan's global "
        "batch {}",
        source, number, implied, plan.layout.global_batch));
  }
}

// ThroughputTimer's "epoch=E/micro_step=M/global_step=G": in epoch 0, M / G is the gradient
// accumulation steps, which must be the plan's global batch / (micro-batch x dp).
void check_deepspeed_accumulation(const std::string& line, const planner::Plan& plan,
                                  const std::string& source, int64_t number) {
  const std::string epoch = token_after(line, "epoch=", 0, "0123456789");
  const std::string micro = token_after(line, "micro_step=", 0, "0123456789");
  const std::string global = token_after(line, "global_step=", 0, "0123456789");
  if (epoch != "0" || micro.empty() || global.empty()) {
    return;
  }
  const int64_t micro_steps = log_count(micro, source, number, "micro_step");
  const int64_t global_steps = log_count(global, source, number, "global_step");
  const int64_t per_step = plan.layout.micro_batch * plan.layout.dp;
  if (global_steps <= 0 || per_step <= 0 || plan.layout.global_batch % per_step != 0) {
    return;
  }
  const int64_t planned = plan.layout.global_batch / per_step;
  if (micro_steps != global_steps * planned) {
    throw InputError(fmt::format(
        "{}: line {}: micro_step {} over global_step {} is not the plan's {} micro-batches per "
        "step (global batch {} / (micro-batch {} x dp {}))",
        source, number, micro_steps, global_steps, planned, plan.layout.global_batch,
        plan.layout.micro_batch, plan.layout.dp));
  }
}

}  // namespace

// DeepSpeed (deepspeedai/DeepSpeed), printed by global rank 0:
//   PipelineEngine.train_batch (deepspeed/runtime/pipe/engine.py, v0.3.13 .. 38327e07, the same
//     fields throughout): "steps: N loss: L [<name>: V ...] iter time (s): T samples/sec: S", T
//     the mean step time over the steps_per_print steps ending at N, S = train_batch_size / T;
//   ThroughputTimer.stop (deepspeed/utils/timer.py, v0.8.0 .. 38327e07): "epoch=E/micro_step=M/
//     global_step=G, RunningAvgSamplesPerSec=R, CurrSamplesPerSec=C, MemAllocated=AGB,
//     MaxMemAllocated=XGB", C = train_batch_size / the step's forward-to-step() time. v0.7.x
//     printed "E/M, RunningAvgSamplesPerSec=R, CurrSamplesPerSec=C" per micro-step and v0.6 and
//     older "E/M, SamplesPerSec=R", a running average: refused, as they do not give a step's time;
//   memory: MaxMemAllocated=XGB there, and see_memory_usage's "Max_MA X GB"
//     (deepspeed/runtime/utils.py), torch.cuda.max_memory_allocated() / 2^30, rounded to 0.01.
MeasuredRun parse_deepspeed_log(const std::string& text, const std::string& source,
                                const planner::Plan& plan) {
  MeasuredRun run;
  run.format = "deepspeed log";
  run.memory_kind = "max allocated";
  std::vector<int64_t> pipeline_steps;
  std::vector<double> pipeline_times;
  std::vector<double> throughput_times;
  int64_t old_throughput_line = 0;
  std::istringstream lines(text);
  int64_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    number++;
    const size_t steps_at = line.find("steps:");
    const size_t iter_at = line.find("iter time (s):");
    if (steps_at != std::string::npos && iter_at != std::string::npos && iter_at > steps_at) {
      const double seconds =
          log_number(token_after(line, "iter time (s):", iter_at), source, number, "iter time (s)");
      if (!(seconds > 0)) {
        throw InputError(
            fmt::format("{}: line {}: iter time (s): not positive ({})", source, number, seconds));
      }
      const std::string tput = token_after(line, "samples/sec:", iter_at);
      if (!tput.empty()) {
        check_deepspeed_batch(seconds, log_number(tput, source, number, "samples/sec"), plan,
                              source, number);
      }
      pipeline_steps.push_back(
          log_count(token_after(line, "steps:", steps_at, "0123456789"), source, number, "steps"));
      pipeline_times.push_back(seconds);
    }
    const std::string current = token_after(line, "CurrSamplesPerSec=");
    if (!current.empty()) {
      if (line.find("global_step=") == std::string::npos) {
        old_throughput_line = number;
      } else {
        const double samples_per_s = log_number(current, source, number, "CurrSamplesPerSec");
        if (!(samples_per_s > 0)) {
          throw InputError(fmt::format("{}: line {}: CurrSamplesPerSec: not positive ({})", source,
                                       number, current));
        }
        check_deepspeed_accumulation(line, plan, source, number);
        throughput_times.push_back(static_cast<double>(plan.layout.global_batch) / samples_per_s);
      }
    } else if (line.find("SamplesPerSec=") != std::string::npos) {
      old_throughput_line = number;
    }
    for (const char* key : {"MaxMemAllocated=", "Max_MA"}) {
      const std::string gib = token_after(line, key);
      if (!gib.empty()) {
        const double rank = deepspeed_line_rank(line, source, number);
        record_peak(
            run, stage_of_rank(plan, rank, source, number),
            memory_bytes(log_number(gib, source, number, key) * static_cast<double>(kBytesPerGiB),
                         source, number));
      }
    }
  }
  if (!pipeline_times.empty()) {
    run.step_times_s = pipeline_times;
    set_step_time(run, first_interval_is_warm_up(pipeline_steps) ? 1 : 0);
  } else if (!throughput_times.empty()) {
    // ThroughputTimer leaves the first two steps out itself (start_step 2).
    run.step_times_s = throughput_times;
    set_step_time(run, 0);
  } else if (old_throughput_line > 0) {
    throw InputError(fmt::format(
        "{}: line {}: DeepSpeed before v0.8.0 prints a running average or a micro-step's "
        "samples/sec, not a step's time: log with DeepSpeed >= 0.8.0 or the pipeline engine "
        "('steps: N ... iter time (s): T')",
        source, old_throughput_line));
  } else {
    throw InputError(fmt::format(
        "{}: no 'steps: N ... iter time (s): T' or 'CurrSamplesPerSec=' line (not a DeepSpeed "
        "log)",
        source));
  }
  return run;
}

namespace {

// A parsed log with every step time checked (checked_step_time).
MeasuredRun checked_step_times(MeasuredRun run, const std::string& path) {
  for (const double seconds : run.step_times_s) {
    checked_step_time(seconds, path + ": step time");
  }
  return run;
}

}  // namespace

namespace {

// The file as whichever format it is in (read_measured_run's first step).
MeasuredRun read_any_measured_run(const std::string& path, const planner::Plan& plan) {
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
    return checked_step_times(parse_megatron_log(text, path, plan), path);
  }
  if (text.find("tps:") != std::string::npos && text.find("step:") != std::string::npos) {
    return checked_step_times(parse_torchtitan_log(text, path, plan), path);
  }
  if (text.find("iter time (s):") != std::string::npos ||
      text.find("SamplesPerSec=") != std::string::npos) {
    return checked_step_times(parse_deepspeed_log(text, path, plan), path);
  }
  throw InputError(fmt::format(
      "{}: not meshplan execute's --json, a Megatron-LM log ('elapsed time per iteration (ms)'), "
      "a torchtitan log ('step: N ... tps: T') or a DeepSpeed log ('iter time (s): T' or "
      "'CurrSamplesPerSec=')",
      path));
}

// A framework's log measures what that framework ran; a plan costed for another framework
// predicts another run (its memory accounting, overlaps and often its layout differ), as --emit
// refuses such plans. Megatron-DeepSpeed prints Megatron-LM's training_log lines, so those
// compare with megatron and deepspeed plans; execute's --json with any plan (its own predicted
// fields are checked against the plan's).
void check_log_framework(const MeasuredRun& run, const planner::Plan& plan,
                         const std::string& path) {
  using planner::Framework;
  std::vector<Framework> accepted;  // empty: any (execute's --json)
  if (run.format == "megatron-lm log") {
    accepted = {Framework::kMegatron, Framework::kDeepSpeed};
  } else if (run.format == "torchtitan log") {
    accepted = {Framework::kFsdp};
  } else if (run.format == "deepspeed log") {
    accepted = {Framework::kDeepSpeed};
  }
  const Framework framework = plan.options.framework;
  if (accepted.empty() ||
      std::find(accepted.begin(), accepted.end(), framework) != accepted.end()) {
    return;
  }
  std::vector<std::string> names;
  for (Framework f : accepted) {
    names.push_back(planner::to_string(f));
  }
  throw InputError(fmt::format(
      "{}: a {} compares with a plan costed for {}; this plan was costed for {} (re-plan with "
      "--framework {})",
      path, run.format, fmt::join(names, " or "), planner::to_string(framework), names.front()));
}

}  // namespace

MeasuredRun read_measured_run(const std::string& path, const planner::Plan& plan) {
  MeasuredRun run = read_any_measured_run(path, plan);
  check_log_framework(run, plan, path);
  return run;
}

}  // namespace meshplan::reports
