// The versioned plan file (planner/plan_file.cpp, docs/plan-format.md): a round trip through a
// real file, and every kind of bad plan file with its exact one-line error.

#include "meshplan/plan_file.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshplan/cost_model.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::input_error;

// A plan where every field differs from its default, so a field that is not written or not
// read back shows up: tiny on dgx-h100, 8 GPUs as tp 2, pp 2, dp 2, interleaved with 2 chunks,
// micro-batch 2 of a global batch of 16 (4 micro-batches, divisible by pp), selective
// recompute, sequence parallel, ZeRO 1, tp-pp-dp placement; every option flipped.
Plan example_plan() {
  Plan plan;
  plan.model = models::load_model("tiny");
  plan.model.seq_length = 16;  // not the preset's 32: the training length is the plan's
  plan.cluster = models::load_cluster("dgx-h100");
  plan.num_gpus = 8;
  Layout& layout = plan.layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 2;
  layout.vpp = 2;
  layout.micro_batch = 2;
  layout.global_batch = 16;
  layout.recompute = Recompute::kSelective;
  layout.sequence_parallel = true;
  layout.zero = 1;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.placement = Placement::kTpPpDp;
  plan.options.flash_attention = false;
  plan.options.overlap_grad_reduce = false;
  plan.options.overlap_param_gather = false;
  plan.options.overlap_tp_comm = true;
  plan.options.allow_tp_across_nodes = true;
  plan.options.framework = Framework::kMeshplan;  // the one framework that runs this layout
  return plan;
}

// The plan file stores the prediction as the caller gives it (the reports library writes the
// whole estimate); here just the step time, to see that it is kept.
nlohmann::json prediction_of(const PlanEstimate& estimate) {
  return {{"step_time_s", estimate.step_time_s}};
}

nlohmann::json example_json() {
  const Plan plan = example_plan();
  return plan_to_json(
      plan, prediction_of(estimate_plan(plan.model, plan.cluster, plan.layout, plan.options)));
}

TEST_CASE("round trip: fp8_param_gather is stored only when on and read back") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kMegatron;
  plan.options.overlap_p2p_comm = true;  // Megatron-LM's condition for interleaving at pp 2
  plan.options.gemm_precision = GemmPrecision::kFp8;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("fp8_param_gather"));
  plan.options.fp8_param_gather = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("fp8_param_gather") == true);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.fp8_param_gather);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["fp8_param_gather"] = "on";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: fp8_param_gather"), InputError);
}

TEST_CASE("round trip: overlap_p2p_comm is stored only when on and read back") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kMegatron;
  plan.layout.schedule = ScheduleKind::kOneFOneB;  // Megatron-LM interleaves pp 2 only with it on
  plan.layout.vpp = 1;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("overlap_p2p_comm"));
  CHECK_FALSE(plan_from_json(plan_to_json(plan, {}), "p.json").options.overlap_p2p_comm);
  plan.options.overlap_p2p_comm = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("overlap_p2p_comm") == true);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.overlap_p2p_comm);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["overlap_p2p_comm"] = "on";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: overlap_p2p_comm"), InputError);
  nlohmann::json deepspeed = json;
  deepspeed["options"]["framework"] = "deepspeed";
  CHECK_THROWS_WITH_AS(plan_from_json(deepspeed, "p.json"),
                       doctest::Contains("p.json: options: overlap_p2p_comm: framework deepspeed"),
                       InputError);
}

