// The planner's reports (reports/plan_report.cpp): each table row and its JSON record carry the
// same values, and the JSON keys are the README's.

#include "meshplan/plan_report.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "table_text.h"

namespace meshplan::reports {
TEST_CASE("plan report: Megatron-FSDP with a pipeline carries a caveat, row and record") {
  // GPT-3 175B on 1,024 A100s, ZeRO 2 with pp 4 under megatron: Megatron-FSDP, whose v2 adapter
  // refuses pp > 1 and which no Megatron-LM test runs with a pipeline. The same layout without
  // a pipeline (pp 1) and the distributed optimizer (ZeRO 1) with one carry none.
  const models::TransformerConfig model = models::load_model("gpt3-175b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  planner::SearchSpace space;
  space.num_gpus = 1024;
  space.global_batch = 1536;
  space.tp = 8;
  space.pp = 4;
  int with_caveat = 0;
  std::string table;
  for (int zero : {1, 2}) {
    space.zero = zero;
    const planner::SearchResult result =
        planner::search_layouts(model, cluster, space, {}, planner::Objective::kTime, 3);
    const Report report = plan_report(model, cluster, 1024, result, planner::PlanOptions{});
    REQUIRE(report.json.at("plans").size() == 3);
    for (const nlohmann::json& record : report.json.at("plans")) {
      CHECK(record.contains("caveat") == (zero == 2));
      with_caveat += record.contains("caveat") ? 1 : 0;
    }
    table += report.table;
  }
  CHECK(with_caveat == 3);
  CHECK(table.find("#      plan 1: caveat: Megatron-FSDP with pp > 1") != std::string::npos);
  planner::Layout one_stage;
  one_stage.pp = 1;
  one_stage.dp = 128;
  one_stage.zero = 2;
  CHECK(planner::framework_caveat(planner::Framework::kMegatron, one_stage).empty());
  planner::Layout piped = one_stage;
  piped.pp = 4;
  CHECK_FALSE(planner::framework_caveat(planner::Framework::kMegatron, piped).empty());
  CHECK(planner::framework_caveat(planner::Framework::kMeshplan, piped).empty());
  // ZB-H1 under deepspeed: Megatron-DeepSpeed's schedule, not DeepSpeed's own engine's.
  planner::Layout zb_h1 = piped;
  zb_h1.zero = 1;
  CHECK(planner::framework_caveat(planner::Framework::kDeepSpeed, zb_h1).empty());
  zb_h1.schedule = planner::ScheduleKind::kZbH1;
  CHECK(planner::framework_caveat(planner::Framework::kDeepSpeed, zb_h1) ==
        "ZB-H1 runs under Megatron-DeepSpeed only (--enable-zbh1-pipeline "
        "--enable-zbh1-exact-semantics, f4157bea; --emit megatron-deepspeed writes them), not "
        "under DeepSpeed's own pipeline engine or GPT-NeoX");
  CHECK(planner::framework_caveat(planner::Framework::kMeshplan, zb_h1).empty());
}

TEST_CASE("plan report: a plan with recompute modules names its list under its row") {
  // Qwen3-30B-A3B at 4,096 tokens on 128 H100, tp 1, micro-batch 2, ZeRO 2, under
  // --recompute-modules auto: its pick recomputes core_attn, moe_act and layernorm (planner test
  // "recompute_modules auto: the fastest list that fits").
  models::TransformerConfig model = models::load_model("qwen3-30b-a3b");
  model.seq_length = 4096;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  planner::SearchSpace space;
  space.num_gpus = 128;
  space.global_batch = 1024;
  space.tp = 1;
  space.micro_batch = 2;
  space.zero = 2;
  space.search_recompute_modules = true;
  planner::PlanOptions options;
  options.overlap_p2p_comm = true;
  const planner::SearchResult result =
      planner::search_layouts(model, cluster, space, options, planner::Objective::kTime, 1);
  const Report report = plan_report(model, cluster, 128, result, planner::PlanOptions{});
  CHECK(report.table.find("#      plan 1: recompute modules core_attn,moe_act,layernorm\n") !=
        std::string::npos);
  CHECK(report.json.at("plans")[0].at("layout").at("recompute_modules") ==
        nlohmann::json{"core_attn", "moe_act", "layernorm"});
}

TEST_CASE("plan header: the window, and on how many layers when a pattern chooses them") {
  models::TransformerConfig model = models::load_model("mistral-7b");  // 32 layers, seq 8192
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const auto model_line = [&] {
    const std::string header = format_plan_header(model, cluster, 8, 8);
    return header.substr(header.find("# model"));
  };
  CHECK(model_line().find("seq 8192, sliding window 4096\n") != std::string::npos);
  // N 4: layer numbers 4, 8, ..., 32 full, the other 24 windowed.
  model.window_attn_skip_freq = 4;
  CHECK(model_line().find("seq 8192, sliding window 4096 on 24 of 32 layers\n") !=
        std::string::npos);
  model.sliding_window = 0;
  model.window_attn_skip_freq = 0;
  CHECK(model_line().find("sliding window") == std::string::npos);
}

TEST_CASE("plan report: each row and its JSON record are the same plan, best first") {
  // GPT-3 175B on 1024 A100s with a global batch of 1536 (Narayanan et al. 2021, Table 1's row).
  const models::TransformerConfig model = models::load_model("gpt3-175b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  planner::SearchSpace space;
  space.num_gpus = 1024;
  space.global_batch = 1536;
  const planner::SearchResult result =
      planner::search_layouts(model, cluster, space, {}, planner::Objective::kTime, 3);
  REQUIRE(result.best.size() == 3);
  const Report report = plan_report(model, cluster, 1024, result, planner::PlanOptions{});
  const std::vector<std::string> rows = data_rows(report.table);
  REQUIRE(rows.size() == 3);
  REQUIRE(report.json.at("plans").size() == 3);
  // 96 layers of 12 h^2 + 13 h with h = 12288, embeddings 50257 h, positions 2048 h, final
  // LayerNorm 2h: 174,604,259,328 parameters.
  CHECK(report.json.at("model").at("num_parameters") == 174604259328);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<std::string> row = fields(rows[i]);
    const nlohmann::json& record = report.json.at("plans")[i];
    REQUIRE(row.size() == 17);
    CHECK(row[0] == std::to_string(i + 1));
    CHECK(row[1] == std::to_string(record.at("layout").at("tp").get<int64_t>()));
    CHECK(row[2] == std::to_string(record.at("layout").at("pp").get<int64_t>()));
    CHECK(row[3] == std::to_string(record.at("layout").at("dp").get<int64_t>()));
    // The step column (4 decimals) is the record's step time, rounded.
    CHECK(row[11] == fmt::format("{:.4f}", record.at("step_time_s").get<double>()));
    // m = global_batch / (dp x micro_batch) = 1536 / (dp x mb), from the record's layout.
    const nlohmann::json& layout = record.at("layout");
    const int64_t m =
        1536 / (layout.at("dp").get<int64_t>() * layout.at("micro_batch").get<int64_t>());
    CHECK(row[14] == std::to_string(m));
    CHECK(record.at("num_micro_batches") == m);
    const nlohmann::json& b = record.at("step_breakdown");
    CHECK(row[15] == fmt::format("{:.4f}", b.at("bubble_seconds").get<double>()));
    // Exposed communication: tp exposed + pp transfers + dp exposed (plan_report.h).
    const double exposed = b.at("tp_comm_exposed_seconds").get<double>() +
                           b.at("pp_transfer_seconds").get<double>() +
                           b.at("dp_comm_exposed_seconds").get<double>();
    CHECK(row[16] == fmt::format("{:.4f}", exposed));
    if (i > 0) {
      CHECK(report.json.at("plans")[i - 1].at("step_time_s").get<double>() <=
            record.at("step_time_s").get<double>());
    }
  }
}

TEST_CASE("validation report: the README's keys, one row per run") {
  const std::string path = std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/planner/runs_small.json";
  const planner::ValidationReport validation = planner::validate_runs(read_json_file(path), path);
  const Report report = validation_report(validation);
  const nlohmann::json& json = report.json;
  REQUIRE(json.at("runs").size() == 2);
  CHECK(data_rows(report.table).size() == 2);
  for (const char* key :
       {"id", "predicted_step_time_s", "published_step_time_s", "error_pct", "layout"}) {
    CHECK(json.at("runs")[0].contains(key));
  }
  CHECK(json.at("runs")[0].at("id") == "fixture-fixed-layout");
  CHECK(json.at("runs")[0].at("published_step_time_s") == 2.0);  // the fixture's figure
  CHECK(fields(data_rows(report.table)[0])[0] == "fixture-fixed-layout");
  // Version 1: no framework stated, so it is guessed (the source names no framework and is
  // dated 2021: Megatron-LM's 2021-22 options), marked * and explained under the table.
  CHECK(fields(data_rows(report.table)[0])[1] == "megatron*");
  CHECK(fields(data_rows(report.table)[0])[3] == "2.000");
  CHECK(json.at("runs")[0].at("framework").is_null());
  CHECK(json.at("runs")[0].at("costed_framework") == "megatron");
  CHECK(json.at("runs")[0].at("software_guess") == validation.runs[0].software_guess);
  CHECK(
      validation.runs[0].software_guess.starts_with("megatron (the default; dated 2021: "
                                                    "2021-22 defaults): no flash attention"));
  CHECK(report.table.find("#   fixture-fixed-layout: " + validation.runs[0].software_guess +
                          "\n") != std::string::npos);
  CHECK(json.at("runs")[0].at("options_stated") == false);
  CHECK(json.at("mean_abs_error_pct").get<double>() == validation.mean_abs_error_pct);
  CHECK(json.at("max_abs_error_pct").get<double>() == validation.max_abs_error_pct);
  CHECK(json.at("num_not_predicted") == 0);
  CHECK(report.table.find("# 2 runs, 2 predicted: ") != std::string::npos);
  CHECK(report.table.find("# OK: every run predicted\n") != std::string::npos);
}

TEST_CASE("validation report: a run not predicted has null figures, its reason, and fails") {
  const std::string path =
      std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/planner/runs_unpredictable.json";
  const planner::ValidationReport validation = planner::validate_runs(read_json_file(path), path);
  const Report report = validation_report(validation);
  const nlohmann::json& json = report.json;
  REQUIRE(json.at("runs").size() == 3);
  REQUIRE(data_rows(report.table).size() == 3);
  const nlohmann::json& record = json.at("runs")[1];
  CHECK(record.at("id") == "fixture-uneven-stages");
  CHECK(record.at("predicted_step_time_s").is_null());
  CHECK(record.at("error_pct").is_null());
  CHECK(record.at("layout").is_null());
  CHECK(record.at("error") == validation.runs[1].not_predicted_reason);
  CHECK(record.at("published_step_time_s") == 2.0);  // the fixture's figure
  CHECK_FALSE(json.at("runs")[0].contains("error"));
  const std::vector<std::string> row = fields(data_rows(report.table)[1]);
  CHECK(row[0] == "fixture-uneven-stages");
  CHECK(row[2] == "-");
  CHECK(row[3] == "2.000");
  CHECK(row[5] == "not");
  CHECK(row[6] == "predicted:");
  CHECK(data_rows(report.table)[1].find(validation.runs[1].not_predicted_reason) !=
        std::string::npos);
  CHECK(json.at("num_runs") == 3);
  CHECK(json.at("num_predicted") == 2);
  CHECK(json.at("num_not_predicted") == 1);
  CHECK(report.table.find("# 3 runs, 2 predicted: ") != std::string::npos);
  // No run of the fixture has used_for_parameters: which runs chose the parameters is
  // unknown, so the report claims neither a chosen-on nor a held-out figure.
  CHECK(report.table.find("\n# efficiency parameters chosen on: not stated here (no run has "
                          "used_for_parameters); the project's validation/public_runs.json "
                          "marks them\n# FAILED: 1 of 3 runs not predicted\n") !=
        std::string::npos);
  CHECK(report.table.find("held out") == std::string::npos);
  CHECK(json.at("chosen_on").is_null());
  CHECK(json.at("held_out").is_null());
  CHECK(report.table.find("#                                 run framework  predicted  published"
                          "    error  layout") == 0);
  CHECK(report.table.find("\n#                                                      (s)        (s)"
                          "      (%)\n") != std::string::npos);
}

TEST_CASE(
    "validation report: chosen-on and held-out figures once a run states used_for_parameters") {
  const std::string path =
      std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/planner/runs_unpredictable.json";
  nlohmann::json runs = read_json_file(path);
  runs["runs"][0]["used_for_parameters"] = true;  // version 2: the key is allowed
  const planner::ValidationReport validation = planner::validate_runs(runs, path);
  REQUIRE(validation.parameters_marked);
  const Report report = validation_report(validation);
  const nlohmann::json& json = report.json;
  // Run 0 chose them; run 1 is not predicted; run 2 (no key: false) is held out.
  CHECK(json.at("chosen_on").at("num_predicted") == 1);
  CHECK(json.at("chosen_on").at("mean_abs_error_pct").get<double>() ==
        std::fabs(validation.runs[0].error_pct()));  // the mean of one run
  CHECK(json.at("held_out").at("num_predicted") == 1);
  CHECK(json.at("held_out").at("max_abs_error_pct").get<double>() ==
        std::fabs(validation.runs[2].error_pct()));
  CHECK(report.table.find("# efficiency parameters chosen on: 1 predicted runs, mean |error| ") !=
        std::string::npos);
  CHECK(report.table.find("# held out (not used to choose them): 1 predicted runs, mean "
                          "|error| ") != std::string::npos);
}

TEST_CASE("refined table: names and units lines, one row per plan, footer") {
  const std::vector<RefinedPlan> refined{{2, 1.5, 1.6, planner::Layout{}},
                                         {1, 1.75, 1.5, planner::Layout{}}};
  const std::string table = format_refined_table(refined);
  const std::vector<std::string> rows = data_rows(table);
  REQUIRE(rows.size() == 2);
  CHECK(fields(rows[0])[0] == "1");
  CHECK(fields(rows[0])[1] == "2");
  CHECK(fields(rows[0])[2] == "1.5000");
  CHECK(fields(rows[1])[2] == "1.7500");
  CHECK(table.find("#rank analytic   simulated    analytic  layout\n") != std::string::npos);
  CHECK(table.find("#       (rank)         (s)         (s)\n") != std::string::npos);
}

}  // namespace meshplan::reports

namespace meshplan::reports {
TEST_CASE("explain names the layers outside DeepSpeed's checkpointed runs") {
  // GPT-3 175B (96 layers) over pp 8 under deepspeed with activation_checkpoint_interval 3 and
  // 12 layers a stage: stage 0's first run holds two functions and layer 0; the last stage's 12
  // layers fill four runs, so none of its layers is left out (planner test
  // deepspeed_checkpoint_runs_test). Interval 5: stage 0's layers 0-2 and stage 7's 94-95.
  planner::Plan plan;
  plan.model = models::load_model("gpt3-175b");
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.num_gpus = 1024;
  plan.layout.tp = 8;
  plan.layout.pp = 8;
  plan.layout.dp = 16;
  plan.layout.micro_batch = 1;
  plan.layout.global_batch = 2048;
  plan.layout.sequence_parallel = true;
  plan.layout.zero = 1;
  plan.layout.recompute = planner::Recompute::kFull;
  plan.layout.recompute_group_layers = 3;
  plan.options.framework = planner::Framework::kDeepSpeed;
  const std::string three = format_explain(
      plan, planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options));
  CHECK(three.find("# stage 0: layer 0 sits in runs of 3 that also hold the embedding (DeepSpeed "
                   "checkpoints runs of transformer layers only): whole activations kept, not "
                   "recomputed\n") != std::string::npos);
  CHECK(three.find("# stage 7:") == std::string::npos);
  plan.layout.recompute_group_layers = 5;
  const std::string five = format_explain(
      plan, planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options));
  CHECK(five.find("# stage 0: layers 0-2 sit in runs of 5") != std::string::npos);
  CHECK(five.find("# stage 7: layers 94-95 sit in runs of 5 that also hold the final norm and "
                  "head") != std::string::npos);
  // The options line, as plan prints it above its table: the plan's options and placement.
  CHECK(three.find("\n# options: flash attention on, overlap grad-reduce on, param-gather on, "
                   "tp-comm off, scatter-gather pipeline off, placement tp-dp-pp, bucket 500000000 "
                   "elements (reduce_bucket_size), vocab padded to a multiple of 128 x tp\n") !=
        std::string::npos);
  // Megatron's uniform method groups from each chunk's first layer: no such line.
  plan.options.framework = planner::Framework::kMegatron;
  const std::string megatron = format_explain(
      plan, planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options));
  CHECK(megatron.find(" in runs of ") == std::string::npos);
}
}  // namespace meshplan::reports

