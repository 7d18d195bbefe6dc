// DeepSpeed's pipeline engine checkpoints runs of activation_checkpoint_interval N of a stage's
// PipelineModule functions, and only runs made of transformer layers alone
// (deepspeed/runtime/pipe/module.py forward and _is_checkpointable): stage 0's first run holds
// two functions that are not layers and its first N - 2 layers, the last stage's last run its last
// L mod N layers and the final norm and head. Those layers keep their activations and are not run
// again. Checked by hand on the suites' square model (32 layers) over pp 4 (8 layers a stage).

#include <doctest/doctest.h>

#include <cstdint>

#include "compute_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

PlanOptions deepspeed() {
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  return options;
}

Layout full_recompute(int64_t pp, int64_t interval) {
  Layout layout = test::make_layout(2, pp, 1, 1, 8);
  layout.recompute = Recompute::kFull;
  layout.recompute_group_layers = interval;
  return layout;
}

struct Expected {
  int64_t interval, first_stage_first, last_stage_end, first_stage_inputs, last_stage_inputs;
};

TEST_CASE("DeepSpeed pipeline: which layers of the first and last stage are recomputed") {
  const models::TransformerConfig model = test::square_model("square");
  // Stage 0 is layers [0, 8), the last stage [24, 32). Stage 0's runs: {2 functions, layers 0 ..
  // N - 3}, then N layers at a time from layer N - 2; the last stage's: N layers at a time from
  // layer 24, the last one with 8 mod N layers and the tail functions.
  //   N 1: every layer (runs [f], [f], [0], ... and [31], [norm], ...).
  //   N 2: [f f] [0 1] ... [6 7]; last [24 25] ... [30 31] [tail]: every layer.
  //   N 3: [f f 0] [1 2 3] [4 5 6] [7]; last [24 25 26] [27 28 29] [30 31 tail]: 1..7 (3 inputs)
  //        and 24..29 (2 inputs).
  //   N 5: [f f 0 1 2] [3 .. 7]; last [24 .. 28] [29 30 31 tail]: 3..7 and 24..28, 1 input each.
  //   N 10: [f f 0 .. 7]: none of stage 0; last [24 .. 31 tail]: none.
  for (const Expected& e :
       {Expected{1, 0, 32, 8, 8}, Expected{2, 0, 32, 4, 4}, Expected{3, 1, 30, 3, 2},
        Expected{5, 3, 29, 1, 1}, Expected{10, 8, 24, 0, 0}}) {
    CAPTURE(e.interval);
    const Layout layout = full_recompute(4, e.interval);
    const LayerRange first{0, 8}, middle{8, 16}, last{24, 32};
    CHECK(recomputed_layers(model, layout, deepspeed(), first).first == e.first_stage_first);
    CHECK(recomputed_layers(model, layout, deepspeed(), first).end == 8);
    CHECK(recomputed_layers(model, layout, deepspeed(), last).first == 24);
    CHECK(recomputed_layers(model, layout, deepspeed(), last).end == e.last_stage_end);
    CHECK(checkpointed_input_count(model, layout, deepspeed(), first) == e.first_stage_inputs);
    CHECK(checkpointed_input_count(model, layout, deepspeed(), last) == e.last_stage_inputs);
    // Middle stages hold layers only: every run is checkpointed.
    CHECK(recomputed_layers(model, layout, deepspeed(), middle).count() == 8);
    // Megatron's uniform method groups every stage's layers from its first.
    CHECK(recomputed_layers(model, layout, PlanOptions{}, first).count() == 8);
    CHECK(recomputed_layers(model, layout, PlanOptions{}, last).count() == 8);
    // pp 1 is DeepSpeed's plain engine (--no-pipeline-parallel): Megatron's groups.
    const Layout one_stage = full_recompute(1, e.interval);
    CHECK(recomputed_layers(model, one_stage, deepspeed(), LayerRange{0, 32}).count() == 32);
  }
}