TEST_CASE("round trip: grad_reduce_dtype is stored when given and read back") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kMegatron;
  plan.options.overlap_p2p_comm = true;  // Megatron-LM's condition for interleaving at pp 2
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("grad_reduce_dtype"));
  for (const GradReduceDtype dtype : {GradReduceDtype::kFp32, GradReduceDtype::kBf16}) {
    plan.options.grad_reduce_dtype = dtype;
    const nlohmann::json json = plan_to_json(plan, {});
    CHECK(json.at("options").at("grad_reduce_dtype") == to_string(dtype));
    const Plan back = plan_from_json(json, "p.json");
    CHECK(back.options.grad_reduce_dtype == dtype);
    CHECK(back == plan);
  }
  nlohmann::json bad = plan_to_json(plan, {});
  bad["options"]["grad_reduce_dtype"] = "fp16";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       "p.json: options: grad_reduce_dtype: unsupported gradient reduce dtype "
                       "(fp16); supported: fp32, bf16",
                       InputError);
  // A dtype the framework cannot reduce in is refused with the file and the key.
  bad["options"]["grad_reduce_dtype"] = "fp32";
  bad["options"]["framework"] = "deepspeed";
  bad["options"].erase("overlap_p2p_comm");  // DeepSpeed has neither it nor interleaving
  bad["layout"]["schedule"] = "1f1b";
  bad["layout"]["vpp"] = 1;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: grad_reduce_dtype: fp32 under "
                                         "framework deepspeed"),
                       InputError);
}

// torchtitan-style fsdp: ZeRO-3 over dp 4 without a pipeline.
Plan fsdp_zero3_plan() {
  Plan plan = example_plan();
  plan.layout.pp = 1;
  plan.layout.vpp = 1;
  plan.layout.dp = 4;
  plan.layout.zero = 3;
  plan.layout.schedule = ScheduleKind::kOneFOneB;
  plan.layout.recompute = Recompute::kFull;
  plan.options.framework = Framework::kFsdp;
  plan.options.overlap_tp_comm = false;
  return plan;
}

TEST_CASE("round trip: fsdp_version is stored only when 1, and 1 only under fsdp") {
  Plan plan = fsdp_zero3_plan();
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("fsdp_version"));
  CHECK(plan_from_json(plan_to_json(plan, {}), "p.json").options.fsdp_version == 2);
  plan.options.fsdp_version = 1;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("fsdp_version") == 1);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.fsdp_version == 1);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["fsdp_version"] = 4294967297LL;  // 2^32 + 1: not 1 once narrowed
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       "p.json: options: fsdp_version: expected 1 or 2 (4294967297)", InputError);
  bad["options"]["fsdp_version"] = "1";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: fsdp_version"), InputError);
}

TEST_CASE("round trip: fsdp_head_in_root is stored only when set, and only under fsdp") {
  Plan plan = fsdp_zero3_plan();
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("fsdp_head_in_root"));
  CHECK_FALSE(plan_from_json(plan_to_json(plan, {}), "p.json").options.fsdp_head_in_root);
  for (bool value : {true, false}) {
    plan.options.fsdp_head_in_root = value;
    const nlohmann::json json = plan_to_json(plan, {});
    CHECK(json.at("options").at("fsdp_head_in_root") == value);
    CHECK(plan_from_json(json, "p.json") == plan);
  }
  nlohmann::json bad = plan_to_json(plan, {});
  bad["options"]["fsdp_head_in_root"] = "yes";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: fsdp_head_in_root"), InputError);
  bad["options"]["fsdp_head_in_root"] = true;
  bad["options"]["framework"] = "deepspeed";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("fsdp_head_in_root: needs framework fsdp"), InputError);
}

TEST_CASE("round trip: flash_attention_version is stored only when 1 and read back") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kMegatron;
  plan.options.overlap_p2p_comm = true;  // Megatron-LM's condition for interleaving at pp 2
  plan.options.flash_attention = true;   // version 1 names a fused kernel's generation
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("flash_attention_version"));
  CHECK(plan_from_json(plan_to_json(plan, {}), "p.json").options.flash_attention_version == 2);
  plan.options.flash_attention_version = 1;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("flash_attention_version") == 1);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.flash_attention_version == 1);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["flash_attention_version"] = 4294967297LL;  // 2^32 + 1: not 1 once narrowed
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       "p.json: options: flash_attention_version: expected 1 or 2 (4294967297)",
                       InputError);
  bad["options"]["flash_attention_version"] = "1";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: flash_attention_version"), InputError);
  bad["options"]["flash_attention_version"] = 1;
  bad["options"]["flash_attention"] = false;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: flash_attention_version: 1 needs "
                                         "flash_attention on"),
                       InputError);
}

