// meshplan compare: the four measured formats parsed with figures worked out by hand from the
// logs, and the comparison against a published Megatron-LM run.
#include "meshplan/compare.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace meshplan::reports {
namespace {

std::string data_path(const std::string& name) {
  return std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/compare/" + name;
}

// The run of alibaba/Megatron-LLaMA issue 24 (tests/data/compare/megatron_llama2_7b_tp4_dp2.log):
// LLaMA2-7B, 8 x A800-80GB (planned as dgx-a100-80gb: same compute and HBM, the A800's NVLink is
// 400 GB/s against 600), TP4-PP1-DP2, global batch 64, sequence length 2048. The log's "overall
// token/sec" counts dp times the tokens: 49977.6 x 5.2452 s = 262143 = 64 x 2048 x dp 2 (the same
// issue's TP1-DP8 run: 8707.8 x 8 x 15.0882 s = 1.051e6 = 64 x 2048 x 8), and 2048 is the
// --seq-length of the same user's script (issue 11). Micro-batch 4 and sequence parallelism from
// that script; the distributed optimizer from Megatron-LLaMA's README (ZeRO-1 as meshplan names
// it). Recompute is not stated; none assumed.
planner::Plan alibaba_plan() {
  planner::Plan plan;
  plan.model = models::load_model("llama2-7b");
  plan.model.seq_length = 2048;
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.layout.tp = 4;
  plan.layout.dp = 2;
  plan.layout.micro_batch = 4;
  plan.layout.global_batch = 64;
  plan.layout.sequence_parallel = true;
  plan.layout.zero = 1;
  plan.num_gpus = 8;
  return plan;
}

TEST_CASE("compare against a published Megatron-LM log (alibaba/Megatron-LLaMA issue 24)") {
  const planner::Plan plan = alibaba_plan();
  const MeasuredRun run = read_measured_run(data_path("megatron_llama2_7b_tp4_dp2.log"), plan);
  CHECK(run.format == "megatron-lm log");
  REQUIRE(run.step_times_s.size() == 2);
  // Iterations 20 and 21: the log does not start at iteration 0, so both count.
  CHECK(run.step_time_s ==
        doctest::Approx((5.2452 + 5.2406) / 2).epsilon(1e-12).scale(0));  // rounding
  CHECK(run.peak_memory_bytes.empty());  // this excerpt has no memory line
  const Comparison comparison = compare_plan(plan, run);
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(comparison.step_time_error_pct);
  CHECK(*comparison.step_time_error_pct ==
        doctest::Approx(100 * (estimate.step_time_s - 5.2429) / 5.2429).epsilon(1e-9).scale(0));
  CHECK(!comparison.peak_memory_error_pct);
  CHECK(comparison.verdict.find(", peak memory not measured: ") != std::string::npos);
  // README "compare" quotes this figure: the prediction is 25.4% short of the run.
  CHECK(*comparison.step_time_error_pct ==
        doctest::Approx(-25.4).epsilon(0.01).scale(0));  // 1 decimal
}

TEST_CASE("Megatron-LM step time field read whole: nan and a thousands separator refused") {
  // The field up to the next blank or '|': "nan" used to leave the line unread (then "no
  // 'elapsed time per iteration (ms)' line"), "5,000.5" to read as 5 ms.
  const planner::Plan plan = alibaba_plan();
  CHECK_THROWS_WITH_AS(
      parse_megatron_log(" iteration 10/ 100 | elapsed time per iteration (ms): nan |\n", "m.log",
                         plan),
      "m.log: line 1: elapsed time per iteration (ms): not a finite number (nan)", InputError);
  CHECK_THROWS_WITH_AS(
      parse_megatron_log(" iteration 10/ 100 | elapsed time per iteration (ms): 5,000.5 |\n",
                         "m.log", plan),
      "m.log: line 1: elapsed time per iteration (ms): not a finite number (5,000.5)", InputError);
}

TEST_CASE("Megatron-LM log of another global batch: refused") {
  // training_log's " global batch size: {:5d} |": twice the plan's batch is twice the work per
  // step, so its step time says nothing about this plan.
  const planner::Plan plan = alibaba_plan();  // global batch 64
  const std::string line =
      " iteration 10/ 100 | elapsed time per iteration (ms): 100.0 | global batch size:   128 |\n";
  CHECK_THROWS_WITH_AS(
      parse_megatron_log(line, "m.log", plan),
      "m.log: line 1: global batch size: 128, the plan's is 64 (a log of another plan's run)",
      InputError);
  const std::string same_batch =
      " iteration 10/ 100 | elapsed time per iteration (ms): 100.0 | global batch size:    64 |\n";
  CHECK(parse_megatron_log(same_batch, "m.log", plan).step_time_s == doctest::Approx(0.1).scale(0));
}

TEST_CASE("Megatron-LM memory lines: [Rank R] report_memory, MB = 2^20 bytes, rank -> stage") {
  planner::Plan plan = alibaba_plan();
  plan.layout.global_batch = 16;  // the log's "global batch size: 16"
  const MeasuredRun run = read_measured_run(data_path("megatron_memory_lines.log"), plan);
  // NVIDIA/Megatron-LM PR 5662: "max allocated: 5670.39" MB = 5670.39 x 1048576 B.
  REQUIRE(run.peak_memory_bytes.size() == 1);
  CHECK(run.peak_memory_bytes.at(0) == 5945834864);  // 5670 x 2^20 + 0.39 x 2^20 = 5945834864.64
  CHECK(run.step_time_s == doctest::Approx(0.744).scale(0));
  // Rank 6 of tp 4 x dp 2 x pp 1 is stage 0; with pp 2 and tp 4 (dp 1) it is stage 1.
  plan.layout.dp = 1;
  plan.layout.pp = 2;
  plan.layout.global_batch = 64;
  const MeasuredRun pipelined = parse_megatron_log(
      " iteration 10/ 100 | elapsed time per iteration (ms): 100.0 |\n"
      "[Rank 6] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | "
      "reserved: 3.0 | max reserved: 3.0\n",
      "m.log", plan);
  CHECK(pipelined.peak_memory_bytes.at(1) == 2 * 1048576);
  CHECK_THROWS_WITH_AS(parse_megatron_log(" iteration 1/ 1 | elapsed time per iteration (ms): 1 |\n"
                                          "[Rank 9] (after 1 iterations) memory (MB) | allocated: "
                                          "1 | max allocated: 2\n",
                                          "m.log", plan),
                       "m.log: line 2: rank 9 is not in the plan's 8 ranks", InputError);
}

TEST_CASE("Megatron-LM: the first interval from iteration 0 is warm-up") {
  const MeasuredRun run = parse_megatron_log(
      " iteration 10/ 100 | elapsed time per iteration (ms): 900.0 |\n"
      " iteration 20/ 100 | elapsed time per iteration (ms): 100.0 |\n"
      " iteration 30/ 100 | elapsed time per iteration (ms): 110.0 |\n",
      "m.log", alibaba_plan());
  CHECK(run.step_time_s == doctest::Approx(0.105).scale(0));  // (100 + 110) / 2 ms
}

TEST_CASE("a 1 MB log line is parsed, not a stack overflow (std::regex recursed per character)") {
  const std::string padding(1 << 20, 'x');
  const MeasuredRun megatron = parse_megatron_log(
      " iteration 3/ 9 | " + padding + " | elapsed time per iteration (ms): 250.0 |\n", "m.log",
      alibaba_plan());
  CHECK(megatron.step_time_s == doctest::Approx(0.25).scale(0));
  const MeasuredRun titan =
      parse_torchtitan_log("step: 3  loss: " + padding + "  memory: 1.00GiB(1.00%)  tps: 16,384\n",
                           "t.log", alibaba_plan());
  CHECK(titan.step_time_s == doctest::Approx(1.0).scale(0));  // 64 x 2048 / (16384 x 8)
}

TEST_CASE("torchtitan log: colours stripped, step time = global batch x s / (tps x GPUs)") {
  planner::Plan plan = alibaba_plan();
  // The line as torchtitan/components/metrics.py (e347b1e5) prints it, ANSI colours included.
  const std::string line =
      "\x1b[31mstep:  2  \x1b[32mloss:  8.12345  \x1b[33mgrad_norm:  1.2345  \x1b[36mmemory: "
      "42.32GiB(44.54%)  \x1b[34mtps: 1,600  \x1b[36mtflops: 65.03  \x1b[35mmfu: 6.58%\x1b[39m\n";
  const MeasuredRun run = parse_torchtitan_log(line, "t.log", plan);
  // 64 x 2048 tokens / (1600 tokens/s per GPU x 8 GPUs) = 10.24 s.
  CHECK(run.step_time_s == doctest::Approx(10.24).scale(0));
  CHECK(run.peak_memory_bytes.at(0) == static_cast<int64_t>(42.32 * 1073741824.0));
  CHECK_THROWS_WITH_AS(parse_torchtitan_log("nothing here\n", "t.log", plan),
                       "t.log: no 'step: N loss: ... memory: X GiB ... tps: T' line (not a "
                       "torchtitan log)",
                       InputError);
}

TEST_CASE(
    "DeepSpeed pipeline engine: iter time (s) per interval, warm-up left out, batch checked") {
  planner::Plan plan = alibaba_plan();
  plan.layout.dp = 1;
  plan.layout.pp = 2;
  // PipelineEngine.train_batch's line (deepspeed/runtime/pipe/engine.py), extra losses as
  // Megatron-DeepSpeed's MoE prints them; samples/sec = 64 / iter time.
  const MeasuredRun run = parse_deepspeed_log(
      "steps: 10 loss: 7.1234 iter time (s): 5.000 samples/sec: 12.800\n"
      "steps: 20 loss: 6.9000 iter time (s): 4.000 samples/sec: 16.000\n"
      "steps: 30 loss: 6.8000 lm loss: 6.7000 moe loss: 0.1000 iter time (s): 4.200 "
      "samples/sec: 15.238\n"
      "[2025-01-01 00:00:00,000] [INFO] [utils.py:782:see_memory_usage] MA 1.5 GB         Max_MA "
      "2.25 GB         CA 3.0 GB         Max_CA 3 GB \n",
      "ds.log", plan);
  CHECK(run.format == "deepspeed log");
  // Steps 1-10 hold the warm-up: the mean of the other two intervals.
  CHECK(run.steps_averaged == 2);
  CHECK(run.step_time_s == doctest::Approx(4.1).epsilon(1e-12).scale(0));
  REQUIRE(run.peak_memory_bytes.size() == 1);
  CHECK(run.peak_memory_bytes.at(0) == static_cast<int64_t>(2.25 * 1073741824.0));
  // 1.000 s x 32.000 samples/s = 32 sequences: another plan's run.
  CHECK_THROWS_WITH_AS(
      parse_deepspeed_log("steps: 10 loss: 1.0 iter time (s): 1.000 samples/sec: 32.000\n",
                          "ds.log", plan),
      "ds.log: line 1: samples/sec x iter time = 32.0 sequences per step, not the plan's global "
      "batch 64",
      InputError);
  CHECK_THROWS_WITH_AS(
      parse_deepspeed_log("steps: 10 loss: 1.0 iter time (s): 0.000 samples/sec: inf\n", "ds.log",
                          plan),
      "ds.log: line 1: iter time (s): not positive (0)", InputError);
}

TEST_CASE("DeepSpeed ThroughputTimer: step time = global batch / CurrSamplesPerSec, >= v0.8.0") {
  const planner::Plan plan = alibaba_plan();  // 64 sequences = micro-batch 4 x dp 2 x 8
  // The line as deepspeed/utils/timer.py ThroughputTimer.stop prints it (DeepSpeed issue 3742).
  const MeasuredRun run = parse_deepspeed_log(
      "[2023-07-25 21:03:17,269] [INFO] [timer.py:215:stop] epoch=0/micro_step=80/global_step=10, "
      "RunningAvgSamplesPerSec=15.5, CurrSamplesPerSec=16.0, MemAllocated=59.65GB, "
      "MaxMemAllocated=63.31GB\n"
      "[2023-07-25 21:03:21,492] [INFO] [timer.py:215:stop] epoch=0/micro_step=88/global_step=11, "
      "RunningAvgSamplesPerSec=15.6, CurrSamplesPerSec=12.8, MemAllocated=59.65GB, "
      "MaxMemAllocated=63.31GB\n",
      "ds.log", plan);
  CHECK(run.step_times_s == std::vector<double>{4.0, 5.0});  // 64 / 16, 64 / 12.8
  CHECK(run.step_time_s == doctest::Approx(4.5).epsilon(1e-12).scale(0));
  CHECK(run.peak_memory_bytes.at(0) == static_cast<int64_t>(63.31 * 1073741824.0));
  // 40 micro-steps in 10 steps is 4 per step, not the plan's 8.
  CHECK_THROWS_WITH_AS(
      parse_deepspeed_log("epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=1, "
                          "CurrSamplesPerSec=1, MemAllocated=1GB, MaxMemAllocated=1GB\n",
                          "ds.log", plan),
      "ds.log: line 1: micro_step 40 over global_step 10 is not the plan's 8 micro-batches per "
      "step (global batch 64 / (micro-batch 4 x dp 2))",
      InputError);
  // v0.6's running average (DeepSpeed issue 1825) does not give a step's time.
  CHECK_THROWS_WITH_AS(
      parse_deepspeed_log("[2022-03-11 02:06:58,985] [INFO] [timer.py:189:stop] 0/40, "
                          "SamplesPerSec=83.48609168106144, MemAllocated=0.26GB, "
                          "MaxMemAllocated=9.02GB\n",
                          "ds.log", plan),
      "ds.log: line 1: DeepSpeed before v0.8.0 prints a running average or a micro-step's "
      "samples/sec, not a step's time: log with DeepSpeed >= 0.8.0 or the pipeline engine "
      "('steps: N ... iter time (s): T')",
      InputError);
  CHECK_THROWS_WITH_AS(parse_deepspeed_log("[rank9]: Max_MA 1.0 GB\n", "ds.log", plan),
                       "ds.log: line 1: rank 9 is not in the plan's 8 ranks", InputError);
}

TEST_CASE("read_measured_run tells a DeepSpeed log from the others") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("meshplan_compare_ds_" + std::to_string(::getpid()) + ".log"))
                               .string();
  {
    std::ofstream out(path);
    out << "[2025-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, "
           "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]\n"
        << "steps: 10 loss: 7.0000 iter time (s): 2.000 samples/sec: 32.000\n";
  }
  planner::Plan plan = alibaba_plan();
  CHECK_THROWS_WITH_AS(
      read_measured_run(path, plan),
      (path + ": a deepspeed log compares with a plan costed for deepspeed; this plan was "
              "costed for megatron (re-plan with --framework deepspeed)")
          .c_str(),
      InputError);
  plan.options.framework = planner::Framework::kDeepSpeed;
  const MeasuredRun run = read_measured_run(path, plan);
  std::filesystem::remove(path);
  CHECK(run.format == "deepspeed log");
  CHECK(run.step_time_s == doctest::Approx(2.0).scale(0));
}

