// validate_runs (planner/validation.cpp): the accuracy bars on the 64 published runs of the
// project set (27 the efficiency parameters were chosen on, 37 held out), the run's own
// hardware and software, searched dimensions, and malformed runs files.

#include "meshplan/validation.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "meshplan/cost_model.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "meshplan/search.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::input_error;

// The project's copy of the published runs (validation/README.md); missing data fails the test.
const std::string kPublicRuns = std::string(MESHPLAN_SOURCE_DIR) + "/validation/public_runs.json";

// |error| of each predicted run, as the README defines it: 100 |predicted - published| /
// published.
std::vector<double> abs_errors(const ValidationReport& report, bool chosen_on) {
  std::vector<double> errors;
  for (const ValidationRun& run : report.runs) {
    if (run.predicted && run.used_for_parameters == chosen_on) {
      errors.push_back(100.0 * std::fabs(run.predicted->step_time_s - run.published_step_time_s) /
                       run.published_step_time_s);
    }
  }
  return errors;
}

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) {
    sum += value;
  }
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

double max_of(const std::vector<double>& values) {
  return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end());
}

const ValidationReport& public_report() {
  static const ValidationReport report = validate_runs(read_json_file(kPublicRuns), kPublicRuns);
  return report;
}

// Issue 10's bars for the whole project set. The max is not met today (README, Validation: 4.7%
// mean, 21.3% max over the 64 runs; the 27 chosen-on runs 3.4% / 7.5%, the 37 held-out runs
// 5.7% / 21.3%: Megatron-Bridge's GPT-OSS 120B H100 row, the first MoE run, is predicted 21.3%
// fast, and GLM-130B and GPT-NeoX-20B, DeepSpeed's pipeline engine, 18.1% and 13.3% fast).
// should_fail() records that: this case fails the day the bars hold, and then loses the
// decorator.
TEST_CASE("project runs: mean |error| <= 5%, max <= 12% (issue 10 bars, not met yet)" *
          doctest::should_fail()) {
  REQUIRE(std::filesystem::exists(kPublicRuns));
  const ValidationReport& report = public_report();
  std::vector<double> all = abs_errors(report, true);
  const std::vector<double> held_out = abs_errors(report, false);
  all.insert(all.end(), held_out.begin(), held_out.end());
  CHECK(mean_of(all) <= 5.0);
  CHECK(max_of(all) <= 12.0);
}

TEST_CASE("project runs: every run predicted; chosen-on and held-out errors reported apart") {
  REQUIRE(std::filesystem::exists(kPublicRuns));
  const ValidationReport& report = public_report();
  CHECK(report.num_not_predicted == 0);
  CHECK(report.num_memory_misses == 0);  // every run fits meshplan's memory estimate too
  const std::vector<double> chosen_on = abs_errors(report, true);
  const std::vector<double> held_out = abs_errors(report, false);
  CHECK(chosen_on.size() == 27);  // the runs the GEMM pairs were chosen on (cluster presets)
  // 15 moved from candidate_runs.json, 3 NVIDIA NeMo 24.07 H100 FP8 runs and 3 more NeMo /
  // Megatron-Bridge FP8 runs once TE's fp8 saved inputs were counted, and the ten rows of
  // torchtitan's Dec 2024 H100 benchmark (one of them moved from candidate_runs.json), never
  // used to choose them; GLM-130B moved from candidate_runs.json once deepspeed's
  // partition_method was modelled; Megatron-Bridge's GPT-OSS 120B H100 row, the first MoE run.
  CHECK(held_out.size() == 37);
  CHECK(report.chosen_on.num_predicted == chosen_on.size());
  CHECK(report.held_out.num_predicted == held_out.size());
  // Same sums and maxima in another order: rounding only.
  CHECK(report.chosen_on.mean_abs_error_pct ==
        doctest::Approx(mean_of(chosen_on)).epsilon(1e-12).scale(0));
  CHECK(report.chosen_on.max_abs_error_pct ==
        doctest::Approx(max_of(chosen_on)).epsilon(1e-12).scale(0));
  CHECK(report.held_out.mean_abs_error_pct ==
        doctest::Approx(mean_of(held_out)).epsilon(1e-12).scale(0));
  CHECK(report.held_out.max_abs_error_pct ==
        doctest::Approx(max_of(held_out)).epsilon(1e-12).scale(0));
  // The issue-4 bar the chosen-on runs were held to (mean <= 10%, none over 20%).
  CHECK(mean_of(chosen_on) <= 10.0);
  CHECK(max_of(chosen_on) <= 20.0);
  MESSAGE("chosen on: mean |error| " << mean_of(chosen_on) << "%, max " << max_of(chosen_on)
                                     << "%; held out: mean " << mean_of(held_out) << "%, max "
                                     << max_of(held_out) << "%");
}

// validation/README.md states the set's size where a reader first looks; a run added or moved
// without it is caught here (it said 51 runs and 24 held out while the file held 62 and 35).
TEST_CASE("validation/README.md states the counts public_runs.json holds") {
  std::ifstream in(std::string(MESHPLAN_SOURCE_DIR) + "/validation/README.md");
  REQUIRE(in);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ValidationReport& report = public_report();
  const auto held_out =
      std::count_if(report.runs.begin(), report.runs.end(),
                    [](const ValidationRun& run) { return !run.used_for_parameters; });
  const std::string total = std::to_string(report.runs.size());
  CHECK(text.find("`public_runs.json` holds " + total + " large-model training runs") !=
        std::string::npos);
  CHECK(text.find("## The project set today (" + total + " runs)") != std::string::npos);
  CHECK(text.find(std::to_string(held_out) + " held out (`false`)") != std::string::npos);
  CHECK(text.find("The " + std::to_string(held_out) + "\nheld-out runs") != std::string::npos);
}

// Issue 10: Calculon (calculon-ai/calculon at caa4b11, `calculon llm-validation`) predicts
// Korthikanti et al. 2022 Table 5's eight runs with mean |error| 3.65% and max 8.87% (its
// delta column: -1.7, +3.3, -0.6, -0.8, +1.7, -8.9, -4.6, -7.6 %, README); meshplan must do
// better on the same eight, with nothing fitted per run.
TEST_CASE("Korthikanti et al. 2022 Table 5: mean and max |error| below Calculon's") {
  REQUIRE(std::filesystem::exists(kPublicRuns));
  std::vector<double> errors;
  for (const ValidationRun& run : public_report().runs) {
    if (run.id.rfind("korthikanti-t5-", 0) == 0) {
      REQUIRE(run.predicted);
      errors.push_back(std::fabs(run.error_pct()));
    }
  }
  CHECK(errors.size() == 8);  // 22B, 175B, 530B, 1T; full recompute and selective + sp each
  CHECK(mean_of(errors) < 3.65);
  CHECK(max_of(errors) < 8.87);
}