TEST_CASE("round trip: pipeline_grad_scatter_gather is stored only when false; refusals") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kDeepSpeed;  // DeeperSpeed eb7f5cff's pipeline engine
  plan.options.overlap_tp_comm = false;
  plan.options.scatter_gather_pipeline = true;
  plan.layout.vpp = 1;
  plan.layout.sequence_parallel = false;
  plan.layout.recompute = Recompute::kFull;
  plan.layout.schedule = ScheduleKind::kOneFOneB;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("pipeline_grad_scatter_gather"));
  plan.options.pipeline_grad_scatter_gather = false;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("pipeline_grad_scatter_gather") == false);
  const Plan back = plan_from_json(json, "p.json");
  CHECK_FALSE(back.options.pipeline_grad_scatter_gather);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["framework"] = "megatron";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: pipeline_grad_scatter_gather: false "
                                         "under framework megatron"),
                       InputError);
  bad = json;
  bad["options"]["scatter_gather_pipeline"] = false;
  CHECK_THROWS_WITH_AS(
      plan_from_json(bad, "p.json"),
      doctest::Contains("p.json: options: pipeline_grad_scatter_gather: false without"),
      InputError);
  bad = json;
  bad["options"]["pipeline_grad_scatter_gather"] = "no";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"), doctest::Contains("p.json: options"),
                       InputError);
}

TEST_CASE("round trip: deepspeed_grad_all_reduce is stored only when false; refusals") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kDeepSpeed;
  plan.options.overlap_tp_comm = false;
  plan.layout.vpp = 1;
  plan.layout.schedule = ScheduleKind::kOneFOneB;
  plan.layout.zero = 1;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("deepspeed_grad_all_reduce"));
  plan.options.deepspeed_grad_all_reduce = false;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("deepspeed_grad_all_reduce") == false);
  const Plan back = plan_from_json(json, "p.json");
  CHECK_FALSE(back.options.deepspeed_grad_all_reduce);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["framework"] = "fsdp";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: deepspeed_grad_all_reduce: false "
                                         "under framework fsdp"),
                       InputError);
  Plan zero3 = plan;
  zero3.layout.zero = 3;
  CHECK_FALSE(plan_to_json(zero3, {}).at("options").contains("deepspeed_grad_all_reduce"));
  bad = json;
  bad["layout"]["zero"] = 0;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       "p.json: options: deepspeed_grad_all_reduce: false applies to ZeRO 1-2's "
                       "gradient reduce, not zero 0",
                       InputError);
  bad = json;
  bad["options"]["deepspeed_grad_all_reduce"] = 0;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"), doctest::Contains("p.json: options"),
                       InputError);
}

TEST_CASE("round trip: norm_kernel is stored only when eager and read back; bad values refused") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kFsdp;  // torchtitan: FSDP2 (zero 3), one stage
  plan.options.overlap_tp_comm = false;
  plan.model.norm = models::Norm::kRmsNorm;
  plan.layout.pp = 1;
  plan.layout.vpp = 1;
  plan.layout.dp = 4;
  plan.layout.zero = 3;
  plan.layout.recompute = Recompute::kFull;
  plan.layout.schedule = ScheduleKind::kOneFOneB;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("norm_kernel"));
  CHECK(plan_from_json(plan_to_json(plan, {}), "p.json").options.norm_kernel == NormKernel::kFused);
  plan.options.norm_kernel = NormKernel::kEager;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("norm_kernel") == "eager");
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.norm_kernel == NormKernel::kEager);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["norm_kernel"] = "triton";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       "p.json: options: norm_kernel: unsupported norm kernel (triton); "
                       "supported: fused, eager",
                       InputError);
  bad["options"]["norm_kernel"] = true;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: norm_kernel"), InputError);
  bad["options"]["norm_kernel"] = "eager";
  bad["options"]["compile"] = true;
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: norm_kernel: eager with compile on"),
                       InputError);
  bad["options"].erase("compile");
  bad["options"]["framework"] = "megatron";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: norm_kernel: eager under framework "
                                         "megatron"),
                       InputError);
  bad["options"]["framework"] = "fsdp";
  bad["model"]["norm"] = "layernorm";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: norm_kernel: eager: model"), InputError);
}