TEST_CASE("execute --json: step times after the first, memory and collectives per stage") {
  const std::string json = R"({"steps": [{"step": 1, "loss": 5.0, "step_time_s": 9.0,
      "tokens_per_s": 1.0}, {"step": 2, "loss": 4.0, "step_time_s": 2.0, "tokens_per_s": 1.0},
      {"step": 3, "loss": 3.0, "step_time_s": 4.0, "tokens_per_s": 1.0}],
      "peak_memory_bytes": [{"stage": 0, "measured": 1000, "predicted": 0,
      "predicted_tensor_bytes": 0, "peak_rss_bytes": 0}],
      "collectives": [{"stage": 0, "kind": "all_reduce", "group": "dp", "measured_calls": 3,
      "predicted_calls": 3, "measured_bytes": 300, "predicted_bytes": 300}]})";
  const MeasuredRun run = parse_execute_json(json, "m.json");
  CHECK(run.step_time_s == doctest::Approx(3.0).scale(0));  // (2 + 4) / 2: step 1 is warm-up
  CHECK(run.steps_averaged == 2);
  CHECK(
      compare_report(Comparison{}, "p.json", "m.json", run)
          .table.find("# step time measured: mean of 2 of 3 logged step(s), warm-up left out\n") !=
      std::string::npos);
  // One step: nothing to leave out, and the header says so.
  const MeasuredRun one_step = parse_execute_json(R"({"steps": [{"step_time_s": 9.0}]})", "m.json");
  CHECK(one_step.steps_averaged == 1);
  CHECK(compare_report(Comparison{}, "p.json", "m.json", one_step)
            .table.find("# step time measured: mean of 1 of 1 logged step(s) (none left out as "
                        "warm-up)\n") != std::string::npos);
  CHECK(run.peak_memory_bytes.at(0) == 1000);
  REQUIRE(run.collectives.size() == 1);
  CHECK(run.collectives[0].kind == planner::CollectiveKind::kAllReduce);
  CHECK(run.collectives[0].group == planner::CommGroup::kDp);
  CHECK(run.collectives[0].message_bytes == 300);
  CHECK_THROWS_WITH_AS(parse_execute_json(R"({"steps": []})", "m.json"),
                       "m.json: steps: missing or empty (not meshplan execute's --json)",
                       InputError);
}

