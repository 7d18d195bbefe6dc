// Distributed saved activations (PlanOptions::distribute_saved_activations): Megatron-LM's
// --distribute-saved-activations (tensor_parallel/random.py CheckpointFunction) and DeepSpeed's
// activation_checkpointing.partition_activations (checkpointing.py). Under full recompute each
// layer keeps 1/tp of its input and all-gathers it before its recompute. Checked against the
// bytes and seconds worked out here for the suites' square model (h 4096, 32 layers) on one
// micro-batch of 2,048 tokens in bf16 on dgx-a100-80gb: the layer input is X = T h e =
// 2,048 x 4,096 x 2 = 16,777,216 bytes, 4,194,304 per rank at tp 4.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "compute_cost.h"
#include "input_error.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

constexpr double kLayerInputBytes = 16'777'216.0;  // X = T h e
constexpr int64_t kLayers = 32;

Layout full_recompute_layout(int64_t tp) {
  Layout layout = test::make_layout(tp, 1, 8 / tp, 1, 8 / tp);  // one micro-batch
  layout.recompute = Recompute::kFull;
  return layout;
}

PlanOptions distributed(Framework framework, bool on = true) {
  PlanOptions options;
  options.framework = framework;
  options.distribute_saved_activations = on;
  return options;
}

TEST_CASE("distributed saved activations: a full-recompute layer keeps X / t") {
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout layout = full_recompute_layout(4);
  for (const Framework framework : {Framework::kMegatron, Framework::kDeepSpeed}) {
    CAPTURE(to_string(framework));
    CHECK(activation_bytes_per_layer(model, a100, layout, distributed(framework, false)) ==
          kLayerInputBytes);
    CHECK(activation_bytes_per_layer(model, a100, layout, distributed(framework)) ==
          kLayerInputBytes / 4);
    // The stage holds one micro-batch (pp 1) of 32 layer inputs: 32 x 3/4 X = 402,653,184
    // bytes less; the layer its backward rebuilds is whole either way.
    const PlanEstimate off = estimate_plan(model, a100, layout, distributed(framework, false));
    const PlanEstimate on = estimate_plan(model, a100, layout, distributed(framework));
    REQUIRE_MESSAGE(off.feasible, off.rejection_reason);
    REQUIRE_MESSAGE(on.feasible, on.rejection_reason);
    CHECK(off.stages[0].memory.activations_bytes - on.stages[0].memory.activations_bytes ==
          402'653'184);
  }
}

TEST_CASE("distributed saved activations: the split after the forward, the gather before") {
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout layout = full_recompute_layout(4);
  const double bandwidth = a100.gpu.hbm_bytes_per_second * a100.efficiency.hbm_efficiency;
  const double gather = collective_seconds(a100, CollectiveKind::kAllGather,
                                           static_cast<int64_t>(kLayerInputBytes), 4, 1);
  // Forward: the rank's quarter read and written, 2 X / 4 = 8,388,608 bytes. Backward: nothing
  // more under Megatron (the gather writes into torch.empty); DeepSpeed zero-fills X and copies
  // its quarter in, X + 2 X / 4 = 25,165,824 bytes.
  const SavedInputSplit megatron =
      saved_input_split(model, a100, layout, distributed(Framework::kMegatron));
  CHECK(megatron.forward_seconds ==
        doctest::Approx(8'388'608.0 / bandwidth).epsilon(1e-12).scale(0));
  CHECK(megatron.backward_seconds == 0.0);
  CHECK(megatron.gather_seconds == gather);
  const SavedInputSplit deepspeed =
      saved_input_split(model, a100, layout, distributed(Framework::kDeepSpeed));
  CHECK(deepspeed.forward_seconds == megatron.forward_seconds);
  CHECK(deepspeed.backward_seconds ==
        doctest::Approx(25'165'824.0 / bandwidth).epsilon(1e-12).scale(0));
  CHECK(deepspeed.gather_seconds == gather);
  // Off, or without full recompute: nothing.
  const SavedInputSplit off =
      saved_input_split(model, a100, layout, distributed(Framework::kMegatron, false));
  CHECK(off.forward_seconds + off.backward_seconds + off.gather_seconds == 0.0);
  Layout none = layout;
  none.recompute = Recompute::kNone;
  const SavedInputSplit not_full =
      saved_input_split(model, a100, none, distributed(Framework::kMegatron));
  CHECK(not_full.forward_seconds + not_full.backward_seconds + not_full.gather_seconds == 0.0);

  // The chunk: 32 layers' worth of each, the gather on the exposed tp time of the backward.
  const ChunkCost without =
      chunk_cost(model, a100, layout, distributed(Framework::kDeepSpeed, false), 0, 0);
  const ChunkCost with = chunk_cost(model, a100, layout, distributed(Framework::kDeepSpeed), 0, 0);
  CHECK(with.forward_compute_seconds - without.forward_compute_seconds ==
        doctest::Approx(kLayers * deepspeed.forward_seconds).epsilon(1e-9).scale(0));
  CHECK(with.backward_input_compute_seconds - without.backward_input_compute_seconds ==
        doctest::Approx(kLayers * deepspeed.backward_seconds).epsilon(1e-9).scale(0));
  CHECK(with.backward_tp_comm_seconds - without.backward_tp_comm_seconds ==
        doctest::Approx(kLayers * gather).epsilon(1e-9).scale(0));
  CHECK(with.forward_tp_comm_seconds == without.forward_tp_comm_seconds);
  CHECK(with.backward_weight_compute_seconds == without.backward_weight_compute_seconds);
}