TEST_CASE("round trip: bucket_bytes null is the framework's default, a number is kept") {
  Plan plan = example_plan();
  plan.options.bucket_bytes.reset();
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("bucket_bytes").is_null());
  CHECK_FALSE(plan_from_json(json, "p.json").options.bucket_bytes.has_value());
  plan.options.bucket_bytes = 160'000'000;  // what `meshplan plan` writes for dp 8 (megatron)
  const Plan back = plan_from_json(plan_to_json(plan, {}), "p.json");
  CHECK(back.options.bucket_bytes == 160'000'000);
  CHECK(back == plan);
}

TEST_CASE("round trip: write_plan_file then read_plan_file gives the same plan") {
  const Plan plan = example_plan();
  const PlanEstimate estimate = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const std::string path = test::temp_path("round_trip.json");
  write_plan_file(path, plan, prediction_of(estimate));
  const Plan back = read_plan_file(path);

  // Every field (defaulted operator==); the literals below say what the example holds.
  CHECK(back == plan);
  CHECK(back.model == plan.model);
  CHECK(back.cluster == plan.cluster);
  CHECK(back.num_gpus == 8);
  CHECK(back.layout.tp == 2);
  CHECK(back.layout.pp == 2);
  CHECK(back.layout.dp == 2);
  CHECK(back.layout.vpp == 2);
  CHECK(back.layout.micro_batch == 2);
  CHECK(back.layout.global_batch == 16);
  CHECK(back.layout.recompute == Recompute::kSelective);
  CHECK(back.layout.sequence_parallel);
  CHECK(back.layout.zero == 1);
  CHECK(back.layout.schedule == ScheduleKind::kInterleaved);
  CHECK(back.layout.placement == Placement::kTpPpDp);
  CHECK_FALSE(back.options.flash_attention);
  CHECK_FALSE(back.options.overlap_grad_reduce);
  CHECK_FALSE(back.options.overlap_param_gather);
  CHECK(back.options.overlap_tp_comm);
  CHECK(back.options.allow_tp_across_nodes);
  CHECK(back.options.framework == Framework::kMeshplan);

  // The file is what docs/plan-format.md describes, with the prediction beside it, and re-reading
  // the plan predicts the same step.
  const nlohmann::json json = read_json_file(path);
  CHECK(json.at("format") == "meshplan plan");
  CHECK(json.at("version") == 1);
  CHECK(json.at("prediction").at("step_time_s").get<double>() == estimate.step_time_s);
  CHECK(estimate_plan(back.model, back.cluster, back.layout, back.options).step_time_s ==
        estimate.step_time_s);
  // Nothing but the plan file is left beside it (the temporary file was renamed).
  int64_t files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    files += entry.path().filename().string().rfind("round_trip.json", 0) == 0;
  }
  CHECK(files == 1);
}

TEST_CASE("layout JSON round trip, placement optional (tp-dp-pp by default)") {
  const Layout layout = example_plan().layout;
  const Layout back = layout_from_json(layout_to_json(layout), "l.json");
  CHECK(back == layout);
  CHECK(back.placement == Placement::kTpPpDp);
  nlohmann::json without = layout_to_json(layout);
  without.erase("placement");
  CHECK(layout_from_json(without, "l.json").placement == Placement::kTpDpPp);
}

TEST_CASE("layout JSON: microbatch_group written only when set, absent = pp") {
  Layout layout = example_plan().layout;
  CHECK_FALSE(layout_to_json(layout).contains("microbatch_group"));  // older files unchanged
  CHECK(layout_from_json(layout_to_json(layout), "l.json").microbatch_group == 0);
  layout.microbatch_group = 5;
  CHECK(layout_to_json(layout).at("microbatch_group") == 5);
  CHECK(layout_from_json(layout_to_json(layout), "l.json") == layout);
}