TEST_CASE("compare refuses another plan's execute report and absurd log figures") {
  // The alibaba plan (tp 4, dp 2) predicts a dp all-reduce on stage 0; a report whose own
  // prediction differs was run from another plan.
  const planner::Plan plan = alibaba_plan();
  MeasuredRun other;
  other.step_times_s = {1.0};
  other.step_time_s = 1.0;
  MeasuredCollective dp;
  dp.group = planner::CommGroup::kDp;
  dp.calls = 3;
  dp.message_bytes = 300;
  dp.predicted_calls = 3;
  dp.predicted_bytes = 300;
  other.collectives = {dp};
  CHECK_THROWS_AS(compare_plan(plan, other), InputError);
  try {
    compare_plan(plan, other);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).starts_with(
        "the measured run: collectives: stage 0 dp all_reduce: it predicted 300 B in 3 calls, "
        "this plan "));
  }
  other.collectives[0].predicted_calls.reset();  // reports without predictions: compared as is
  other.collectives[0].predicted_bytes.reset();
  CHECK_NOTHROW(compare_plan(plan, other));

  const auto error_of_log = [&plan](const std::string& name, const std::string& text) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("meshplan_compare_" + std::to_string(::getpid()) + name))
                                 .string();
    std::ofstream(path) << text;
    std::string error = "(no error)";
    try {
      read_measured_run(path, plan);
    } catch (const InputError& e) {
      error = e.what();
    }
    std::filesystem::remove(path);
    return error.substr(error.find(": ") + 2);  // without the temporary path
  };
  CHECK(error_of_log("tiny.log", " iteration 1/ 2 | elapsed time per iteration (ms): 1e-300 |\n") ==
        "step time: must be between 1e-6 and 3.2e7 seconds (1e-303)");
  CHECK(error_of_log("huge.log", " iteration 1/ 2 | elapsed time per iteration (ms): 1e300 |\n") ==
        "step time: must be between 1e-6 and 3.2e7 seconds (1e+297)");
  CHECK(error_of_log("frac.log",
                     " iteration 1/ 2 | elapsed time per iteration (ms): 5 |\n[Rank 1.5] (after 1 "
                     "iterations) memory (MB) | allocated: 1 | max allocated: 2\n") ==
        "line 2: rank 1.5 is not in the plan's 8 ranks");
  CHECK(error_of_log("mem.log", "step: 1  loss:  5.5  memory:  1e9GiB(3%)  tps: 100\n") ==
        "line 1: memory: out of range (1.07374e+18 bytes)");
}

