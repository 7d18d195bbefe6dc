// Megatron's block method (Layout::recompute_layers, --recompute-method block
// --recompute-num-layers N, megatron/core/recompute.py at d98e8a64): under full recompute only
// each model chunk's first N layers are recomputed; the others keep their activations. Checked
// against full recompute and no recompute of the same layout, which bracket it layer by layer:
// the suites' square model (h 4096, 32 layers, s 2048) in bf16 on dgx-a100-80gb.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "compute_cost.h"
#include "input_error.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "meshplan/units.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

Layout with_recompute(Layout layout, Recompute recompute, int64_t recompute_layers = 0) {
  layout.recompute = recompute;
  layout.recompute_layers = recompute_layers;
  return layout;
}

TEST_CASE("recompute_layers: which layers of a chunk are recomputed") {
  Layout layout;
  CHECK(recomputed_layer_count(layout, 8) == 0);  // no recompute
  layout.recompute = Recompute::kSelective;
  CHECK(recomputed_layer_count(layout, 8) == 0);
  layout.recompute = Recompute::kFull;
  CHECK(recomputed_layer_count(layout, 8) == 8);  // every layer
  layout.recompute_layers = 3;
  CHECK(recomputed_layer_count(layout, 8) == 3);  // the block method's first 3
  CHECK(recomputed_layer_count(layout, 2) == 2);  // a chunk of fewer layers: all of them
}

TEST_CASE("recompute_layers: a kept layer holds what it holds without recompute") {
  // pp 1, one micro-batch in flight: the stage holds each layer once. Against full recompute,
  // the block method with N of 32 layers recomputed keeps 32 - N layers' activations whole:
  // (32 - N) x (layer without recompute - layer input) bytes more.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout base = test::make_layout(4, 1, 2, 1, 2);
  const PlanOptions options;
  const double whole =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kNone), options);
  const double input =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kFull), options);
  const auto activations = [&](const Layout& layout) {
    const PlanEstimate estimate = estimate_plan(model, a100, layout, options);
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    return estimate.stages[0].memory.activations_bytes;
  };
  const int64_t full = activations(with_recompute(base, Recompute::kFull));
  for (const int64_t n : {1, 8, 31}) {
    CAPTURE(n);
    CHECK(activations(with_recompute(base, Recompute::kFull, n)) - full ==
          static_cast<int64_t>((32 - n) * (whole - input)));
  }
  CHECK(activations(with_recompute(base, Recompute::kFull, 32)) == full);
}

TEST_CASE("recompute_layers: a mixture-of-experts chunk, dense and MoE layers apart") {
  // tiny-moe (layer 0 dense, layers 1-3 MoE) on local-cpu, ep 2, pp 1: with 2 of 4 recomputed,
  // the dense layer 0 and MoE layer 1 keep their inputs, MoE layers 2 and 3 their whole
  // activations; the ep all-to-alls run for 3 MoE forwards, 1 recomputed and 3 backwards.
  const models::TransformerConfig& model = test::tiny_moe();
  const models::ClusterConfig cpu = models::load_cluster("local-cpu");
  Layout base = test::make_layout(1, 1, 2, 2, 16);
  base.ep = 2;
  const PlanOptions options;
  const double moe_whole =
      activation_bytes_per_layer(model, cpu, with_recompute(base, Recompute::kNone), options, true);
  const double moe_input =
      activation_bytes_per_layer(model, cpu, with_recompute(base, Recompute::kFull), options, true);
  const PlanEstimate full = estimate_plan(model, cpu, with_recompute(base, Recompute::kFull), {});
  const PlanEstimate block =
      estimate_plan(model, cpu, with_recompute(base, Recompute::kFull, 2), {});
  REQUIRE_MESSAGE(full.feasible, full.rejection_reason);
  REQUIRE_MESSAGE(block.feasible, block.rejection_reason);
  CHECK(block.stages[0].memory.activations_bytes - full.stages[0].memory.activations_bytes ==
        static_cast<int64_t>(2 * (moe_whole - moe_input)));
  const CollectiveTraffic* forward = test::find_traffic(
      block.collectives, "ep: MoE token dispatch and combine all-to-alls (forward)");
  REQUIRE(forward != nullptr);
  CHECK(forward->calls_per_step == 2 * (3 + 1) * 4);  // m = 16 / (2 x 2) = 4
}