// Applies `change` to a good plan's JSON and returns the error plan_from_json gives for it.
template <typename Change>
std::string error_after(Change&& change) {
  nlohmann::json json = example_json();
  change(json);
  return input_error([&] { plan_from_json(json, "p.json"); });
}

TEST_CASE("bad plan files: header") {
  CHECK(input_error([] { plan_from_json(nlohmann::json::array(), "p.json"); }) ==
        "p.json: expected a JSON object");
  CHECK(error_after([](nlohmann::json& j) { j.erase("format"); }) == "p.json: format: missing");
  CHECK(error_after([](nlohmann::json& j) { j["format"] = "meshplan published runs"; }) ==
        "p.json: a published-runs file, not a meshplan plan file: this command takes a plan file "
        "written by plan --save-plan");
  CHECK(error_after([](nlohmann::json& j) { j["format"] = "plan"; }) ==
        "p.json: format: not a meshplan plan file (\"plan\")");
  CHECK(error_after([](nlohmann::json& j) { j["version"] = 2; }) ==
        "p.json: version: plan format version 2 is newer than this meshplan reads (1)");
  CHECK(error_after([](nlohmann::json& j) { j["version"] = 0; }) ==
        "p.json: version: must be at least 1 (0)");
  CHECK(error_after([](nlohmann::json& j) { j["version"] = "1"; }) ==
        "p.json: version: expected an integer (\"1\")");
}

TEST_CASE("bad plan files: missing sections and wrong types") {
  CHECK(error_after([](nlohmann::json& j) { j.erase("options"); }) ==
        "p.json: options: missing or not an object");
  CHECK(error_after([](nlohmann::json& j) { j["layout"] = "tp=8"; }) ==
        "p.json: layout: missing or not an object");
  CHECK(error_after([](nlohmann::json& j) { j.erase("num_gpus"); }) == "p.json: num_gpus: missing");
  CHECK(error_after([](nlohmann::json& j) { j["num_gpus"] = 0; }) ==
        "p.json: num_gpus: must be between 1 and 10000000 (0)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"].erase("tp"); }) ==
        "p.json: layout: tp: missing");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["tp"] = "two"; }) ==
        "p.json: layout: tp: expected an integer (\"two\")");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["tp"] = 2.5; }) ==
        "p.json: layout: tp: expected an integer (2.5)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["sequence_parallel"] = 1; }) ==
        "p.json: layout: sequence_parallel: expected true or false (1)");
  CHECK(error_after([](nlohmann::json& j) { j["options"].erase("flash_attention"); }) ==
        "p.json: options: flash_attention: missing");
  CHECK(error_after([](nlohmann::json& j) { j["model"]["num_layers"] = 0; }) ==
        "p.json: model: num_layers: must be positive (0)");
  CHECK(error_after([](nlohmann::json& j) { j["model"]["experts"] = 8; }) ==
        "p.json: model: experts: unknown field (8)");
  CHECK(error_after([](nlohmann::json& j) { j["model"]["num_local_experts"] = 8; }) ==
        "p.json: model: num_local_experts: unknown field (8)");
}

// A typo must not pass as the default (a "shedule" key would leave the schedule unread), so
// unknown keys are rejected at every level the reader checks, as the model and cluster loaders
// do; only `prediction`, which a reader recomputes, may hold anything.
TEST_CASE("bad plan files: unknown keys") {
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["shedule"] = "gpipe"; }) ==
        "p.json: layout: shedule: unknown field (\"gpipe\")");
  CHECK(error_after([](nlohmann::json& j) { j["options"]["flash_attn"] = true; }) ==
        "p.json: options: flash_attn: unknown field (true)");
  CHECK(error_after([](nlohmann::json& j) { j["num_gpu"] = 8; }) ==
        "p.json: num_gpu: unknown field (8)");
  CHECK(error_after([](nlohmann::json& j) { j["cluster"]["gpu"]["hbm"] = 80; }) ==
        "p.json: cluster: gpu.hbm: unknown field (80)");
  // The version is checked first: a newer file's new keys get the version error.
  CHECK(error_after([](nlohmann::json& j) {
          j["version"] = 2;
          j["data_parallel_shards"] = 4;
        }) == "p.json: version: plan format version 2 is newer than this meshplan reads (1)");
  CHECK(input_error([] { layout_from_json(nlohmann::json::array(), "l.json"); }) ==
        "l.json: layout: expected a JSON object ([])");
  nlohmann::json json = example_json();
  json["prediction"]["note"] = "anything";
  json["prediction"]["step_time_s"] = "not checked";
  CHECK(plan_from_json(json, "p.json").num_gpus == 8);
}