TEST_CASE("public runs: layouts and software as published, error as the README defines it") {
  INFO(kPublicRuns);
  REQUIRE(std::filesystem::exists(kPublicRuns));
  const nlohmann::json runs_file = read_json_file(kPublicRuns);
  const ValidationReport& report = public_report();
  REQUIRE(report.runs.size() == runs_file.at("runs").size());
  CHECK(report.runs.size() == 64);  // the README: 64 published training runs

  double sum = 0, worst = 0;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const ValidationRun& run = report.runs[i];
    const nlohmann::json& published = runs_file.at("runs")[i];
    CAPTURE(run.id);
    REQUIRE(run.predicted.has_value());
    CHECK(run.id == published.at("id").get<std::string>());
    // Every source states its software (version 2). The chosen-on Megatron runs' stated options
    // are the ones their source text implied before (software_options), so no figure moved with
    // the format; the held-out NeMo/Megatron-Bridge runs state FP8 (candidate_runs.md).
    CHECK(run.used_for_parameters == published.at("used_for_parameters").get<bool>());
    CHECK(run.framework == published.at("framework").get<std::string>());
    CHECK(run.options_stated);
    if (run.framework == "megatron" && run.used_for_parameters) {
      CHECK(run.options == software_options(run.source));
    }
    CHECK(run.published_step_time_s == published.at("published").at("step_time_s").get<double>());
    // error_pct = 100 (predicted - published) / published (the README's definition).
    const double error = 100.0 * (run.predicted->step_time_s - run.published_step_time_s) /
                         run.published_step_time_s;
    CHECK(run.error_pct() ==
          doctest::Approx(error).epsilon(1e-12).scale(0));  // same formula, rounding
    CHECK(run.predicted->feasible);
    sum += std::fabs(error);
    worst = std::max(worst, std::fabs(error));

    // Every layout field the source gives is kept; the null ones are the searched ones.
    const nlohmann::json& layout = published.at("layout");
    const Layout& predicted = run.predicted->layout;
    std::set<std::string> nulls;
    for (const auto& [key, value] : layout.items()) {
      if (value.is_null()) {
        nulls.insert(key);
      }
    }
    CHECK(std::set<std::string>(run.searched.begin(), run.searched.end()) == nulls);
    const auto fixed = [&](const char* field) { return !layout.at(field).is_null(); };
    CHECK(predicted.global_batch == layout.at("global_batch").get<int64_t>());
    CHECK(predicted.num_gpus() == published.at("hardware").at("num_gpus").get<int64_t>());
    if (fixed("tp"))
      CHECK(predicted.tp == layout.at("tp").get<int64_t>());
    if (fixed("pp"))
      CHECK(predicted.pp == layout.at("pp").get<int64_t>());
    if (fixed("dp"))
      CHECK(predicted.dp == layout.at("dp").get<int64_t>());
    if (fixed("vpp"))
      CHECK(predicted.vpp == layout.at("vpp").get<int64_t>());
    if (fixed("micro_batch")) {
      CHECK(predicted.micro_batch == layout.at("micro_batch").get<int64_t>());
    }
    if (fixed("recompute")) {
      CHECK(to_string(predicted.recompute) == layout.at("recompute").get<std::string>());
    }
    if (fixed("sequence_parallel")) {
      CHECK(predicted.sequence_parallel == layout.at("sequence_parallel").get<bool>());
    }
    if (fixed("zero"))
      CHECK(predicted.zero == layout.at("zero").get<int>());
    if (fixed("schedule")) {
      CHECK(to_string(predicted.schedule) == layout.at("schedule").get<std::string>());
    }
  }
  const double mean = sum / static_cast<double>(report.runs.size());
  MESSAGE("public runs: mean |error| " << mean << "%, max " << worst << "%");
  CHECK(report.mean_abs_error_pct ==
        doctest::Approx(mean).epsilon(1e-12).scale(0));  // rounding only
  CHECK(report.max_abs_error_pct == doctest::Approx(worst).epsilon(1e-12).scale(0));
}

TEST_CASE("software options follow the source") {
  const PlanOptions core = software_options("Megatron-Core H100 table (2024)");
  CHECK(core.flash_attention);
  CHECK(core.overlap_grad_reduce);
  CHECK(core.overlap_param_gather);
  CHECK(core.overlap_tp_comm);
  CHECK(core.overlap_p2p_comm);  // Megatron-LM's default since 4eeff55d (2023-10)
  const PlanOptions sc21 = software_options("Narayanan et al. 2021 (SC21), Table 1");
  CHECK_FALSE(sc21.flash_attention);
  CHECK_FALSE(sc21.overlap_grad_reduce);
  CHECK_FALSE(sc21.overlap_param_gather);
  CHECK_FALSE(sc21.overlap_tp_comm);
  CHECK_FALSE(sc21.overlap_p2p_comm);
}

// The fixture's model: Narayanan et al. 2021's 1.7B GPT, as validate builds it (GPT-style
// LayerNorm models carry every bias; the learned table is seq_length long).
models::TransformerConfig fixture_model() {
  models::TransformerConfig model;
  model.name = "fixture";
  model.num_layers = 24;
  model.hidden_size = 2304;
  model.num_attention_heads = 24;
  model.num_kv_heads = 24;
  model.head_dim = 96;
  model.ffn_hidden_size = 9216;
  model.vocab_size = 51200;
  model.seq_length = 2048;
  model.max_position_embeddings = 2048;
  model.activation = models::Activation::kGelu;
  model.norm = models::Norm::kLayerNorm;
  model.positions = models::Positions::kLearned;
  model.tied_embeddings = true;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = true;
  return model;
}

// The fixture runs' hardware: the A100 preset with 4 GPUs per node and 100 Gbit/s = 12.5e9 B/s
// per GPU (runs_small.json's hardware block).
models::ClusterConfig fixture_cluster() {
  models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  cluster.gpus_per_node = 4;
  cluster.inter_node_bytes_per_second_per_gpu = 100e9 / 8;
  return cluster;
}

TEST_CASE("a fully given layout is predicted on the run's own cluster and software") {
  const std::string path = test::planner_fixture("runs_small.json");
  const ValidationReport report = validate_runs(read_json_file(path), path);
  REQUIRE(report.runs.size() == 2);
  const ValidationRun& run = report.runs[0];
  CHECK(run.id == "fixture-fixed-layout");
  CHECK(run.searched.empty());

  // The run's hardware (fixture_cluster); 2021 software: no flash attention, no overlap.
  const models::ClusterConfig cluster = fixture_cluster();
  Layout layout = test::make_layout(2, 1, 8, 1, 128);
  layout.recompute = Recompute::kFull;
  layout.zero = 1;
  const PlanOptions options = software_options(run.source);
  CHECK_FALSE(options.overlap_grad_reduce);
  const PlanEstimate expected = estimate_plan(fixture_model(), cluster, layout, options);
  REQUIRE(run.predicted.has_value());
  CHECK(describe(run.predicted->layout) == describe(layout));
  CHECK(run.predicted->step_time_s == expected.step_time_s);
  // The preset's own network (25e9 B/s per GPU, 8 GPUs per node) would predict another step: the
  // run's figures are the ones used.
  const PlanEstimate preset =
      estimate_plan(fixture_model(), models::load_cluster("dgx-a100-80gb"), layout, options);
  CHECK(preset.step_time_s != expected.step_time_s);
  // error_pct against the fixture's 2.0 s.
  CHECK(run.error_pct() ==
        doctest::Approx(100.0 * (expected.step_time_s - 2.0) / 2.0).epsilon(1e-12).scale(0));
}

TEST_CASE("a run's cluster may be a preset file path (bench/choose_gemm_efficiency.py)") {
  // The GEMM-pair script points the chosen-on runs at a copy of the preset with another pair:
  // validate must cost the run with the file's efficiency, not the preset's.
  models::ClusterConfig copy = models::load_cluster("dgx-a100-80gb");
  copy.efficiency.gemm_peak_efficiency = 0.5;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "meshplan_validation_cluster_path_test.json";
  {
    std::ofstream out(path);
    out << models::cluster_to_json(copy).dump();
  }
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["runs"][0]["hardware"]["cluster"] = path.string();
  const ValidationReport report = validate_runs(json, "r.json");
  std::filesystem::remove(path);
  const ValidationRun& run = report.runs[0];
  REQUIRE(run.predicted.has_value());
  copy.gpus_per_node = 4;  // the run's hardware, as in the fixed-layout case above
  copy.inter_node_bytes_per_second_per_gpu = 100e9 / 8;
  const PlanEstimate expected =
      estimate_plan(fixture_model(), copy, run.predicted->layout, software_options(run.source));
  CHECK(run.predicted->step_time_s == expected.step_time_s);
  models::ClusterConfig preset = models::load_cluster("dgx-a100-80gb");
  preset.gpus_per_node = 4;
  preset.inter_node_bytes_per_second_per_gpu = 100e9 / 8;
  CHECK(estimate_plan(fixture_model(), preset, run.predicted->layout, software_options(run.source))
            .step_time_s < expected.step_time_s);  // 0.79 of peak is faster than 0.5
}

