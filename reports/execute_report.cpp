// execute's tables and JSON (execute_report.h): one writer per record kind fills both the
// table row and the JSON record, so the two cannot disagree.

#include "meshplan/execute_report.h"

#include <fmt/format.h>

namespace meshplan::reports {

namespace {

using executor::CollectiveRecord;
using executor::ExecuteReport;
using executor::StageMemory;
using executor::StepRecord;

std::string percent_difference(int64_t measured, int64_t predicted) {
  if (predicted == 0) {
    return measured == 0 ? "0.00" : "n/a";
  }
  return fmt::format(
      "{:.2f}", 100.0 * static_cast<double>(measured - predicted) / static_cast<double>(predicted));
}

// The writers: each appends its row to `row` and/or sets `record`, where not null.
void write_step(const StepRecord& s, std::string* row, nlohmann::json* record) {
  if (row != nullptr) {
    *row += fmt::format("{:>10} {:>13.6f} {:>13.6f} {:>13.1f}\n", s.step, s.loss, s.step_time_s,
                        s.tokens_per_s);
  }
  if (record != nullptr) {
    *record = {{"step", s.step},
               {"loss", s.loss},
               {"step_time_s", s.step_time_s},
               {"tokens_per_s", s.tokens_per_s}};
  }
}

void write_memory(const StageMemory& m, std::string* row, nlohmann::json* record) {
  if (row != nullptr) {
    *row += fmt::format("{:>10} {:>15} {:>15} {:>9} {:>15} {:>15}\n", m.stage, m.measured_bytes,
                        m.predicted_tensor_bytes,
                        percent_difference(m.measured_bytes, m.predicted_tensor_bytes),
                        m.predicted_bytes, m.peak_rss_bytes);
    if (m.device_used_bytes > 0) {
      // GPU runs: the device's own count (context, cuBLAS and NCCL workspaces included).
      *row += fmt::format(
          "# stage {} device memory in use (cudaMemGetInfo): {} B, {}% from pred_total\n", m.stage,
          m.device_used_bytes, percent_difference(m.device_used_bytes, m.predicted_bytes));
    }
  }
  if (record != nullptr) {
    *record = {{"stage", m.stage},
               {"measured", m.measured_bytes},
               {"predicted", m.predicted_bytes},
               {"predicted_tensor_bytes", m.predicted_tensor_bytes},
               {"peak_rss_bytes", m.peak_rss_bytes},
               {"device_used_bytes", m.device_used_bytes}};
  }
}

void write_collective(const CollectiveRecord& c, std::string* row, nlohmann::json* record) {
  if (row != nullptr) {
    *row += fmt::format("{:>10} {:>15} {:>10} {:>9} {:>9} {:>15} {:>15} {:>9}\n", c.stage,
                        planner::to_string(c.kind), planner::to_string(c.group), c.measured_calls,
                        c.predicted_calls, c.measured_bytes, c.predicted_bytes,
                        percent_difference(c.measured_bytes, c.predicted_bytes));
  }
  if (record != nullptr) {
    *record = {{"stage", c.stage},
               {"kind", planner::to_string(c.kind)},
               {"group", planner::to_string(c.group)},
               {"measured_calls", c.measured_calls},
               {"predicted_calls", c.predicted_calls},
               {"measured_bytes", c.measured_bytes},
               {"predicted_bytes", c.predicted_bytes}};
  }
}

std::string memory_table(const ExecuteReport& report) {
  std::string out =
      "#\n# Peak memory per stage, max over the stage's ranks: measured = peak bytes of live "
      "tensors in the executor's allocator; predicted = the planner's weights + gradients + "
      "optimizer + activations (pred_total adds its reserved bytes)\n";
  out += fmt::format("#{:>9} {:>15} {:>15} {:>9} {:>15} {:>15}\n", "stage", "measured", "predicted",
                     "diff", "pred_total", "peak_rss");
  out += fmt::format("#{:>9} {:>15} {:>15} {:>9} {:>15} {:>15}\n", "", "(B)", "(B)", "(%)", "(B)",
                     "(B)");
  for (const StageMemory& m : report.memory) {
    write_memory(m, &out, nullptr);
  }
  return out;
}

std::string collective_table(const ExecuteReport& report) {
  std::string out =
      "#\n# Collectives of one step per rank of each stage: calls issued, and message bytes "
      "(nccl-tests size: all-reduce buffer, all-gather output, reduce-scatter input, send "
      "payload); the expert all-to-all's bytes are the mean over the stage's ranks, as they "
      "follow the routing\n";
  out += fmt::format("#{:>9} {:>15} {:>10} {:>9} {:>9} {:>15} {:>15} {:>9}\n", "stage", "kind",
                     "group", "calls", "pred", "measured", "predicted", "diff");
  out += fmt::format("#{:>9} {:>15} {:>10} {:>9} {:>9} {:>15} {:>15} {:>9}\n", "", "", "", "",
                     "calls", "(B)", "(B)", "(%)");
  for (const CollectiveRecord& c : report.collectives) {
    write_collective(c, &out, nullptr);
  }
  return out;
}

std::string footer(const ExecuteReport& report) {
  std::string out;
  if (!report.steps.empty()) {
    // The first step pays for allocation and warm-up; the average leaves it out when it can.
    const size_t first = report.steps.size() > 1 ? 1 : 0;
    double seconds = 0;
    for (size_t i = first; i < report.steps.size(); i++) {
      seconds += report.steps[i].step_time_s;
    }
    seconds /= static_cast<double>(report.steps.size() - first);
    out +=
        fmt::format("#\n# loss: step {} {:.6f}, step {} {:.6f}\n", report.steps.front().step,
                    report.steps.front().loss, report.steps.back().step, report.steps.back().loss);
    out += fmt::format("# avg step time (steps {}-{}): {:.6f} s\n", report.steps[first].step,
                       report.steps.back().step, seconds);
  }
  size_t matches = 0;
  for (const CollectiveRecord& c : report.collectives) {
    matches += c.matches() ? 1 : 0;
  }
  out += fmt::format(
      "# collective calls and bytes: {} of {} (stage, kind, group) entries match the planner "
      "({})\n",
      matches, report.collectives.size(), matches == report.collectives.size() ? "OK" : "MISMATCH");
  return out;
}

}  // namespace

std::string execute_header(const planner::Plan& plan, const std::string& plan_source) {
  const models::TransformerConfig& m = plan.model;
  std::string out;
  out += fmt::format("# meshplan execute {}\n", plan_source);
  out +=
      fmt::format("# model {} (l={} h={} a={} g={} f={} V={} s={}), cluster {}, {} ranks, fp32\n",
                  m.name, m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads,
                  m.ffn_hidden_size, m.vocab_size, m.seq_length, plan.cluster.name, plan.num_gpus);
  out += fmt::format("# layout {}, global batch {}\n", planner::describe(plan.layout),
                     plan.layout.global_batch);
  if (plan.options.framework != planner::Framework::kMeshplan) {
    // The executor follows the plan's data-parallel buckets and reductions (dp_buckets), not
    // the framework's allocations: say so before the memory table compares them.
    const std::string framework = planner::to_string(plan.options.framework);
    out += fmt::format(
        "# plan for framework {0}: the executor runs its own kernels and allocations, with {0}'s "
        "data-parallel buckets and reductions; predicted memory below is {0}'s accounting, not "
        "the executor's (plan with --framework meshplan to compare memory like for like)\n",
        framework);
  }
  out += "#\n";
  out += fmt::format("#{:>9} {:>13} {:>13} {:>13}\n", "step", "loss", "step_time", "tokens/s");
  out += fmt::format("#{:>9} {:>13} {:>13} {:>13}\n", "", "(nats)", "(s)", "(tokens/s)");
  return out;
}

std::string execute_step_row(const StepRecord& step) {
  std::string row;
  write_step(step, &row, nullptr);
  return row;
}

std::string execute_checkpoint_line(const executor::CheckpointEvent& event) {
  return event.resumed
             ? fmt::format("# checkpoint: resumed step {} from {} (CRC-32C verified)\n", event.step,
                           event.directory)
             : fmt::format("# checkpoint: wrote step {} to {}\n", event.step, event.directory);
}

std::string execute_summary(const ExecuteReport& report) {
  return memory_table(report) + collective_table(report) + footer(report);
}

nlohmann::json execute_json(const ExecuteReport& report) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepRecord& s : report.steps) {
    write_step(s, nullptr, &steps.emplace_back());
  }
  nlohmann::json memory = nlohmann::json::array();
  for (const StageMemory& m : report.memory) {
    write_memory(m, nullptr, &memory.emplace_back());
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const CollectiveRecord& c : report.collectives) {
    write_collective(c, nullptr, &collectives.emplace_back());
  }
  return {{"steps", steps}, {"peak_memory_bytes", memory}, {"collectives", collectives}};
}

}  // namespace meshplan::reports