TEST_CASE("recompute_layers: the recompute's time scales with the layers recomputed") {
  // chunk_cost: the backward of N recomputed layers of 32 takes N / 32 of full recompute's
  // extra over no recompute, compute and exposed tp alike; the forward is the same.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout base = test::make_layout(4, 1, 2, 1, 2);
  const ChunkCost none = chunk_cost(model, a100, with_recompute(base, Recompute::kNone), {}, 0, 0);
  const ChunkCost full = chunk_cost(model, a100, with_recompute(base, Recompute::kFull), {}, 0, 0);
  const ChunkCost block =
      chunk_cost(model, a100, with_recompute(base, Recompute::kFull, 8), {}, 0, 0);
  CHECK(block.backward_input_compute_seconds - none.backward_input_compute_seconds ==
        doctest::Approx(0.25 *
                        (full.backward_input_compute_seconds - none.backward_input_compute_seconds))
            .epsilon(1e-12)
            .scale(0));
  CHECK(block.backward_tp_comm_seconds - none.backward_tp_comm_seconds ==
        doctest::Approx(0.25 * (full.backward_tp_comm_seconds - none.backward_tp_comm_seconds))
            .epsilon(1e-12)
            .scale(0));
  CHECK(block.forward_compute_seconds == full.forward_compute_seconds);
  CHECK(block.backward_weight_compute_seconds == full.backward_weight_compute_seconds);
}

TEST_CASE("recompute_layers: recomputed forwards' tp collectives, per chunk") {
  // pp 2, 16 layers a stage, 4 micro-batches, tp 4. Without sequence parallelism each recomputed
  // layer all-reduces twice more: 2 x 5 x 4 = 40 calls with 5 recomputed. With it, each re-runs
  // its two all-gathers and two reduce-scatters: 2 x (16 + 5) x 4 = 168 of each forward kind.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout base = with_recompute(test::make_layout(4, 2, 1, 1, 4), Recompute::kFull, 5);
  const PlanEstimate plain = estimate_plan(model, a100, base, {});
  REQUIRE_MESSAGE(plain.feasible, plain.rejection_reason);
  const CollectiveTraffic* recomputed =
      test::find_traffic(plain.collectives, "tp: recomputed forward all-reduces");
  REQUIRE(recomputed != nullptr);
  CHECK(recomputed->calls_per_step == 40);
  Layout sequence_parallel = base;
  sequence_parallel.sequence_parallel = true;
  const PlanEstimate sp = estimate_plan(model, a100, sequence_parallel, {});
  REQUIRE_MESSAGE(sp.feasible, sp.rejection_reason);
  for (const char* what : {"tp: layer forward all-gathers (QKV in, MLP in)",
                           "tp: layer forward reduce-scatters (attention out, MLP out)"}) {
    CAPTURE(what);
    const CollectiveTraffic* traffic = test::find_traffic(sp.collectives, what);
    REQUIRE(traffic != nullptr);
    CHECK(traffic->calls_per_step == 168);
  }
}

TEST_CASE("recompute_layers: refused where the block method does not exist") {
  const auto code = [&](const Layout& layout, Framework framework) {
    PlanOptions options;
    options.framework = framework;
    return check_recompute_layers(layout, options).code;
  };
  const Layout block = with_recompute(test::make_layout(2, 2, 2, 1, 8), Recompute::kFull, 2);
  CHECK(code(block, Framework::kMegatron).empty());
  CHECK(code(block, Framework::kMeshplan).empty());
  CHECK(code(block, Framework::kDeepSpeed) == "framework");
  CHECK(code(block, Framework::kFsdp) == "framework");
  CHECK(code(with_recompute(block, Recompute::kNone, 2), Framework::kMegatron) ==
        "recompute_layers");
  CHECK(code(with_recompute(block, Recompute::kFull, -1), Framework::kMegatron) ==
        "recompute_layers");
  Layout zero3_cp = block;  // ZeRO-3 and context parallelism are costed like any layout
  zero3_cp.zero = 3;
  zero3_cp.cp = 2;
  CHECK(code(zero3_cp, Framework::kMegatron).empty());
  CHECK(check_recompute_layers(with_recompute(block, Recompute::kSelective, 2), {})
            .reason.starts_with("recompute_layers 2: needs recompute full"));
}