TEST_CASE("error_pct: signed percent of the published step time, by hand") {
  ValidationRun run;
  run.published_step_time_s = 2.0;
  run.predicted.emplace().step_time_s = 2.5;
  CHECK(run.error_pct() == 25.0);  // (2.5 - 2) / 2 = +25%
  run.predicted->step_time_s = 1.5;
  CHECK(run.error_pct() == -25.0);  // (1.5 - 2) / 2 = -25%
}

TEST_CASE("null layout fields are searched among the layouts that fit") {
  const std::string path = test::planner_fixture("runs_small.json");
  const ValidationReport report = validate_runs(read_json_file(path), path);
  REQUIRE(report.runs.size() == 2);
  const ValidationRun& run = report.runs[1];
  CHECK(run.id == "fixture-searched-layout");
  CHECK(run.searched == std::vector<std::string>{"tp", "pp", "vpp", "micro_batch", "recompute",
                                                 "sequence_parallel", "zero", "schedule"});
  REQUIRE(run.predicted.has_value());
  CHECK(run.predicted->layout.dp == 4);
  // The best of the same search, done here directly: 8 GPUs, 64 sequences, dp 4.
  SearchSpace space;
  space.num_gpus = 8;
  space.global_batch = 64;
  space.dp = 4;
  const SearchResult best =
      search_layouts(fixture_model(), models::load_cluster("dgx-a100-80gb"), space,
                     software_options(run.source), Objective::kTime, 1);
  REQUIRE(best.best.size() == 1);
  CHECK(describe(run.predicted->layout) == describe(best.best[0].layout));
  CHECK(run.predicted->step_time_s == best.best[0].step_time_s);
}

TEST_CASE("malformed runs file: the error names the run and the field") {
  const std::string path = test::planner_fixture("runs_malformed.json");
  CHECK(input_error([&] { validate_runs(read_json_file(path), path); }) ==
        path + ": runs[fixture-bad-gpus]: hardware: num_gpus: expected an integer (\"sixteen\")");
}

// Mutations of the first fixture run, each with the error it must give.
template <typename Change>
std::string run_error_after(Change&& change, int version = 1) {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = version;
  change(json["runs"][0]);
  return input_error([&] { validate_runs(json, "r.json"); });
}

TEST_CASE("malformed runs: missing, wrong-typed and impossible fields") {
  CHECK(input_error([] { validate_runs(nlohmann::json::object(), "r.json"); }) ==
        "r.json: runs: missing or not a list");
  CHECK(run_error_after([](nlohmann::json& run) { run.erase("id"); }) ==
        "r.json: runs[0]: id: missing");
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r.erase("hardware"); }) ==
        run + "hardware: missing or not an object");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["num_layers"] = "x"; }) ==
        run + "model: num_layers: expected an integer (\"x\")");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["activation"] = "relu"; }) ==
        run +
            "model: activation: unsupported activation (relu); supported: gelu, swiglu, geglu, "
            "quick_geglu");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["hidden_size"] = 0; }) ==
        run + "model: hidden_size: must be positive (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["hardware"]["gpus_per_node"] = 0; }) ==
        run + "hardware: gpus_per_node: must be at least 1 (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["schedule"] = "foo"; }) ==
        run +
            "layout: schedule: unknown schedule, expected gpipe, 1f1b, interleaved or zb-h1 "
            "(foo)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["global_batch"] = nullptr; }) ==
        run + "layout: global_batch: missing");
  CHECK(run_error_after([](nlohmann::json& r) { r["published"]["step_time_s"] = -1; }) ==
        run + "published: step_time_s: must be between 1e-6 and 3.2e7 seconds (-1)");
  // A ZeRO stage that does not exist is malformed (a fixed layout that merely breaks a rule is a
  // run not predicted, below).
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["zero"] = 7; }) ==
        run + "layout: zero: must be 0, 1, 2 or 3 (7)");
}

TEST_CASE("malformed runs files: format, unknown fields, no runs, an id twice, absurd times") {
  const nlohmann::json small = read_json_file(test::planner_fixture("runs_small.json"));
  nlohmann::json json = small;
  json["format"] = "meshplan memory cases";
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: a \"meshplan memory cases\" file, not a published-runs file: validate takes a "
        "runs file (\"format\": \"meshplan published runs\")");
  json["format"] = "runs";
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: format: expected \"meshplan published runs\" (\"runs\")");
  json = small;
  json["run"] = nlohmann::json::array();  // a typo of "runs" beside it
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) == "r.json: run: unknown field ([])");
  json = small;
  json["runs"] = nlohmann::json::array();
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: runs: empty, nothing to validate");
  json = small;
  json["runs"].push_back(json["runs"][0]);
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: runs[fixture-fixed-layout]: id given to two runs");
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  // A stated all-equal split is checked against the model before it reads as the even one.
  const int64_t layers = small["runs"][0]["model"]["num_layers"].get<int64_t>();
  const int64_t pp = small["runs"][0]["layout"]["pp"].get<int64_t>();
  CHECK(run_error_after([&](nlohmann::json& r) {
          r["layout"]["stage_layers"] = std::vector<int64_t>(static_cast<size_t>(pp), -3);
        })
            .starts_with(run +
                         "layout: stage_layers: stage 0 has -3 layers, expected 1 to num_layers " +
                         std::to_string(layers)));
  for (const double absurd : {1e-300, 1e300}) {
    CHECK(run_error_after([&](nlohmann::json& r) {
            r["published"]["step_time_s"] = absurd;
          }).starts_with(run + "published: step_time_s: must be between 1e-6 and 3.2e7 seconds"));
  }
}

TEST_CASE("a run that cannot be predicted is reported with its reason, the others still are") {
  // runs_unpredictable.json: runs_small's two runs around one whose fixed 16 pipeline stages
  // cannot split 24 layers evenly (its only layout is rejected by the pp_layers rule).
  const std::string path = test::planner_fixture("runs_unpredictable.json");
  const ValidationReport report = validate_runs(read_json_file(path), path);
  const std::string small_path = test::planner_fixture("runs_small.json");
  const ValidationReport small = validate_runs(read_json_file(small_path), small_path);
  REQUIRE(report.runs.size() == 3);
  REQUIRE(small.runs.size() == 2);
  CHECK(report.num_not_predicted == 1);
  const ValidationRun& uneven = report.runs[1];
  CHECK(uneven.id == "fixture-uneven-stages");
  CHECK_FALSE(uneven.predicted.has_value());
  CHECK(uneven.not_predicted_reason ==
        "no feasible layout: pp_layers x1 (num_layers not divisible by pp*vpp (24 % 16));");
  CHECK(uneven.published_step_time_s == 2.0);
  // The runs before and after it: predicted exactly as in a file without it.
  for (size_t i : {0, 2}) {
    const ValidationRun& alone = small.runs[i / 2];
    CAPTURE(report.runs[i].id);
    REQUIRE(report.runs[i].predicted.has_value());
    CHECK(report.runs[i].id == alone.id);
    CHECK(report.runs[i].predicted->step_time_s == alone.predicted->step_time_s);
    CHECK(report.runs[i].not_predicted_reason.empty());
  }
  // Mean and max over the two predicted runs only.
  const double e0 = std::fabs(small.runs[0].error_pct());
  const double e1 = std::fabs(small.runs[1].error_pct());
  CHECK(report.mean_abs_error_pct ==
        doctest::Approx((e0 + e1) / 2).epsilon(1e-12).scale(0));  // rounding
  CHECK(report.max_abs_error_pct == std::max(e0, e1));
}