TEST_CASE("compare's table: names and units lines, error = (predicted - measured) / measured") {
  CompareRow row{"step time", -1, "s", 1.1, 1.0};
  CHECK(*row.error_pct() == doctest::Approx(10.0).scale(0));
  Comparison comparison;
  comparison.rows = {row, {"peak memory", 0, "B", 90, 100}};
  // A moved-in string: assigning a short literal trips GCC 12's -Wrestrict false positive (GCC
  // bug 105329) under -Werror.
  comparison.verdict = std::string("v");
  MeasuredRun run;
  run.format = "megatron-lm log";
  run.memory_kind = "max allocated";
  run.step_times_s = {1.0};
  run.steps_averaged = 1;
  const Report report = compare_report(comparison, "p.json", "m.log", run);
  CHECK(report.table.find("#                component  stage   unit        predicted         "
                          "measured     error\n#                                               "
                          "                                 (%)\n") != std::string::npos);
  CHECK(report.table.find("\n                 step time    all      s         1.100000         "
                          "1.000000    +10.00\n") != std::string::npos);
  CHECK(report.table.find("\n               peak memory      0      B               90         "
                          "     100    -10.00\n") != std::string::npos);
  CHECK(report.json["rows"][1]["error_pct"] == doctest::Approx(-10.0).scale(0));
  CHECK(report.json["rows"][0]["stage"].is_null());
}

}  // namespace
}  // namespace meshplan::reports