TEST_CASE("recompute_layers: context parallelism re-runs the recomputed layers' ring sends") {
  // pp 1, cp 2, tp 4, 32 layers, m = 2 micro-batches: each layer forward sends K/V cp - 1 = 1
  // times, its backward once more plus its dK/dV once. With 5 of 32 recomputed the ring K/V
  // sends are (32 + 5 + 32) x 2 = 138 calls (full: (64 + 32) x 2 = 192, none: 128), and the
  // recompute's exposed cp time is 5/32 of full recompute's.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  Layout base = test::make_layout(4, 1, 1, 1, 2);
  base.cp = 2;
  const auto ring_calls = [&](const Layout& layout) {
    const PlanEstimate estimate = estimate_plan(model, a100, layout, {});
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    const CollectiveTraffic* ring =
        test::find_traffic(estimate.collectives, "cp: ring K/V sends (forward, backward)");
    REQUIRE(ring != nullptr);
    return ring->calls_per_step;
  };
  CHECK(ring_calls(with_recompute(base, Recompute::kNone)) == 128);
  CHECK(ring_calls(with_recompute(base, Recompute::kFull)) == 192);
  CHECK(ring_calls(with_recompute(base, Recompute::kFull, 5)) == 138);
  const ChunkCost none = chunk_cost(model, a100, with_recompute(base, Recompute::kNone), {}, 0, 0);
  const ChunkCost full = chunk_cost(model, a100, with_recompute(base, Recompute::kFull), {}, 0, 0);
  const ChunkCost block =
      chunk_cost(model, a100, with_recompute(base, Recompute::kFull, 5), {}, 0, 0);
  CHECK(
      block.backward_cp_comm_seconds - none.backward_cp_comm_seconds ==
      doctest::Approx(5.0 / 32.0 * (full.backward_cp_comm_seconds - none.backward_cp_comm_seconds))
          .epsilon(1e-12)
          .scale(0));
}

TEST_CASE("recompute_layers: latent attention's tp gathers, recomputed layers only") {
  // tiny-mla (4 layers) on local-cpu, tp 2 with sequence parallelism, pp 1, m = 4: each layer
  // all-gathers its query and kv latents forward and for the weight gradients, its rotary key
  // forward; a recomputed forward gathers all three again. With 1 of 4 recomputed: latents
  // (2 x 4 + 1) x 4 = 36 calls (full 48), rotary key (4 + 1) x 4 = 20 (full 32). The hidden
  // state's forward all-gathers: MLA layers gather only their MLP input, (4 + 1) x 4 = 20.
  const models::TransformerConfig model = models::load_model("tiny-mla");
  Layout base = with_recompute(test::make_layout(2, 1, 1, 1, 4), Recompute::kFull, 1);
  base.sequence_parallel = true;
  const auto calls = [&](const Layout& layout, const char* what) {
    const PlanEstimate estimate = estimate_plan(model, test::local_cpu(), layout, {});
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    const CollectiveTraffic* traffic = test::find_traffic(estimate.collectives, what);
    REQUIRE(traffic != nullptr);
    return traffic->calls_per_step;
  };
  const char* latents = "tp: MLA query latent all-gathers (forward, weight-gradient re-gather)";
  const char* rotary = "tp: MLA rotary key all-gather (forward)";
  const char* hidden = "tp: layer forward all-gathers (QKV in, MLP in)";
  CHECK(calls(base, latents) == 36);
  CHECK(calls(base, rotary) == 20);
  CHECK(calls(base, hidden) == 20);
  const Layout full = with_recompute(base, Recompute::kFull);
  CHECK(calls(full, latents) == 48);
  CHECK(calls(full, rotary) == 32);
  CHECK(calls(full, hidden) == 32);
}

