// execute's tables and JSON: the header and units lines, and each record's table row and JSON
// record carrying the same values.
#include "meshplan/execute_report.h"

#include <doctest/doctest.h>

namespace meshplan::reports {
namespace {

executor::ExecuteReport two_entry_report() {
  executor::ExecuteReport report;
  report.steps = {{1, 5.5, 0.25, 2048.0, 0.1}, {2, 5.25, 0.125, 4096.0, 0.05}};
  executor::StageMemory memory;
  memory.stage = 0;
  memory.measured_bytes = 1100;
  memory.predicted_tensor_bytes = 1000;
  memory.predicted_bytes = 1200;
  memory.peak_rss_bytes = 9000;
  report.memory = {memory};
  executor::CollectiveRecord all_reduce;
  all_reduce.kind = planner::CollectiveKind::kAllReduce;
  all_reduce.group = planner::CommGroup::kDp;
  all_reduce.measured_bytes = all_reduce.predicted_bytes = 40000;
  all_reduce.measured_calls = 4;  // ceil(40000 / 10485)
  all_reduce.predicted_calls = 1;
  executor::CollectiveRecord send;
  send.kind = planner::CollectiveKind::kSendRecv;
  send.group = planner::CommGroup::kPp;
  send.measured_bytes = send.predicted_bytes = 4096;
  send.measured_calls = send.predicted_calls = 8;
  report.collectives = {all_reduce, send};
  return report;
}

TEST_CASE("execute's step table: names line, units line, fixed-width rows") {
  CHECK(execute_step_row({3, 5.25, 0.5, 1024.0, 0.0}) ==
        "         3      5.250000      0.500000        1024.0\n");
  planner::Plan plan;
  plan.model = models::load_model("tiny");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.global_batch = 16;
  plan.num_gpus = 1;
  const std::string header = execute_header(plan, "p.json");
  CHECK(header.find("#     step          loss     step_time      tokens/s\n"
                    "#                 (nats)           (s)    (tokens/s)\n") != std::string::npos);
}

TEST_CASE("a calls mismatch is a MISMATCH even when the bytes agree") {
  const std::string summary = execute_summary(two_entry_report());
  CHECK(summary.find("#    stage            kind      group     calls      pred        measured "
                     "      predicted      diff\n") != std::string::npos);
  CHECK(summary.find("        0      all_reduce") != std::string::npos);
  CHECK(summary.find("# collective calls and bytes: 1 of 2 (stage, kind, group) entries match "
                     "the planner (MISMATCH)\n") != std::string::npos);
  // Steps 2-2 only: the first step is left out of the average.
  CHECK(summary.find("# avg step time (steps 2-2): 0.125000 s\n") != std::string::npos);
}

TEST_CASE("the JSON records carry the table's values") {
  const nlohmann::json json = execute_json(two_entry_report());
  CHECK(json["steps"][1]["loss"] == 5.25);
  CHECK(json["steps"][1]["tokens_per_s"] == 4096.0);
  CHECK(json["peak_memory_bytes"][0]["measured"] == 1100);
  CHECK(json["peak_memory_bytes"][0]["predicted_tensor_bytes"] == 1000);
  CHECK(json["collectives"][0]["kind"] == "all_reduce");
  CHECK(json["collectives"][0]["measured_calls"] == 4);
  CHECK(json["collectives"][0]["predicted_calls"] == 1);
  CHECK(json["collectives"][1]["predicted_bytes"] == 4096);
}

TEST_CASE("GPU runs: the device's used bytes beside pred_total, in the table and the JSON") {
  executor::ExecuteReport report = two_entry_report();
  report.memory[0].device_used_bytes = 1320;  // 10% above pred_total 1200: (1320 - 1200) / 1200
  CHECK(execute_summary(report).find("# stage 0 device memory in use (cudaMemGetInfo): 1320 B, "
                                     "10.00% from pred_total\n") != std::string::npos);
  CHECK(execute_json(report)["peak_memory_bytes"][0]["device_used_bytes"] == 1320);
  // CPU runs (0): no such line.
  CHECK(execute_summary(two_entry_report()).find("device memory") == std::string::npos);
}

TEST_CASE("checkpoint lines") {
  CHECK(execute_checkpoint_line({false, 4, "ck/step_00000004"}) ==
        "# checkpoint: wrote step 4 to ck/step_00000004\n");
  CHECK(execute_checkpoint_line({true, 2, "ck/step_00000002"}) ==
        "# checkpoint: resumed step 2 from ck/step_00000002 (CRC-32C verified)\n");
}

}  // namespace
}  // namespace meshplan::reports