// runs_over_memory.json's first run: the fixture model at h 12288 (96 heads of 128, ffn 4h),
// 46B parameters, which meshplan puts over an 80 GiB A100 at tp 2.
models::TransformerConfig over_memory_fixture_model() {
  models::TransformerConfig model = fixture_model();
  model.hidden_size = 12288;
  model.num_attention_heads = model.num_kv_heads = 96;
  model.head_dim = 128;
  model.ffn_hidden_size = 49152;
  return model;
}

TEST_CASE("a run over meshplan's memory estimate is predicted in its least-memory layout") {
  // runs_over_memory.json: a 46B-parameter model at tp 2 (its fixed layout), which meshplan puts
  // at 122 GiB on an 80 GiB A100, before runs_small's fixed run. The run ran, so its step time is
  // predicted all the same, and the miss is a validation failure of its own.
  const std::string path = test::planner_fixture("runs_over_memory.json");
  const ValidationReport report = validate_runs(read_json_file(path), path);
  REQUIRE(report.runs.size() == 2);
  CHECK(report.num_not_predicted == 0);
  CHECK(report.num_memory_misses == 1);
  const ValidationRun& wide = report.runs[0];
  REQUIRE(wide.predicted.has_value());
  const models::TransformerConfig model = over_memory_fixture_model();
  Layout layout = test::make_layout(2, 1, 8, 1, 128);
  layout.recompute = Recompute::kFull;
  layout.zero = 1;
  // The stated layout, costed on the run's own hardware: its step time and memory as
  // estimate_plan gives them, which rejects it for memory.
  const PlanEstimate expected = estimate_plan(model, fixture_cluster(), layout, wide.options);
  CHECK_FALSE(expected.feasible);
  CHECK(expected.rejection_code == "memory");
  CHECK(describe(wide.predicted->layout) == describe(layout));
  CHECK(wide.predicted->step_time_s == expected.step_time_s);
  CHECK(wide.predicted->peak_memory_bytes == expected.peak_memory_bytes);
  const double estimate_gib = static_cast<double>(expected.peak_memory_bytes) / (1 << 30);
  CHECK(wide.memory_miss ==
        fmt::format("meshplan's memory estimate {:.1f} GiB is {:.1f}% over the 80.0 GiB of each "
                    "A100-SXM4-80GB, though the run ran",
                    estimate_gib, 100.0 * (estimate_gib - 80.0) / 80.0));
  CHECK(wide.not_predicted_reason.empty());
  REQUIRE(wide.plan.has_value());  // validate --plans writes it, for explain --allow-infeasible
  // The run that fits is untouched.
  CHECK(report.runs[1].memory_miss.empty());
  CHECK(report.runs[1].predicted.has_value());
  // Both count in the error figures.
  CHECK(report.max_abs_error_pct ==
        std::max(std::fabs(report.runs[0].error_pct()), std::fabs(report.runs[1].error_pct())));
}

TEST_CASE("over memory with fields searched: the layout with the least memory they allow") {
  // The same model with micro-batch, recompute and ZeRO stage left to the search, every choice
  // over 80 GiB: the prediction is the choice with the least memory, checked against each one
  // estimate_plan costs.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_over_memory.json"));
  // Undated: the guess sets no era limits (software_guess.h SearchLimits), so every ZeRO stage
  // and recompute choice is the search's.
  json["runs"][0]["source"] = "meshplan test fixture, not a published run";
  nlohmann::json& stated = json["runs"][0]["layout"];
  stated["micro_batch"] = nullptr;
  stated["recompute"] = nullptr;
  stated["zero"] = nullptr;
  json["runs"][0]["hardware"]["num_gpus"] = 4;
  stated["dp"] = 2;
  stated["global_batch"] = 16;
  const ValidationReport report = validate_runs(json, "r.json");
  const ValidationRun& wide = report.runs[0];
  REQUIRE(wide.predicted.has_value());
  CHECK_FALSE(wide.memory_miss.empty());
  const models::TransformerConfig model = over_memory_fixture_model();
  int64_t costed = 0;
  for (const int64_t micro_batch : {1, 2, 4, 8}) {
    for (const Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      for (const int64_t zero : {0, 1, 2, 3}) {
        Layout layout = test::make_layout(2, 1, 2, micro_batch, 16);
        layout.recompute = recompute;
        layout.zero = zero;
        if (!check_framework(model, wide.options, layout).ok()) {
          continue;  // a layout the run's framework cannot run, which the search skips too
        }
        const PlanEstimate other = estimate_plan(model, fixture_cluster(), layout, wide.options);
        if (other.rejection_code != "memory") {
          continue;  // rejected by another rule
        }
        ++costed;
        CAPTURE(describe(layout));
        CHECK(wide.predicted->peak_memory_bytes <= other.peak_memory_bytes);
      }
    }
  }
  CHECK(costed >= 24);
}

TEST_CASE("a layout the run's framework cannot run is a reason, not an input error") {
  // DeepSpeed's pipeline engine refuses ZeRO 2 with pp > 1 (engine.py lines 76-77): the run is
  // reported with that reason and the file's other run is still predicted.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 2;
  nlohmann::json& run = json["runs"][0];
  run["framework"] = "deepspeed";
  run["layout"]["tp"] = 1;
  run["layout"]["pp"] = 2;
  run["layout"]["zero"] = 2;
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs.size() == 2);
  CHECK(report.num_not_predicted == 1);
  CHECK_FALSE(report.runs[0].predicted.has_value());
  CHECK(report.runs[0].not_predicted_reason.starts_with(
      "deepspeed cannot run this layout: its pipeline engine refuses ZeRO-2 and ZeRO-3 with "
      "pp > 1"));
  CHECK(report.runs[1].predicted.has_value());
}

TEST_CASE("stated options replace the guess from the source text") {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 2;
  nlohmann::json& run_json = json["runs"][0];
  // The source text says Megatron-Core, so the guess overlaps everything; the run states that
  // neither the gradient reduction nor the parameter gather overlaps.
  run_json["source"] = "fixture with Megatron-Core in its source text";
  run_json["framework"] = "megatron";
  run_json["options"] = {{"overlap_grad_reduce", false}, {"overlap_param_gather", false}};
  const ValidationReport report = validate_runs(json, "r.json");
  const ValidationRun& run = report.runs[0];
  REQUIRE(run.predicted.has_value());
  CHECK(run.framework == "megatron");
  CHECK(run.options_stated);
  CHECK(software_options(run.source).overlap_grad_reduce);  // what the guess would have said
  // Keys the run leaves out keep `meshplan plan`'s defaults.
  PlanOptions expected_options;
  expected_options.overlap_grad_reduce = false;
  expected_options.overlap_param_gather = false;
  CHECK(run.options == expected_options);
  // Nothing overlaps and pp = 1 (no stage slack, no tied-embedding all-reduce): the stage's
  // whole DP sync (gradient reduce-scatter + parameter all-gather) is exposed.
  REQUIRE(run.predicted->stages.size() == 1);
  const double dp_seconds = run.predicted->stages[0].dp_grad_sync_seconds;
  CHECK(dp_seconds > 0);
  CHECK(run.predicted->breakdown.dp_comm_exposed_seconds == dp_seconds);
  // With the guess (overlap on) part of it hides behind the backward: less is exposed.
  const models::ClusterConfig cluster = fixture_cluster();
  const PlanEstimate guessed =
      estimate_plan(fixture_model(), cluster, run.predicted->layout, software_options(run.source));
  CHECK(guessed.breakdown.dp_comm_exposed_seconds < dp_seconds);
}