namespace meshplan::reports {
TEST_CASE("plan header: Gemma 2's logit soft-caps are named, and only when set") {
  models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  const std::string plain = format_plan_header(model, cluster, 1, 1, planner::Framework::kMegatron);
  CHECK(plain.find("soft-caps") == std::string::npos);
  model.attn_logit_softcapping = 50.0;
  model.final_logit_softcapping = 30.0;
  CHECK(format_plan_header(model, cluster, 1, 1, planner::Framework::kMegatron)
            .find(", seq 32, logit soft-caps: attention 50, final 30\n") != std::string::npos);
  model.attn_logit_softcapping = 0.0;
  CHECK(format_plan_header(model, cluster, 1, 1, planner::Framework::kMegatron)
            .find(", seq 32, logit soft-caps: final 30\n") != std::string::npos);
}
}  // namespace meshplan::reports

namespace meshplan::reports {
TEST_CASE("plan header: multi-token-prediction depths are named with their parameters") {
  models::TransformerConfig model = models::load_model("tiny-moe");
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  CHECK(format_plan_header(model, cluster, 1, 1, planner::Framework::kMegatron).find(" MTP ") ==
        std::string::npos);
  model.mtp_num_layers = 2;
  // Two depths of 3 x 64 norms, eh_proj 2 x 64 x 64 and one MoE layer each.
  const int64_t depth = 3 * 64 + 2 * 64 * 64 + models::count_layer_parameters(model, true).total();
  CHECK(models::count_parameters(model).mtp == 2 * depth);
  CHECK(format_plan_header(model, cluster, 1, 1, planner::Framework::kMegatron)
            .find(fmt::format(", 2 MTP depths ({:.2f}B)\n",
                              2.0 * static_cast<double>(depth) / 1e9)) != std::string::npos);
}
}  // namespace meshplan::reports