TEST_CASE("options.framework: optional (absent = megatron), spelled as --framework") {
  nlohmann::json json = example_json();
  CHECK(json.at("options").at("framework") == "meshplan");
  // A layout every framework runs: 1F1B without chunks, no optimizer sharding, whole layers
  // recomputed (torchtitan has no attention-core selective recompute).
  json["layout"]["schedule"] = "1f1b";
  json["layout"]["vpp"] = 1;
  json["layout"]["zero"] = 0;
  json["layout"]["recompute"] = "full";
  json["options"].erase("framework");  // a plan file written before the key
  CHECK(plan_from_json(json, "p.json").options.framework == Framework::kMegatron);
  for (const char* name : {"megatron", "deepspeed", "fsdp", "meshplan"}) {
    json["options"]["framework"] = name;
    CHECK(to_string(plan_from_json(json, "p.json").options.framework) == name);
  }
  CHECK(error_after([](nlohmann::json& j) { j["options"]["framework"] = "jax"; }) ==
        "p.json: options: framework: unsupported framework (jax); supported: megatron, "
        "deepspeed, fsdp, meshplan");
}

// A hand-written plan is held to its framework's rules as the search is: the example's
// interleaved pp 2 layout is refused by Megatron-LM without overlap_p2p_comm (arguments.py) and
// by DeepSpeed, whose pipeline engine runs 1F1B (or ZB-H1 under Megatron-DeepSpeed).
TEST_CASE("bad plan files: a layout the plan's framework cannot run") {
  CHECK(error_after([](nlohmann::json& j) { j["options"]["framework"] = "megatron"; }) ==
        "p.json: layout: megatron cannot run this layout: Megatron-LM arguments.py refuses the "
        "interleaved schedule at pp 2 without --overlap-p2p-communication (tp=2 pp=2 dp=2 vpp=2 "
        "mb=2 recompute=selective sp=on zero=1 schedule=interleaved)");
  CHECK(error_after([](nlohmann::json& j) { j["options"]["framework"] = "deepspeed"; }) ==
        "p.json: layout: deepspeed cannot run this layout: its pipeline engine runs 1F1B "
        "(TrainSchedule), or ZB-H1 under Megatron-DeepSpeed's --enable-zbh1-pipeline (tp=2 "
        "pp=2 dp=2 vpp=2 mb=2 recompute=selective sp=on zero=1 schedule=interleaved)");
  nlohmann::json json = example_json();
  json["options"]["framework"] = "megatron";
  json["options"]["overlap_p2p_comm"] = true;  // what arguments.py asks for at pp 2
  CHECK(plan_from_json(json, "p.json").options.framework == Framework::kMegatron);
}