TEST_CASE("overlap_p2p_comm stated by a DeepSpeed run is an error naming the run") {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 2;
  json["runs"][0]["framework"] = "deepspeed";
  json["runs"][0]["options"] = {{"overlap_p2p_comm", true}};
  const std::string id = json["runs"][0]["id"].get<std::string>();
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: runs[" + id +
            "]: options: overlap_p2p_comm: framework deepspeed: the pipeline engine's sends are "
            "blocking (runtime/pipe/p2p.py send/recv, async_op False)");
}

TEST_CASE("runs file versions: 1 without framework/options, 2 with them") {
  // runs_small.json is version 1: still read, options guessed from the source text.
  const std::string path = test::planner_fixture("runs_small.json");
  const nlohmann::json version1 = read_json_file(path);
  CHECK(version1.at("version") == 1);
  const ValidationReport report = validate_runs(version1, path);
  REQUIRE(report.runs.size() == 2);
  CHECK_FALSE(report.runs[0].options_stated);
  CHECK(report.runs[0].framework.empty());
  CHECK(report.runs[0].options == software_options(report.runs[0].source));
  CHECK(report.runs[1].options == software_options(report.runs[1].source));
  CHECK(report.runs[1].options.flash_attention);  // "Megatron-Core" in its source

  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) {
          r["options"] = {{"flash_attention", true}};
        }) == run + "options: needs runs-file version 2 (version 1)");
  CHECK(run_error_after([](nlohmann::json& r) { r["framework"] = "fsdp"; }) ==
        run + "framework: needs runs-file version 2 (version 1)");
  CHECK(run_error_after([](nlohmann::json&) {}, 12) == "r.json: version: expected 1 to 11 (12)");
}

TEST_CASE("runs file version 3: the layout's cp (absent or null = 1)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  // An older reader would ignore the key, so a version-1 or 2 file that uses it is rejected.
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["cp"] = 2; }, 2) ==
        run + "layout: cp: needs runs-file version 3 (version 2)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["cp"] = 0; }, 3) ==
        run + "layout: cp: must be at least 1 (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["cp"] = "two"; }, 3) ==
        run + "layout: cp: expected an integer (\"two\")");
  // The other sizes too (a micro-batch of 0 once crashed the search: fuzz_public_runs).
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["micro_batch"] = 0; }, 3) ==
        run + "layout: micro_batch: must be at least 1 (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["vpp"] = 0; }, 3) ==
        run + "layout: vpp: must be at least 1 (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["tp"] = -2; }, 3) ==
        run + "layout: tp: must be at least 1 (-2)");
  // The fixture's 16 GPUs as tp 2 x cp 2 x dp 4: the sequence split over 2 ranks.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 3;
  json["runs"][0]["layout"]["cp"] = 2;
  json["runs"][0]["layout"]["dp"] = 4;
  json["runs"][0]["options"] = {{"flash_attention", true}};  // cp > 1 needs it
  json["runs"][1]["layout"]["cp"] = nullptr;
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].predicted.has_value());
  const Layout& layout = report.runs[0].predicted->layout;
  CHECK(layout.tp * layout.cp * layout.pp * layout.dp == 16);
  CHECK(layout.cp == 2);
  CHECK(layout.dp == 4);
  // The same layout costed directly: validate adds nothing of its own.
  const models::ClusterConfig cluster = fixture_cluster();
  CHECK(estimate_plan(fixture_model(), cluster, layout, report.runs[0].options).step_time_s ==
        report.runs[0].predicted->step_time_s);
  REQUIRE(report.runs[1].predicted.has_value());
  CHECK(report.runs[1].predicted->layout.cp == 1);  // null: 1, not searched
}

TEST_CASE("runs file version 4: the model's parallel_residual (absent = sequential)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["parallel_residual"] = true; }, 3) ==
        run + "model: parallel_residual: needs runs-file version 4 (version 3)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["parallel_residual"] = 1; }, 4)
            .find(run + "model: parallel_residual") == 0);
  // Stated: the run is costed as the parallel block, exactly as estimate_plan costs that model.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 4;
  json["runs"][0]["model"]["parallel_residual"] = true;
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].predicted.has_value());
  models::TransformerConfig model = fixture_model();
  model.parallel_residual = true;
  const models::ClusterConfig cluster = fixture_cluster();
  const Layout& layout = report.runs[0].predicted->layout;
  CHECK(estimate_plan(model, cluster, layout, report.runs[0].options).step_time_s ==
        report.runs[0].predicted->step_time_s);
  REQUIRE(layout.tp == 2);  // the fixture's fixed layout: one forward tp reduction saved
  CHECK(report.runs[0].predicted->step_time_s <
        estimate_plan(fixture_model(), cluster, layout, report.runs[0].options).step_time_s);
}

TEST_CASE("runs file version 5: the layout's dp_shard (absent or null = full sharding)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["dp_shard"] = 4; }, 4) ==
        run + "layout: dp_shard: needs runs-file version 5 (version 4)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["dp_shard"] = 0; }, 5) ==
        run + "layout: dp_shard: must be at least 1 (0)");
  // A layout key the search does not know was left out silently before: now it is named.
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["micro_bach"] = 2; }) ==
        run + "layout: micro_bach: unknown field (2)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["dropuot"] = false; }) ==
        run + "model: dropuot: unknown field (false)");
  CHECK(run_error_after([](nlohmann::json& r) { r["hardware"]["nics_per_node"] = 8; }) ==
        run + "hardware: nics_per_node: unknown field (8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["published"]["tokens_per_s"] = 1; }) ==
        run + "published: tokens_per_s: unknown field (1)");
  CHECK(run_error_after([](nlohmann::json& r) { r["framwork"] = "fsdp"; }) ==
        run + "framwork: unknown field (\"fsdp\")");
  // Stated: the fixture's ZeRO-1 run on dp 8 as 2 distributed optimizer instances of 4
  // (Megatron's partial distributed optimizer), costed exactly as estimate_plan costs it.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 5;
  json["runs"][0]["layout"]["dp_shard"] = 4;
  json["runs"][1]["layout"]["dp_shard"] = nullptr;
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].predicted.has_value());
  const Layout& layout = report.runs[0].predicted->layout;
  CHECK(dp_shard_size(layout) == 4);
  CHECK(dp_replicate_size(layout) == 2);
  const models::ClusterConfig cluster = fixture_cluster();
  CHECK(estimate_plan(fixture_model(), cluster, layout, report.runs[0].options).step_time_s ==
        report.runs[0].predicted->step_time_s);
  REQUIRE(report.runs[1].predicted.has_value());
  CHECK_FALSE(hybrid_sharded(report.runs[1].predicted->layout));  // null: full, not searched
}

TEST_CASE("runs file version 6: the layout's recompute_layers (Megatron's block method)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_layers"] = 2; }, 5) ==
        run + "layout: recompute_layers: needs runs-file version 6 (version 5)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_layers"] = 0; }, 6) ==
        run + "layout: recompute_layers: must be between 1 and 100000 (0)");
  // Stated on the fixture's full-recompute run: costed exactly as estimate_plan costs it, faster
  // than recomputing every layer.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 6;
  json["runs"].erase(1);
  const ValidationReport every_layer = validate_runs(json, "r.json");
  json["runs"][0]["layout"]["recompute_layers"] = 1;
  const ValidationReport block = validate_runs(json, "r.json");
  REQUIRE(block.runs[0].predicted.has_value());
  REQUIRE(every_layer.runs[0].predicted.has_value());
  const Layout& layout = block.runs[0].predicted->layout;
  CHECK(layout.recompute_layers == 1);
  CHECK(estimate_plan(fixture_model(), fixture_cluster(), layout, block.runs[0].options)
            .step_time_s == block.runs[0].predicted->step_time_s);
  CHECK(block.runs[0].predicted->step_time_s < every_layer.runs[0].predicted->step_time_s);
}