TEST_CASE("distributed saved activations: one tp all-gather of X per layer and micro-batch") {
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  Layout layout = test::make_layout(4, 2, 1, 1, 4);  // pp 2: 16 layers a stage, 4 micro-batches
  layout.recompute = Recompute::kFull;
  const PlanEstimate estimate =
      estimate_plan(model, a100, layout, distributed(Framework::kMegatron));
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  int64_t stages_seen = 0;
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    if (traffic.what != "tp: all-gather of each distributed saved layer input (recompute)") {
      continue;
    }
    ++stages_seen;
    CHECK(traffic.kind == CollectiveKind::kAllGather);
    CHECK(traffic.group == CommGroup::kTp);
    CHECK(traffic.group_size == 4);
    CHECK(traffic.message_bytes == static_cast<int64_t>(kLayerInputBytes));
    CHECK(traffic.calls_per_step == 16 * 4);
  }
  CHECK(stages_seen == 2);
  const PlanEstimate off =
      estimate_plan(model, a100, layout, distributed(Framework::kMegatron, false));
  CHECK(test::find_traffic(off.collectives,
                           "tp: all-gather of each distributed saved layer input (recompute)") ==
        nullptr);
}

TEST_CASE("distributed saved activations: refused where the framework or the layout has none") {
  CHECK(test::input_error([] {
          check_distribute_saved_activations_options(distributed(Framework::kFsdp), "--x");
        }) ==
        "--x: framework fsdp: torchtitan's activation checkpointing "
        "(torch.utils.checkpoint) keeps each layer input whole; a Megatron-LM and "
        "DeepSpeed option");
  // meshplan's executor runs it as Megatron-LM does (executor/model_chunk.cpp).
  check_distribute_saved_activations_options(distributed(Framework::kMeshplan), "--x");
  check_distribute_saved_activations_options(distributed(Framework::kDeepSpeed), "--x");
  check_distribute_saved_activations_options(distributed(Framework::kFsdp, false), "--x");

  const auto code = [](Layout layout, Framework framework) {
    return check_distribute_saved_activations(layout, distributed(framework)).code;
  };
  Layout layout = full_recompute_layout(4);
  CHECK(code(layout, Framework::kMegatron).empty());
  CHECK(code(full_recompute_layout(1), Framework::kDeepSpeed).empty());  // DeepSpeed at any tp
  CHECK(code(full_recompute_layout(1), Framework::kMegatron) == "saved_activations");
  CHECK(code(full_recompute_layout(1), Framework::kMeshplan) == "saved_activations");
  CHECK(code(layout, Framework::kMeshplan).empty());
  for (const Recompute recompute : {Recompute::kNone, Recompute::kSelective}) {
    Layout other = layout;
    other.recompute = recompute;
    CHECK(code(other, Framework::kMegatron) == "saved_activations");
    CHECK(code(other, Framework::kDeepSpeed) == "saved_activations");
  }
  Layout sequence_parallel = layout;
  sequence_parallel.sequence_parallel = true;
  CHECK(code(sequence_parallel, Framework::kMegatron) == "saved_activations");
  CHECK(check_distribute_saved_activations(sequence_parallel, distributed(Framework::kMegatron))
            .reason.find("already split over tp") != std::string::npos);
  Layout none = layout;
  none.recompute = Recompute::kNone;
  CHECK(check_distribute_saved_activations(none, distributed(Framework::kMegatron, false)).ok());

  // The estimate refuses such a layout with that code rather than costing it.
  const PlanEstimate estimate =
      estimate_plan(test::square_model("square"), models::load_cluster("dgx-a100-80gb"), none,
                    distributed(Framework::kMegatron));
  CHECK_FALSE(estimate.feasible);
  CHECK(estimate.rejection_code == "saved_activations");
}

TEST_CASE("plan file: distribute_saved_activations written only when on, read back, refused") {
  Plan plan{test::square_model("square"), models::load_cluster("dgx-a100-80gb"), 8,
            full_recompute_layout(4), distributed(Framework::kMegatron, false)};
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("distribute_saved_activations"));
  plan.options.distribute_saved_activations = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("distribute_saved_activations") == true);
  CHECK(plan_from_json(json, "p.json").options.distribute_saved_activations);

  nlohmann::json fsdp = json;
  fsdp["options"]["framework"] = "fsdp";
  CHECK(test::input_error([&] {
          plan_from_json(fsdp, "p.json");
        }).starts_with("p.json: options: distribute_saved_activations: framework fsdp: "));
  nlohmann::json not_full = json;
  not_full["layout"]["recompute"] = "selective";
  CHECK(test::input_error([&] {
          plan_from_json(not_full, "p.json");
        }).starts_with("p.json: layout: distribute_saved_activations needs recompute full"));
  nlohmann::json not_bool = json;
  not_bool["options"]["distribute_saved_activations"] = "on";
  CHECK(test::input_error([&] {
          plan_from_json(not_bool, "p.json");
        }).starts_with("p.json: options: distribute_saved_activations"));
}

}  // namespace
}  // namespace meshplan::planner