TEST_CASE("recompute_layers: ZeRO-3 gathers as under full recompute, activations as dense") {
  // Megatron-FSDP gathers a layer's parameters before its forward and before its backward op,
  // which runs the recompute inside it: the dp traffic is full recompute's. Activations differ
  // from full recompute by (32 - N) x (whole layer - layer input), as without ZeRO-3.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  Layout base = test::make_layout(4, 1, 2, 1, 2);
  base.zero = 3;
  const PlanEstimate full = estimate_plan(model, a100, with_recompute(base, Recompute::kFull), {});
  const PlanEstimate block =
      estimate_plan(model, a100, with_recompute(base, Recompute::kFull, 8), {});
  REQUIRE_MESSAGE(full.feasible, full.rejection_reason);
  REQUIRE_MESSAGE(block.feasible, block.rejection_reason);
  const double whole =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kNone), {});
  const double input =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kFull), {});
  CHECK(block.stages[0].memory.activations_bytes - full.stages[0].memory.activations_bytes ==
        static_cast<int64_t>(24 * (whole - input)));
  const auto dp_traffic = [](const PlanEstimate& estimate) {
    std::vector<std::tuple<std::string, int64_t, int64_t>> calls;
    for (const CollectiveTraffic& traffic : estimate.collectives) {
      if (traffic.group == CommGroup::kDp) {
        calls.emplace_back(traffic.what, traffic.message_bytes, traffic.calls_per_step);
      }
    }
    return calls;
  };
  CHECK_FALSE(dp_traffic(full).empty());
  CHECK(dp_traffic(block) == dp_traffic(full));
}

TEST_CASE("recompute_layers auto: the fewest recomputed layers per chunk that fit") {
  // GPT-3 175B on 512 A100-80GB, tp 8, pp 8 (12 layers a stage), micro-batch 8, 1F1B, sequence
  // parallelism, ZeRO 1: no recompute needs 130 GiB, full recompute fits. The search adds the
  // block method with the smallest N whose plan fits; N - 1 does not fit.
  const models::TransformerConfig model = models::load_model("gpt3-175b");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  SearchSpace space;
  space.num_gpus = 512;
  space.global_batch = 1536;
  space.tp = 8;
  space.pp = 8;
  space.vpp = 1;
  space.micro_batch = 8;
  space.recompute = Recompute::kFull;
  space.sequence_parallel = true;
  space.zero = 1;
  space.schedule = ScheduleKind::kOneFOneB;
  space.stage_layers = std::vector<int64_t>{};  // the even split only
  const SearchResult plain = search_layouts(model, a100, space, {}, Objective::kTime, 4);
  space.search_recompute_layers = true;
  const SearchResult searched = search_layouts(model, a100, space, {}, Objective::kTime, 4);
  REQUIRE(plain.best.size() == 1);
  REQUIRE(searched.best.size() == 2);
  const Layout& block = searched.best[0].layout;
  REQUIRE(block.recompute_layers > 0);
  CHECK(searched.best[0].step_time_s < plain.best[0].step_time_s);
  CHECK(searched.best[1].layout == plain.best[0].layout);
  Layout fewer = block;
  fewer.recompute_layers -= 1;
  const PlanEstimate at_block = estimate_plan(model, a100, block, {});
  CHECK(at_block.feasible);
  if (fewer.recompute_layers > 0) {
    CHECK_FALSE(estimate_plan(model, a100, fewer, {}).feasible);
  }
  MESSAGE("block:" << block.recompute_layers << " " << searched.best[0].step_time_s << " s against "
                   << plain.best[0].step_time_s << " s");
}

Layout with_groups(Layout layout, int64_t group_layers) {
  layout.recompute = Recompute::kFull;
  layout.recompute_group_layers = group_layers;
  return layout;
}

TEST_CASE("recompute_group_layers: a chunk keeps one input per group, rebuilds a group at once") {
  // pp 1, one micro-batch in flight, 32 layers: Megatron's uniform method with groups of N
  // keeps ceil(32 / N) layer inputs instead of 32, and a group's backward rebuilds its N layers'
  // activations at once instead of one layer's: against full recompute,
  //   - (32 - ceil(32 / N)) x layer input + (N - 1) x whole layer.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout base = test::make_layout(4, 1, 2, 1, 2);
  const double whole =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kNone), {});
  const double input =
      activation_bytes_per_layer(model, a100, with_recompute(base, Recompute::kFull), {});
  const auto activations = [&](const Layout& layout) {
    const PlanEstimate estimate = estimate_plan(model, a100, layout, {});
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    return static_cast<double>(estimate.stages[0].memory.activations_bytes);
  };
  const double full = activations(with_recompute(base, Recompute::kFull));
  for (const int64_t n : {2, 3, 8, 32}) {
    CAPTURE(n);
    const double groups = static_cast<double>((32 + n - 1) / n);
    CHECK(activations(with_groups(base, n)) - full ==
          doctest::Approx(-(32.0 - groups) * input + static_cast<double>(n - 1) * whole)
              .epsilon(1e-9)
              .scale(0));
  }
  CHECK(activations(with_groups(base, 1)) == full);
  // A group larger than the chunk rebuilds the chunk's 32 layers, as a group of 32 does.
  CHECK(activations(with_groups(base, 64)) == activations(with_groups(base, 32)));
}