TEST_CASE("runs file version 7: the layout's recompute_group_layers (the uniform method)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_group_layers"] = 2; }, 6) ==
        run + "layout: recompute_group_layers: needs runs-file version 7 (version 6)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_group_layers"] = 0; }, 7) ==
        run + "layout: recompute_group_layers: must be between 1 and 100000 (0)");
  // Stated on the fixture's full-recompute run: costed exactly as estimate_plan costs it, at
  // full recompute's time (every layer still runs its forward again).
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 7;
  json["runs"].erase(1);
  const ValidationReport every_layer = validate_runs(json, "r.json");
  json["runs"][0]["layout"]["recompute_group_layers"] = 2;
  const ValidationReport groups = validate_runs(json, "r.json");
  REQUIRE(groups.runs[0].predicted.has_value());
  REQUIRE(every_layer.runs[0].predicted.has_value());
  const Layout& layout = groups.runs[0].predicted->layout;
  CHECK(layout.recompute_group_layers == 2);
  CHECK(estimate_plan(fixture_model(), fixture_cluster(), layout, groups.runs[0].options)
            .step_time_s == groups.runs[0].predicted->step_time_s);
  CHECK(groups.runs[0].predicted->step_time_s ==
        doctest::Approx(every_layer.runs[0].predicted->step_time_s).scale(0));
}

TEST_CASE("runs file version 8: the layout's recompute_modules (Megatron-Core's list)") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_modules"] = {"core_attn"}; },
                        7) ==
        run + "layout: recompute_modules: needs runs-file version 8 (version 7)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_modules"] = {"mhc"}; }, 8)
            .starts_with(run + "layout: recompute_modules: mhc is a Megatron-Core module"));
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["recompute_modules"] = "core_attn"; },
                        8) == run + "layout: recompute_modules: expected a list of module names");
}

// The fixture's first run as Qwen3-30B-A3B: the preset's keys a runs file takes (version 9),
// without the model file's own (name, biases, max_position_embeddings, rope_theta, source).
nlohmann::json qwen3_moe_run(const nlohmann::json& small_run) {
  nlohmann::json run = small_run;
  nlohmann::json model = models::model_to_json(models::load_model("qwen3-30b-a3b"));
  for (const char* key : {"name", "qkv_bias", "attention_output_bias", "mlp_bias",
                          "max_position_embeddings", "rope_theta"}) {
    model.erase(key);
  }
  run["model"] = model;
  run["layout"]["micro_batch"] = 1;
  run["layout"]["recompute"] = "none";
  return run;
}

TEST_CASE("runs file version 9: the model's MoE keys and the layout's ep and etp") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  // An older reader would ignore them: a version-8 file that uses one is rejected, by name.
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["num_experts"] = 8; }, 8) ==
        run + "model: num_experts: needs runs-file version 9 (version 8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["head_dim"] = 96; }, 8) ==
        run + "model: head_dim: needs runs-file version 9 (version 8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["qk_norm"] = false; }, 8) ==
        run + "model: qk_norm: needs runs-file version 9 (version 8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["kv_lora_rank"] = 0; }, 8) ==
        run + "model: kv_lora_rank: needs runs-file version 9 (version 8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["ep"] = 1; }, 8) ==
        run + "layout: ep: needs runs-file version 9 (version 8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["etp"] = 1; }, 2) ==
        run + "layout: etp: needs runs-file version 9 (version 2)");
  // Misspelt, wrong-typed or impossible: named as the model file names them.
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["num_expert"] = 8; }, 9) ==
        run + "model: num_expert: unknown field (8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["ep_size"] = 8; }, 9) ==
        run + "layout: ep_size: unknown field (8)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["num_experts"] = "x"; }, 9) ==
        run + "model: num_experts: expected an integer (\"x\")");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["experts_per_token"] = 2; }, 9) ==
        run + "model: experts_per_token: must be 0 when num_experts is 0 (a dense model) (2)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["ep"] = 0; }, 9) ==
        run + "layout: ep: must be at least 1 (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["etp"] = -1; }, 9) ==
        run + "layout: etp: must be at least 1 (-1)");

  // Read by the model file's readers: the run's model is the qwen3-30b-a3b preset's.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 9;
  json["runs"][0] = qwen3_moe_run(json["runs"][0]);
  json["runs"][0]["layout"]["tp"] = 1;
  json["runs"][0]["layout"]["dp"] = 16;
  json["runs"][0]["layout"]["ep"] = 8;
  json["runs"].erase(1);
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].plan.has_value());
  models::TransformerConfig preset = models::load_model("qwen3-30b-a3b");
  models::TransformerConfig read = report.runs[0].plan->model;
  read.name = preset.name;
  // A run's model states no rope base or scaling: they change no cost.
  read.rope_theta = preset.rope_theta;
  read.rope_scaling = preset.rope_scaling;
  CHECK(read == preset);
  CHECK(read.head_dim == 128);  // not hidden_size / num_attention_heads = 64
  const Layout& layout = report.runs[0].predicted->layout;
  CHECK(layout.ep == 8);
  CHECK(expert_tensor_parallel(layout) == 1);
  const models::ClusterConfig cluster = fixture_cluster();
  CHECK(estimate_plan(preset, cluster, layout, report.runs[0].options).step_time_s ==
        report.runs[0].predicted->step_time_s);

  // etp stated: tp 2 with sequence parallelism, experts unsplit (etp 1) over ep 16.
  json["runs"][0]["layout"]["tp"] = 2;
  json["runs"][0]["layout"]["dp"] = 8;
  json["runs"][0]["layout"]["sequence_parallel"] = true;
  json["runs"][0]["layout"]["ep"] = 16;
  json["runs"][0]["layout"]["etp"] = 1;
  const ValidationReport folded = validate_runs(json, "r.json");
  REQUIRE(folded.runs[0].predicted.has_value());
  const Layout& folded_layout = folded.runs[0].predicted->layout;
  CHECK(folded_layout.tp == 2);
  CHECK(folded_layout.ep == 16);
  CHECK(expert_tensor_parallel(folded_layout) == 1);
  CHECK(estimate_plan(preset, cluster, folded_layout, folded.runs[0].options).step_time_s ==
        folded.runs[0].predicted->step_time_s);

  // Absent (or null) ep is 1 and etp is tp, never searched, tp searched included.
  json["runs"][0]["layout"].erase("ep");
  json["runs"][0]["layout"]["etp"] = nullptr;
  json["runs"][0]["layout"]["tp"] = nullptr;
  json["runs"][0]["layout"]["dp"] = 4;
  const ValidationReport defaults = validate_runs(json, "r.json");
  REQUIRE(defaults.runs[0].predicted.has_value());
  const Layout& default_layout = defaults.runs[0].predicted->layout;
  CHECK(default_layout.ep == 1);
  CHECK(expert_tensor_parallel(default_layout) == default_layout.tp);
  CHECK(default_layout.tp > 1);  // 16 GPUs over dp 4: tp x pp = 4, so etp = tp is not trivially 1
  const std::vector<std::string>& searched = defaults.runs[0].searched;
  CHECK(std::find(searched.begin(), searched.end(), "ep") == searched.end());
  CHECK(std::find(searched.begin(), searched.end(), "etp") == searched.end());
}