TEST_CASE("DeepSpeed pipeline: an unchecked layer keeps its activations and is not run again") {
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  // Interval 3 against 2 (which checkpoints every layer): stage 0 keeps layer 0 whole instead of
  // in 3 ... 4 inputs, the last stage layers 30 and 31.
  const Layout two = full_recompute(4, 2);
  const Layout three = full_recompute(4, 3);
  Layout none = test::make_layout(2, 4, 1, 1, 8);
  const double whole = activation_bytes_per_layer(model, a100, none, deepspeed());
  const double input = activation_bytes_per_layer(model, a100, two, deepspeed());
  const auto activations = [&](const Layout& layout, int64_t stage) {
    const PlanEstimate estimate = estimate_plan(model, a100, layout, deepspeed());
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    return static_cast<double>(
        estimate.stages[static_cast<size_t>(stage)].memory.activations_bytes);
  };
  // Under 1F1B stage s holds pp - s micro-batches; the rebuilt transient is a group's layers
  // (2 or 3 whole layers), the larger of it and the loss's on the last stage.
  // Stage 0, 4 in flight: interval 2 keeps 4 inputs, interval 3 one layer and 3 inputs.
  CHECK(activations(three, 0) - activations(two, 0) ==
        doctest::Approx(4.0 * (whole + 3.0 * input - 4.0 * input) + whole).epsilon(1e-9).scale(0));
  // Interval 10 checkpoints no run of stage 0 (its 2 functions and 8 layers are one run): it
  // holds what it holds without recompute, and rebuilds nothing.
  CHECK(activations(full_recompute(4, 10), 0) ==
        doctest::Approx(activations(none, 0)).epsilon(1e-12).scale(0));
  // A middle stage (2 in flight): 3 inputs against 4, and a group of 3 rebuilt against 2.
  CHECK(activations(three, 2) - activations(two, 2) ==
        doctest::Approx(2.0 * (3.0 * input - 4.0 * input) + whole).epsilon(1e-9).scale(0));
  // Megatron-Core's uniform method groups stage 0 from layer 0: 3 inputs against 4, no whole
  // layer kept.
  const auto megatron_activations = [&](const Layout& layout) {
    const PlanEstimate estimate = estimate_plan(model, a100, layout, PlanOptions{});
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    return static_cast<double>(estimate.stages[0].memory.activations_bytes);
  };
  CHECK(megatron_activations(three) - megatron_activations(two) ==
        doctest::Approx(4.0 * (3.0 * input - 4.0 * input) + whole).epsilon(1e-9).scale(0));

  // Time: stage 0 re-runs 7 layers' forwards instead of 8, the tp all-reduces of 7.
  const ChunkCost stage0_two = chunk_cost(model, a100, two, deepspeed(), 0, 0);
  const ChunkCost stage0_three = chunk_cost(model, a100, three, deepspeed(), 0, 0);
  const ChunkCost middle = chunk_cost(model, a100, two, deepspeed(), 1, 0);
  CHECK(stage0_two.backward_input_compute_seconds - stage0_three.backward_input_compute_seconds ==
        doctest::Approx(middle.forward_compute_seconds / 8.0).epsilon(1e-9).scale(0));
  CHECK(stage0_three.forward_compute_seconds ==
        doctest::Approx(stage0_two.forward_compute_seconds).epsilon(1e-12).scale(0));
  const PlanEstimate estimate = estimate_plan(model, a100, three, deepspeed());
  const CollectiveTraffic* recomputed =
      test::find_traffic(estimate.collectives, "tp: recomputed forward all-reduces");
  REQUIRE(recomputed != nullptr);
  // Stages 0 and 3 (the inventory's first stage): 2 all-reduces of each of 7 recomputed layers
  // per micro-batch, 8 micro-batches.
  CHECK(recomputed->calls_per_step == 2 * 7 * 8);
}

}  // namespace
}  // namespace meshplan::planner