TEST_CASE("bad plan files: layout values") {
  CHECK(error_after([](nlohmann::json& j) { j["num_gpus"] = 16; }) ==
        "p.json: layout: tp*pp*dp = 8 differs from num_gpus (16)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["schedule"] = "foo"; }) ==
        "p.json: layout: schedule: unknown schedule, expected gpipe, 1f1b, interleaved or zb-h1 "
        "(foo)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["recompute"] = "some"; }) ==
        "p.json: layout: recompute: unknown recompute, expected none, selective, selective-op or "
        "full (some)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["placement"] = "pp-tp-dp"; }) ==
        "p.json: layout: placement: unknown placement, expected tp-dp-pp or tp-pp-dp (pp-tp-dp)");
  // The layout's validity rules, with the rule's reason.
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["zero"] = 7; }) ==
        "p.json: layout: zero: expected 0, 1, 2 or 3 (7)");
  CHECK(error_after([](nlohmann::json& j) {
          j["layout"]["tp"] = 1;
          j["layout"]["dp"] = 4;
        }) == "p.json: layout: sequence parallel needs tp > 1");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["global_batch"] = 12; }) ==
        "p.json: layout: interleaved schedule needs micro-batches divisible by pp (3 % 2)");
}

// Zero, negative and absurd sizes are refused field by field before any product is formed: the
// bounds are plan --gpus's 1e7, 1e5 chunks, 1e6 sequences per step and 1e9 tokens per
// micro-batch (planner/plan_file.cpp). A global batch of 1e12 used to make explain run for ever.
TEST_CASE("bad plan files: zero, negative and absurd sizes") {
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["tp"] = 0; }) ==
        "p.json: layout: tp: must be between 1 and 10000000 (0)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["dp"] = -2; }) ==
        "p.json: layout: dp: must be between 1 and 10000000 (-2)");
  CHECK(error_after([](nlohmann::json& j) { j["num_gpus"] = 20'000'000; }) ==
        "p.json: num_gpus: must be between 1 and 10000000 (20000000)");
  // Each factor within the bound, their product not: 2^21 * 2^21 * 2^21 = 2^63 would wrap.
  CHECK(error_after([](nlohmann::json& j) {
          j["layout"]["tp"] = 2'097'152;
          j["layout"]["pp"] = 2'097'152;
          j["layout"]["dp"] = 2'097'152;
        }) == "p.json: layout: tp*pp*dp: more than 10000000 GPUs (2097152*2097152*2097152)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["vpp"] = 0; }) ==
        "p.json: layout: vpp: must be between 1 and 100000 (0)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["microbatch_group"] = 0; }) ==
        "p.json: layout: microbatch_group: must be between 1 and 1000000 (0)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["global_batch"] = 1'000'000'000'000; }) ==
        "p.json: layout: global_batch: must be between 1 and 1000000 (1000000000000)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["micro_batch"] = 0; }) ==
        "p.json: layout: micro_batch: must be between 1 and 1000000 (0)");
  // 100,000 sequences of 16 tokens are 1.6e6 tokens, within 1e9; of 1e5 tokens, 1e10 are not.
  CHECK(error_after([](nlohmann::json& j) {
          j["layout"]["micro_batch"] = 100'000;
          j["model"]["seq_length"] = 100'000;
          j["model"]["max_position_embeddings"] = 100'000;
        }) ==
        "p.json: layout: micro_batch: micro_batch * seq_length absurdly large, more than "
        "1000000000 tokens (100000 * 100000)");
  // Chunked attention is not costed: a plan's sequence longer than the chunk is refused.
  CHECK(error_after([](nlohmann::json& j) { j["model"]["attention_chunk_size"] = 8; }) ==
        "p.json: model: attention_chunk_size: chunked attention is not modelled; sequences of at "
        "most 8 tokens attend as without it (seq_length 16)");
  // 2^32 would narrow to ZeRO stage 0.
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["zero"] = int64_t{1} << 32; }) ==
        "p.json: layout: zero: expected 0, 1, 2 or 3 (4294967296)");
  CHECK(error_after([](nlohmann::json& j) { j["layout"]["zero"] = -1; }) ==
        "p.json: layout: zero: expected 0, 1, 2 or 3 (-1)");
  // Above 2^63 - 1 nlohmann keeps an unsigned integer; it must not wrap to a negative one.
  CHECK(error_after([](nlohmann::json& j) {
          j["layout"]["tp"] = std::numeric_limits<uint64_t>::max();
        }) == "p.json: layout: tp: out of range, more than 2^63 - 1 (18446744073709551615)");
  CHECK(error_after([](nlohmann::json& j) { j["options"]["bucket_bytes"] = 0; }) ==
        "p.json: options: bucket_bytes: must be positive (0)");
}