TEST_CASE("runs file version 10: the model's bias, window, sink and gated-unit keys") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  // An older reader would ignore them: a version-9 file that uses one is rejected, by name.
  for (const std::string_view key : models::kBiasModelFields) {
    CAPTURE(key);
    CHECK(run_error_after([&](nlohmann::json& r) { r["model"][std::string(key)] = true; }, 9) ==
          run + "model: " + std::string(key) + ": needs runs-file version 10 (version 9)");
  }
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["attention_sinks"] = true; }, 9) ==
        run + "model: attention_sinks: needs runs-file version 10 (version 9)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["glu_linear_offset"] = 1.0; }, 9) ==
        run + "model: glu_linear_offset: needs runs-file version 10 (version 9)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["activation_clamp_value"] = 7; }, 3) ==
        run + "model: activation_clamp_value: needs runs-file version 10 (version 3)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["sliding_window"] = 128; }, 9) ==
        run + "model: sliding_window: needs runs-file version 10 (version 9)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["window_attn_skip_freq"] = 2; }, 1) ==
        run + "model: window_attn_skip_freq: needs runs-file version 10 (version 1)");
  // Wrong-typed or impossible: named as the model file names them.
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["mlp_bias"] = "x"; }, 10) ==
        run + "model: mlp_bias: expected true or false (\"x\")");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["sliding_window"] = -1; }, 10)
            .starts_with(run + "model: sliding_window: must be 0 (full attention) or a window"));
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["window_attn_skip_freq"] = 2; }, 10)
            .starts_with(run + "model: window_attn_skip_freq: chooses windowed layers, but "
                               "sliding_window is 0"));
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["window_attn_skip_freq"] = 1; }, 10) ==
        run +
            "model: window_attn_skip_freq: must be 2 or more, one full-attention layer every N "
            "(1)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["glu_linear_offset"] = 1.0; }, 10)
            .starts_with(run + "model: glu_linear_offset: "));  // gelu is no gated unit

  // Absent bias keys keep the norm's default (the fixture is LayerNorm: all biases), a stated
  // one overrides it.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 10;
  json["runs"].erase(1);
  json["runs"][0]["model"]["mlp_bias"] = false;
  const ValidationReport biases = validate_runs(json, "r.json");
  REQUIRE(biases.runs[0].plan.has_value());
  CHECK(biases.runs[0].plan->model.qkv_bias);
  CHECK(biases.runs[0].plan->model.attention_output_bias);
  CHECK_FALSE(biases.runs[0].plan->model.mlp_bias);

  // Read by the model file's readers: the run's model is the gpt-oss-20b preset's (its biases,
  // router bias, sinks, windows on alternate layers, GLU offset and clamp).
  json["runs"][0] = qwen3_moe_run(json["runs"][0]);
  nlohmann::json model = models::model_to_json(models::load_model("gpt-oss-20b"));
  for (const char* key : {"name", "max_position_embeddings", "rope_theta", "source"}) {
    model.erase(key);
  }
  for (const std::string key :
       {"rope_scaling", "rope_scaling_factor", "rope_scaling_original_max_positions",
        "rope_scaling_beta_fast", "rope_scaling_beta_slow", "rope_scaling_mscale",
        "rope_scaling_mscale_all_dim", "rope_scaling_truncate"}) {
    REQUIRE(model.erase(key) == 1);  // the preset's YaRN
  }
  json["runs"][0]["model"] = model;
  json["runs"][0]["layout"]["tp"] = 1;
  json["runs"][0]["layout"]["dp"] = 16;
  json["runs"][0]["layout"]["ep"] = 8;
  json["runs"][0]["options"] = {{"flash_attention", true}};  // sinks need the fused kernel
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].plan.has_value());
  models::TransformerConfig preset = models::load_model("gpt-oss-20b");
  models::TransformerConfig read = report.runs[0].plan->model;
  read.name = preset.name;
  // A run's model states no rope base or scaling: they change no cost.
  read.rope_theta = preset.rope_theta;
  read.rope_scaling = preset.rope_scaling;
  CHECK(read == preset);
  CHECK(read.attention_sinks);
  CHECK(read.sliding_window == 128);
  CHECK(read.window_attn_skip_freq == 2);
  CHECK(read.glu_linear_offset == 1.0);
  CHECK(read.activation_clamp_value == 7.0);
  CHECK(read.mlp_bias);  // stated: RMSNorm alone would have meant none
  REQUIRE(report.runs[0].predicted.has_value());
  CHECK(estimate_plan(preset, fixture_cluster(), report.runs[0].predicted->layout,
                      report.runs[0].options)
            .step_time_s == report.runs[0].predicted->step_time_s);

  // A per-layer list that windows every layer is read as no list, as a model file reads it.
  json["runs"][0]["model"]["window_attn_skip_freq"] = nlohmann::json::array();
  for (int64_t i = 0; i < preset.num_layers; ++i) {
    json["runs"][0]["model"]["window_attn_skip_freq"].push_back(1);
  }
  const ValidationReport listed = validate_runs(json, "r.json");
  REQUIRE(listed.runs[0].plan.has_value());
  CHECK(listed.runs[0].plan->model.window_attn_layers.empty());
  CHECK(listed.runs[0].plan->model.window_attn_skip_freq == 0);
  CHECK(listed.runs[0].plan->model.sliding_window == 128);
}

TEST_CASE("runs file version 11: the layout's pipeline_layout and the model's mtp_num_layers") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  const std::string field = run + "layout: pipeline_layout: ";
  // 24 layers over pp 4 x vpp 2, virtual stage v = chunk x pp + stage: stages hold 2+3, 3+3,
  // 5+2 and 3+3, which no stage rule gives.
  const std::string kLayout = "Ett|ttt|ttttt|ttt|ttt|ttt|tt|tttL";
  const auto pipelined = [&](nlohmann::json& r) {
    r["layout"]["pp"] = 4;
    r["layout"]["dp"] = 2;
    r["layout"]["vpp"] = nullptr;
    r["layout"]["schedule"] = nullptr;
    r["layout"]["pipeline_layout"] = kLayout;
  };
  // An older reader would ignore them: a version-10 file that uses one is rejected, by name.
  CHECK(run_error_after(pipelined, 10) ==
        run + "layout: pipeline_layout: needs runs-file version 11 (version 10)");
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["mtp_num_layers"] = 1; }, 10) ==
        run + "model: mtp_num_layers: needs runs-file version 11 (version 10)");
  // What `plan --pipeline-layout` refuses, named by the run's keys.
  CHECK(run_error_after(
            [&](nlohmann::json& r) {
              pipelined(r);
              r["layout"]["pp"] = nullptr;
              r["layout"]["tp"] = nullptr;
            },
            11) == field + "needs pp (the layout lists pp x vpp virtual stages)");
  const auto with_layout_key = [&](const char* key, const nlohmann::json& value) {
    return run_error_after(
        [&](nlohmann::json& r) {
          pipelined(r);
          r["layout"][key] = value;
        },
        11);
  };
  CHECK(with_layout_key("vpp", 3) == field + "2 virtual stages per rank, vpp says 3");
  CHECK(with_layout_key("schedule", "1f1b") ==
        field + "2 virtual stages per rank need the interleaved schedule (schedule 1f1b)");
  CHECK(with_layout_key("stage_layers", {5, 6, 7, 6}) ==
        field + "give either the layout string or stage_layers");
  CHECK(with_layout_key("pipeline_layout", 7) == field + "expected a string (7)");
  // 4 decoder layers of 24: the parser's own message.
  CHECK(with_layout_key("pipeline_layout", "Et|t|t|tL").starts_with(field));
  CHECK(run_error_after([](nlohmann::json& r) { r["model"]["mtp_num_layers"] = 1; }, 11)
            .starts_with(run + "model: mtp_num_layers: multi-token prediction needs rotary"));

  // The string's split is the predicted layout's: vpp and the schedule fixed, not searched.
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["version"] = 11;
  json["runs"].erase(1);
  pipelined(json["runs"][0]);
  const ValidationReport report = validate_runs(json, "r.json");
  REQUIRE(report.runs[0].predicted.has_value());
  const Layout& layout = report.runs[0].predicted->layout;
  CHECK(layout.pp == 4);
  CHECK(layout.vpp == 2);
  CHECK(layout.schedule == ScheduleKind::kInterleaved);
  CHECK(layout.stage_layers == std::vector<int64_t>{5, 6, 7, 6});
  CHECK(layout.virtual_stage_layers == std::vector<int64_t>{2, 3, 5, 3, 3, 3, 2, 3});
  CHECK(report.runs[0].searched.empty());
  CHECK(estimate_plan(fixture_model(), fixture_cluster(), layout, report.runs[0].options)
            .step_time_s == report.runs[0].predicted->step_time_s);

  // With rotary positions a run may state MTP depths; the string places them on the last stage.
  json["runs"][0]["model"]["positions"] = "rope";
  json["runs"][0]["model"]["mtp_num_layers"] = 1;
  json["runs"][0]["layout"]["pipeline_layout"] = "Ett|ttt|ttttt|ttt|ttt|ttt|tt|tttmL";
  const ValidationReport mtp = validate_runs(json, "r.json");
  REQUIRE(mtp.runs[0].plan.has_value());
  CHECK(mtp.runs[0].plan->model.mtp_num_layers == 1);
  REQUIRE(mtp.runs[0].predicted.has_value());
  CHECK(mtp.runs[0].predicted->layout.virtual_stage_layers == layout.virtual_stage_layers);
  CHECK(mtp.runs[0].predicted->step_time_s > report.runs[0].predicted->step_time_s);
}