TEST_CASE(
    "recompute_group_layers: time and collectives as full recompute, saved inputs per group") {
  // Every layer's forward still runs again once; only the kept inputs are fewer. With
  // distributed saved activations (tp 4, pp 2: 16 layers a stage, m = 4) each group's input is
  // split and all-gathered once: ceil(16 / 3) x 4 = 24 gathers instead of 64, and the split's
  // time is charged 6 times per chunk instead of 16.
  const models::TransformerConfig model = test::square_model("square");
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const Layout base = test::make_layout(4, 2, 1, 1, 4);
  const ChunkCost full = chunk_cost(model, a100, with_recompute(base, Recompute::kFull), {}, 0, 0);
  const ChunkCost groups = chunk_cost(model, a100, with_groups(base, 3), {}, 0, 0);
  CHECK(groups.forward_compute_seconds == doctest::Approx(full.forward_compute_seconds).scale(0));
  CHECK(groups.backward_input_compute_seconds ==
        doctest::Approx(full.backward_input_compute_seconds).scale(0));
  CHECK(groups.backward_tp_comm_seconds == doctest::Approx(full.backward_tp_comm_seconds).scale(0));
  PlanOptions distribute;
  distribute.distribute_saved_activations = true;
  const ChunkCost full_split =
      chunk_cost(model, a100, with_recompute(base, Recompute::kFull), distribute, 0, 0);
  const ChunkCost groups_split = chunk_cost(model, a100, with_groups(base, 3), distribute, 0, 0);
  CHECK(groups_split.backward_tp_comm_seconds - groups.backward_tp_comm_seconds ==
        doctest::Approx(6.0 / 16.0 *
                        (full_split.backward_tp_comm_seconds - full.backward_tp_comm_seconds))
            .scale(0));
  CHECK(groups_split.forward_compute_seconds - groups.forward_compute_seconds ==
        doctest::Approx(6.0 / 16.0 *
                        (full_split.forward_compute_seconds - full.forward_compute_seconds))
            .scale(0));
  const PlanEstimate estimate = estimate_plan(model, a100, with_groups(base, 3), distribute);
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const CollectiveTraffic* gathers = test::find_traffic(
      estimate.collectives, "tp: all-gather of each distributed saved layer input (recompute)");
  REQUIRE(gathers != nullptr);
  CHECK(gathers->calls_per_step == 24);
  const CollectiveTraffic* recomputed =
      test::find_traffic(estimate.collectives, "tp: recomputed forward all-reduces");
  REQUIRE(recomputed != nullptr);
  CHECK(recomputed->calls_per_step == 2 * 16 * 4);
}

TEST_CASE("recompute_group_layers: refused without full recompute, beside the block method, fsdp") {
  const auto code = [&](const Layout& layout, Framework framework) {
    PlanOptions options;
    options.framework = framework;
    return check_recompute_layers(layout, options).code;
  };
  const Layout groups = with_groups(test::make_layout(2, 2, 2, 1, 8), 2);
  CHECK(code(groups, Framework::kMegatron).empty());
  CHECK(code(groups, Framework::kDeepSpeed).empty());  // activation_checkpoint_interval
  CHECK(code(groups, Framework::kMeshplan).empty());
  CHECK(code(groups, Framework::kFsdp) == "framework");
  CHECK(code(with_groups(groups, 1), Framework::kFsdp).empty());  // one layer a group: full AC
  Layout selective = groups;
  selective.recompute = Recompute::kSelective;
  CHECK(code(selective, Framework::kMegatron) == "recompute_group_layers");
  Layout both = groups;
  both.recompute_layers = 2;
  CHECK(code(both, Framework::kMegatron) == "recompute_group_layers");
  CHECK(code(with_groups(groups, -1), Framework::kMegatron) == "recompute_group_layers");
}