TEST_CASE("bad plan files on disk: unreadable and malformed") {
  const std::string missing = test::temp_path("no_such_plan.json");
  CHECK(input_error([&] { read_plan_file(missing); }) == missing + ": cannot read file");
  const std::string malformed = test::write_temp_file("malformed_plan.json", "{\"format\": ");
  const std::string message = input_error([&] { read_plan_file(malformed); });
  CHECK(message.rfind(malformed + ": malformed JSON: ", 0) == 0);
  CHECK(message.find('\n') == std::string::npos);  // one line
}

TEST_CASE("write_plan_file: an unwritable path is a RuntimeError and leaves nothing behind") {
  const Plan plan = example_plan();
  const PlanEstimate estimate = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const std::string path = test::temp_path("no_such_dir/plan.json");
  CHECK_THROWS_WITH_AS(write_plan_file(path, plan, prediction_of(estimate)),
                       (path + ": cannot write file").c_str(), RuntimeError);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("round trip: optimizer_impl and weight_decay stored off their defaults; bad refused") {
  Plan plan = example_plan();
  plan.options.framework = Framework::kFsdp;
  plan.options.overlap_tp_comm = false;
  plan.layout.pp = 1;
  plan.layout.vpp = 1;
  plan.layout.dp = 4;
  plan.layout.zero = 3;
  plan.layout.schedule = ScheduleKind::kOneFOneB;
  plan.layout.recompute = Recompute::kFull;  // torchtitan has no attention-core selective
  const nlohmann::json fused = plan_to_json(plan, {});
  CHECK_FALSE(fused.at("options").contains("optimizer_impl"));
  CHECK_FALSE(fused.at("options").contains("weight_decay"));
  plan.options.optimizer_impl = OptimizerImpl::kComposer;
  plan.options.weight_decay = false;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("optimizer_impl") == "composer");
  CHECK(json.at("options").at("weight_decay") == false);
  CHECK(plan_from_json(json, "p.json") == plan);
  nlohmann::json bad = json;
  bad["options"]["optimizer_impl"] = "lamb";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: optimizer_impl: unsupported optimizer "
                                         "implementation (lamb)"),
                       InputError);
  bad["options"]["optimizer_impl"] = "foreach";
  bad["options"]["framework"] = "megatron";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: optimizer_impl: foreach under "
                                         "framework megatron"),
                       InputError);
  bad["options"]["framework"] = "fsdp";
  bad["options"]["optimizer_impl"] = "fused";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: weight_decay: off with the fused "
                                         "optimizer"),
                       InputError);
  bad["options"]["weight_decay"] = "no";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: weight_decay"), InputError);
}

TEST_CASE("stage_layers: a stated even split is checked as written, then stored as even") {
  // example_plan: tiny (4 layers) at pp 2, vpp 2. Every entry equal used to read as the even
  // split before any check, whatever the values.
  nlohmann::json json = example_json();
  json["layout"]["stage_layers"] = {2, 2};
  CHECK(plan_from_json(json, "p.json").layout.stage_layers.empty());
  json["layout"]["stage_layers"] = {-3, -3};
  CHECK(input_error([&] { plan_from_json(json, "p.json"); }) ==
        "p.json: layout: stage_layers: stage 0 has -3 layers, expected 1 to num_layers 4 (-3,-3)");
  json["layout"]["stage_layers"] = {1, 1};
  CHECK(input_error([&] { plan_from_json(json, "p.json"); }) ==
        "p.json: layout: stage_layers: sum 2 differs from num_layers 4 (1,1)");
  json["layout"]["stage_layers"] = {7, 7, 7, 7, 7};
  CHECK(input_error([&] { plan_from_json(json, "p.json"); }) ==
        "p.json: layout: stage_layers: 5 entries for pp 2 (7,7,7,7,7)");
}

}  // namespace
}  // namespace meshplan::planner