// validation/candidate_runs.json holds the researched runs left out of the set
// (candidate_runs.md), the Megatron-Bridge MoE rows in version 11: it must stay a file validate
// reads, each run as it states it.
TEST_CASE("validation/candidate_runs.json: read whole, its MoE rows with their experts and ep") {
  const std::string path = std::string(MESHPLAN_SOURCE_DIR) + "/validation/candidate_runs.json";
  const nlohmann::json json = read_json_file(path);
  const ValidationReport report = validate_runs(json, path);
  REQUIRE(report.runs.size() == json.at("runs").size());
  int moe_runs = 0;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const nlohmann::json& stated = json.at("runs")[i];
    const ValidationRun& run = report.runs[i];
    if (!stated.at("model").contains("num_experts")) {
      continue;
    }
    ++moe_runs;
    INFO(run.id);
    REQUIRE(run.plan.has_value());
    CHECK(run.plan->model.num_experts == stated.at("model").at("num_experts"));
    CHECK(run.plan->model.head_dim == stated.at("model").at("head_dim"));
    CHECK(run.plan->model.qk_norm == stated.at("model").value("qk_norm", false));
    CHECK(run.predicted->layout.ep == stated.at("layout").at("ep"));
    CHECK(expert_tensor_parallel(run.predicted->layout) == stated.at("layout").at("etp"));
    CHECK(run.searched.empty());  // every field stated
    CHECK_FALSE(run.used_for_parameters);
    // Each states its recipe's token dispatcher, read by the plan file's options parser.
    CHECK(to_string(run.options.moe_dispatcher) ==
          stated.at("options").at("moe_dispatcher").get<std::string>());
  }
  CHECK(moe_runs == 3);  // the three rows candidate_runs.md tables
}

TEST_CASE("a run's model may state dropout (absent = true, as in a model file)") {
  nlohmann::json json = read_json_file(test::planner_fixture("runs_small.json"));
  json["runs"].erase(1);
  const ValidationReport with_masks = validate_runs(json, "r.json");
  json["runs"][0]["model"]["dropout"] = false;
  const ValidationReport without = validate_runs(json, "r.json");
  REQUIRE(with_masks.runs[0].predicted.has_value());
  REQUIRE(without.runs[0].predicted.has_value());
  // The fixture's own layout costed directly with and without dropout: validate adds nothing.
  const models::ClusterConfig cluster = fixture_cluster();
  models::TransformerConfig model = fixture_model();
  const Layout& layout = without.runs[0].predicted->layout;
  model.dropout = true;
  CHECK(with_masks.runs[0].predicted->peak_memory_bytes ==
        estimate_plan(model, cluster, layout, with_masks.runs[0].options).peak_memory_bytes);
  model.dropout = false;
  CHECK(without.runs[0].predicted->peak_memory_bytes ==
        estimate_plan(model, cluster, layout, without.runs[0].options).peak_memory_bytes);
  CHECK(without.runs[0].predicted->peak_memory_bytes <
        with_masks.runs[0].predicted->peak_memory_bytes);
  json["runs"][0]["model"]["dropout"] = 0.1;
  CHECK(input_error([&] { validate_runs(json, "r.json"); }) ==
        "r.json: runs[fixture-fixed-layout]: model: dropout: expected true or false (0.1)");
}

TEST_CASE("malformed framework and options name the run and the key") {
  const std::string run = "r.json: runs[fixture-fixed-layout]: ";
  CHECK(run_error_after(
            [](nlohmann::json& r) {
              r["options"] = {{"overlap_grad_reduc", false}};
            },
            2) == run + "options: overlap_grad_reduc: unknown field (false)");
  CHECK(run_error_after(
            [](nlohmann::json& r) {
              r["options"] = {{"flash_attention", "yes"}};
            },
            2) == run + "options: flash_attention: expected true or false (\"yes\")");
  CHECK(run_error_after(
            [](nlohmann::json& r) {
              r["options"] = {{"bucket_bytes", 0}};
            },
            2) == run + "options: bucket_bytes: must be positive (0)");
  CHECK(run_error_after([](nlohmann::json& r) { r["options"] = 1; }, 2) ==
        run + "options: not an object");
  CHECK(run_error_after([](nlohmann::json& r) { r["framework"] = "jax"; }, 2) ==
        run + "framework: unknown framework, expected megatron, deepspeed or fsdp (jax)");
}

// Regressions (bugs found by this suite, fixed in 4c3d542). Fixed layout fields whose product
// is not num_gpus used to leave the search nothing to cost and the error no reason ("layout: no
// feasible layout:"); an unknown cluster preset gave load_cluster's bare message, without the
// run or field; a bad inter_node_gbps_per_gpu was reported as the cluster's internal
// inter_node_bytes_per_second_per_gpu, converted to bytes/s (-1.25e+10).
TEST_CASE("malformed runs: fixed tp * pp * dp != num_gpus names the fields") {
  // tp 16, pp 1, dp 8 on 16 GPUs.
  CHECK(run_error_after([](nlohmann::json& r) { r["layout"]["tp"] = 16; }) ==
        "r.json: runs[fixture-fixed-layout]: layout: tp*pp*dp: fixed sizes multiply to 128, which "
        "does not fit 16 GPUs");
}

TEST_CASE("malformed runs: an unknown cluster names the run and field") {
  const std::string message =
      run_error_after([](nlohmann::json& r) { r["hardware"]["cluster"] = "dgx-z9"; });
  CHECK(message.rfind("r.json: runs[fixture-fixed-layout]: hardware: cluster: unknown cluster "
                      "preset 'dgx-z9'",
                      0) == 0);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("malformed runs: negative inter-node bandwidth names the file's field") {
  CHECK(
      run_error_after([](nlohmann::json& r) { r["hardware"]["inter_node_gbps_per_gpu"] = -100; }) ==
      "r.json: runs[fixture-fixed-layout]: hardware: inter_node_gbps_per_gpu: must be positive "
      "(-100)");
}

}  // namespace
}  // namespace meshplan::planner