TEST_CASE("recompute_group_layers auto: the least-memory group size where full does not fit") {
  // Llama-3 405B on 512 H100, tp 1, pp 1, dp 512, ZeRO-3, micro-batch 1: full recompute keeps
  // 126 layer inputs and does not fit; the search adds the group size whose plan needs the
  // least memory, which an exhaustive scan of 2..126 confirms, at full recompute's time.
  const models::TransformerConfig model = models::load_model("llama3-405b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  SearchSpace space;
  space.num_gpus = 512;
  space.global_batch = 512;
  space.tp = 1;
  space.pp = 1;
  space.vpp = 1;
  space.micro_batch = 1;
  space.recompute = Recompute::kFull;
  space.sequence_parallel = false;
  space.zero = 3;
  space.schedule = ScheduleKind::kOneFOneB;
  const SearchResult plain = search_layouts(model, h100, space, {}, Objective::kTime, 4);
  CHECK(plain.best.empty());
  space.search_recompute_group_layers = true;
  const SearchResult searched = search_layouts(model, h100, space, {}, Objective::kTime, 4);
  REQUIRE(searched.best.size() == 1);
  const Layout& found = searched.best[0].layout;
  Layout scan = found;
  int64_t least = 0, least_bytes = 0;
  for (int64_t n = 2; n <= 126; ++n) {
    scan.recompute_group_layers = n;
    const int64_t bytes = estimate_plan(model, h100, scan, {}).peak_memory_bytes;
    if (least == 0 || bytes < least_bytes) {
      least = n;
      least_bytes = bytes;
    }
  }
  CHECK(found.recompute_group_layers == least);
  CHECK(searched.best[0].peak_memory_bytes == least_bytes);
  Layout every_layer = found;
  every_layer.recompute_group_layers = 0;
  const PlanEstimate full = estimate_plan(model, h100, every_layer, {});
  CHECK_FALSE(full.feasible);
  CHECK(searched.best[0].step_time_s == doctest::Approx(full.step_time_s).scale(0));
  MESSAGE("group:" << least << " " << static_cast<double>(least_bytes) / kBytesPerGiB
                   << " GiB against "
                   << static_cast<double>(full.peak_memory_bytes) / kBytesPerGiB);
}

TEST_CASE("plan file: layout.recompute_group_layers written only above 1, read back") {
  Plan plan{test::square_model("square"), models::load_cluster("dgx-a100-80gb"), 8,
            with_groups(test::make_layout(2, 2, 2, 1, 8), 3), PlanOptions{}};
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("layout").at("recompute_group_layers") == 3);
  CHECK(plan_from_json(json, "p.json") == plan);
  nlohmann::json fsdp = json;
  fsdp["options"]["framework"] = "fsdp";
  CHECK(test::input_error([&] {
          plan_from_json(fsdp, "p.json");
        }).starts_with("p.json: layout: fsdp cannot run this layout: torchtitan's layer AC"));
  plan.layout.recompute_group_layers = 1;
  CHECK_FALSE(plan_to_json(plan, {}).at("layout").contains("recompute_group_layers"));
}

TEST_CASE("plan file: layout.recompute_layers written only when set, read back, bounded") {
  Plan plan{test::square_model("square"), models::load_cluster("dgx-a100-80gb"), 8,
            with_recompute(test::make_layout(2, 2, 2, 1, 8), Recompute::kFull), PlanOptions{}};
  CHECK_FALSE(plan_to_json(plan, {}).at("layout").contains("recompute_layers"));
  plan.layout.recompute_layers = 4;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("layout").at("recompute_layers") == 4);
  CHECK(plan_from_json(json, "p.json") == plan);
  nlohmann::json zero = json;
  zero["layout"]["recompute_layers"] = 0;
  CHECK(test::input_error([&] { plan_from_json(zero, "p.json"); }) ==
        "p.json: layout: recompute_layers: must be between 1 and 100000 (0)");
  nlohmann::json deepspeed = json;
  deepspeed["options"]["framework"] = "deepspeed";
  deepspeed["options"].erase("overlap_p2p_comm");
  CHECK(test::input_error([&] { plan_from_json(deepspeed, "p.json"); })
            .starts_with("p.json: layout: deepspeed cannot run this layout: its activation "
                         "checkpointing recomputes every activation_checkpoint_interval"));
}

}  // namespace
}  // namespace meshplan::planner
