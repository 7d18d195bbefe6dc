// Uneven pipeline stages (planner/stage_layers.cpp): which layers each stage holds, the
// per-stage parameters, the step time of unequal stages and the validity errors, against hand
// values.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::input_error;
using test::make_layout;
using test::tiny_llama;

Layout split_layout(int64_t pp, std::vector<int64_t> stage_layers) {
  Layout layout = make_layout(1, pp, 1, 1, 8);
  layout.stage_layers = std::move(stage_layers);
  return layout;
}

}  // namespace

TEST_CASE("stage_layer_range: even, uneven and interleaved uneven placements") {
  const models::TransformerConfig model = tiny_llama(4);
  // Even pp 2: [0, 2) and [2, 4).
  const Layout even = split_layout(2, {});
  CHECK(stage_layer_range(model, even, 1, 0).first == 2);
  CHECK(stage_layer_range(model, even, 1, 0).end == 4);
  // 3/1: stage 0 holds layers 0-2, stage 1 layer 3.
  const Layout split = split_layout(2, {3, 1});
  CHECK(stage_layer_range(model, split, 0, 0).first == 0);
  CHECK(stage_layer_range(model, split, 0, 0).end == 3);
  CHECK(stage_layer_range(model, split, 1, 0).first == 3);
  CHECK(stage_layer_range(model, split, 1, 0).end == 4);
  CHECK(stage_layer_count(model, split, 0) == 3);
  // 12 layers as 2,4,4,2 on pp 4, vpp 2 (Megatron-Core get_transformer_layer_offset): a round
  // is 12 / 2 = 6 layers; chunk 1 of stage 2 starts at 6 + (2 + 4) / 2 = 9 and holds 4 / 2 = 2.
  Layout interleaved = split_layout(4, {2, 4, 4, 2});
  interleaved.vpp = 2;
  const models::TransformerConfig twelve = tiny_llama(12);
  CHECK(stage_layer_range(twelve, interleaved, 2, 1).first == 9);
  CHECK(stage_layer_range(twelve, interleaved, 2, 1).end == 11);
  CHECK(stage_layer_range(twelve, interleaved, 3, 1).first == 11);  // 6 + (2 + 4 + 4) / 2
  CHECK(stage_layer_range(twelve, interleaved, 0, 1).first == 6);
  CHECK(stage_layer_count(twelve, interleaved, 1) == 4);
}

TEST_CASE("stage_parameter_count: a 3/1 split by hand") {
  const models::TransformerConfig model = tiny_llama(4);
  // One layer: QKV 64 x (4 + 2 * 2) * 16 = 8,192; output 64 * 64 = 4,096; SwiGLU fc1
  // 64 x 256 = 16,384; fc2 128 x 64 = 8,192; two RMSNorms 2 x 64 = 128: 36,992.
  const int64_t layer = 8192 + 4096 + 16384 + 8192 + 128;
  // Stage 0: 3 layers + embedding 256 x 64 = 16,384. Stage 1: 1 layer + final norm 64 + LM
  // head 16,384.
  const Layout layout = split_layout(2, {3, 1});
  CHECK(stage_parameter_count(model, layout, 0, PlanOptions{}) == 3 * layer + 16384);
  CHECK(stage_parameter_count(model, layout, 1, PlanOptions{}) == layer + 64 + 16384);
}

TEST_CASE("estimate_plan: 1F1B step of two unequal stages is sum + (m - 1) max") {
  // Narayanan et al. 2021, Sec. 2.2.1 flow shop: f_0 + b_0 + f_1 + b_1 + (m - 1) max_s(f_s +
  // b_s), with each stage's f and b read back from its own chunk costs (pp 2, dp 1, 8 micro-
  // batches). The stage with 3 layers is the slower one.
  const models::TransformerConfig model = tiny_llama(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = split_layout(2, {3, 1});
  const PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.feasible);
  REQUIRE(estimate.stages.size() == 2);
  CHECK(estimate.stages[0].chunks[0].num_layers == 3);
  CHECK(estimate.stages[1].chunks[0].num_layers == 1);
  const auto stage_time = [&](int s) {
    const ChunkCost& c = estimate.stages[static_cast<size_t>(s)].chunks[0];
    return c.forward_seconds() + c.backward_seconds();
  };
  const double m = 8.0;  // global batch 8 / (dp 1 * micro-batch 1)
  const double slowest = std::max(stage_time(0), stage_time(1));
  CHECK(slowest == stage_time(0));
  const double pipeline = stage_time(0) + stage_time(1) + (m - 1.0) * slowest;
  const StepBreakdown& b = estimate.breakdown;
  // 1e-12 relative: the same doubles summed in another order.
  CHECK(b.pipeline_compute_seconds + b.bubble_seconds ==
        doctest::Approx(pipeline).epsilon(1e-12).scale(0));
  // The even 2/2 split of the same model is faster: its slowest stage holds 2 layers.
  const PlanEstimate even = estimate_plan(model, cluster, split_layout(2, {}));
  CHECK(even.step_time_s < estimate.step_time_s);
}

TEST_CASE("check_layout: stage_layers errors name the field and the values") {
  const models::TransformerConfig model = tiny_llama(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const auto reason = [&](const Layout& layout) {
    const Validity v = check_layout(model, cluster, layout.num_gpus(), layout);
    CHECK(v.code == "stage_layers");
    return v.reason;
  };
  CHECK(reason(split_layout(2, {1, 2, 1})) == "stage_layers: 3 entries for pp 2 (1,2,1)");
  CHECK(reason(split_layout(2, {4, 0})) ==
        "stage_layers: stage 1 has 0 layers, expected 1 to num_layers 4 (4,0)");
  CHECK(reason(split_layout(2, {3, 2})) == "stage_layers: sum 5 differs from num_layers 4 (3,2)");
}

TEST_CASE(
    "stage_layer_range: any other split into chunks, even within a stage, longer chunks last") {
  // Neither divisible by vpp nor the accounted form: what Megatron-Core writes as a
  // --pipeline-model-parallel-layout. 3/1 on pp 2, vpp 2: stage 0's chunks hold 1 and 2 layers,
  // stage 1's 0 and 1; in virtual-stage order (v = 2 c + s: s0c0, s1c0, s0c1, s1c1) the layers
  // 0 | - | 1-2 | 3.
  const models::TransformerConfig model = tiny_llama(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout interleaved = split_layout(2, {3, 1});
  interleaved.vpp = 2;
  interleaved.schedule = ScheduleKind::kInterleaved;
  CHECK(check_layout(model, cluster, interleaved.num_gpus(), interleaved).ok());
  CHECK_FALSE(split_allows_vpp({3, 1}, 4, 2, 2));  // no Megatron flag form: the search skips it
  const auto range = [&](int64_t s, int64_t c) {
    const LayerRange r = stage_layer_range(model, interleaved, s, c);
    return std::pair{r.first, r.end};
  };
  CHECK(range(0, 0) == std::pair<int64_t, int64_t>{0, 1});
  CHECK(range(1, 0) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(range(0, 1) == std::pair<int64_t, int64_t>{1, 3});
  CHECK(range(1, 1) == std::pair<int64_t, int64_t>{3, 4});
  CHECK(max_chunk_layer_count(model, interleaved, 0) == 2);
  // chunk_layer_count: n / vpp each, one more in the last n % vpp chunks.
  CHECK(chunk_layer_count(7, 8, 0) == 0);
  for (int64_t c = 1; c < 8; ++c) {
    CHECK(chunk_layer_count(7, 8, c) == 1);
  }
  CHECK(chunk_layer_count(9, 8, 7) == 2);
  CHECK(chunk_layer_count(9, 8, 6) == 1);
  // Llama 3 405B's memory-shifted split on pp 16, vpp 8 (search.h memory_shifted_splits): the
  // ranges tile 0..126 in virtual-stage order with no gap or overlap.
  const models::TransformerConfig llama = tiny_llama(126);
  Layout shifted = split_layout(16, {7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 8});
  shifted.vpp = 8;
  int64_t next = 0;
  for (int64_t v = 0; v < 128; ++v) {
    const LayerRange r = stage_layer_range(llama, shifted, v % 16, v / 16);
    CAPTURE(v);
    CHECK(r.first == next);
    CHECK(r.count() ==
          chunk_layer_count(shifted.stage_layers[static_cast<size_t>(v % 16)], 8, v / 16));
    next = r.end;
  }
  CHECK(next == 126);
}

TEST_CASE("stage_layer_range: Megatron-Core's embedding/loss-accounted split into chunks") {
  // transformer_block.py get_num_layers_to_build with --account-for-embedding-in-pipeline-
  // split and --account-for-loss-in-pipeline-split: l + 2 slots, (l + 2) / (pp vpp) per chunk,
  // one fewer layer in the first chunk of stage 0 and in the last chunk of the last stage.
  // Llama 3 405B: 126 layers, pp 16, 7/8x14/7 (Dubey et al. 2024, Sec. 3.3.2). With vpp 8 a
  // chunk is one slot, so virtual stage v = 16 c + s holds layer v - 1 alone, except v = 0
  // (embedding only) and v = 127 (LM head and loss only).
  const models::TransformerConfig model = tiny_llama(126);
  std::vector<int64_t> split(16, 8);
  split.front() = 7;
  split.back() = 7;
  Layout layout = split_layout(16, split);
  layout.vpp = 8;
  CHECK(is_accounted_split(split, 8));
  CHECK(check_stage_layers(model, layout).empty());
  for (int64_t s = 0; s < 16; ++s) {
    for (int64_t c = 0; c < 8; ++c) {
      const int64_t v = 16 * c + s;
      const LayerRange range = stage_layer_range(model, layout, s, c);
      CAPTURE(v);
      if (v == 0 || v == 127) {
        CHECK(range.count() == 0);
      } else {
        CHECK(range.first == v - 1);
        CHECK(range.end == v);
      }
    }
  }
  CHECK(max_chunk_layer_count(model, layout, 0) == 1);
  // vpp 2: chunks of 4 slots. Stage 0 chunk 0 holds layers 0-2 (3: the embedding takes a
  // slot), stage 1 chunk 0 layers 3-6, stage 15 chunk 1 (v = 31) the last 3: 123-125.
  layout.vpp = 2;
  CHECK(stage_layer_range(model, layout, 0, 0).first == 0);
  CHECK(stage_layer_range(model, layout, 0, 0).end == 3);
  CHECK(stage_layer_range(model, layout, 1, 0).first == 3);
  CHECK(stage_layer_range(model, layout, 1, 0).end == 7);
  CHECK(stage_layer_range(model, layout, 0, 1).first == 63);  // v = 16: 16 * 4 - 1
  CHECK(stage_layer_range(model, layout, 15, 1).first == 123);
  CHECK(stage_layer_range(model, layout, 15, 1).end == 126);
  CHECK(stage_layer_count(model, layout, 0) == 7);
  // Only the first stage short (l + 1 = 128 slots): the last chunk of the last stage is full.
  const models::TransformerConfig model127 = tiny_llama(127);
  std::vector<int64_t> first_short(16, 8);
  first_short.front() = 7;
  CHECK(is_accounted_split(first_short, 4));
  Layout one_end = split_layout(16, first_short);
  one_end.vpp = 4;
  CHECK(stage_layer_range(model127, one_end, 15, 3).end == 127);
  CHECK(stage_layer_range(model127, one_end, 15, 3).count() == 2);
  // Counts vpp divides keep the first/last rule; a split that is neither is refused.
  CHECK_FALSE(is_accounted_split(split, 1));
  CHECK(split_allows_vpp(split, 126, 16, 4));
  CHECK_FALSE(split_allows_vpp(split, 126, 16, 3));
  CHECK_FALSE(split_allows_vpp({6, 8, 8, 6}, 28, 4, 4));  // 6 = 8 - 2: not one slot short
  CHECK(split_allows_vpp({6, 8, 8, 6}, 28, 4, 2));        // every count divisible by 2
  // pp 2 has no middle stage: 2/2 with vpp 3 is both ends short of L = 3, (4 + 2) / (2 x 3) = 1
  // slot per chunk: virtual stages E, 0, 1, 2, 3, L.
  CHECK(is_accounted_split({2, 2}, 3));
  Layout two = split_layout(2, {2, 2});
  two.vpp = 3;
  const models::TransformerConfig four = tiny_llama(4);
  CHECK(stage_layer_range(four, two, 0, 0).count() == 0);
  CHECK(stage_layer_range(four, two, 1, 0).first == 0);
  CHECK(stage_layer_range(four, two, 0, 1).first == 1);
  CHECK(stage_layer_range(four, two, 1, 1).first == 2);
  CHECK(stage_layer_range(four, two, 0, 2).first == 3);
  CHECK(stage_layer_range(four, two, 0, 2).end == 4);
  CHECK(stage_layer_range(four, two, 1, 2).count() == 0);
}

TEST_CASE("estimate_plan: accounted chunks carry the embedding and the loss alone") {
  // 4 layers on pp 3 as 1/2/1 with vpp 2: six chunks of one slot in virtual order: embedding,
  // layers 0, 1, 2, 3, LM head and loss. Interleaving needs m % pp == 0: 6 micro-batches.
  const models::TransformerConfig model = tiny_llama(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(1, 3, 1, 1, 6);
  layout.stage_layers = {1, 2, 1};
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  const PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.feasible);
  const ChunkCost& embedding = estimate.stages[0].chunks[0];
  CHECK(embedding.num_layers == 0);
  CHECK(embedding.has_embedding);
  const ChunkCost& head = estimate.stages[2].chunks[1];
  CHECK(head.num_layers == 0);
  CHECK(head.has_lm_head);
  CHECK(estimate.stages[1].chunks[0].num_layers == 1);
  CHECK(estimate.stages[1].chunks[1].num_layers == 1);
  // Each stage's parameters: stage 0 one layer + embedding, stage 2 one layer + norm + head.
  const int64_t layer = 8192 + 4096 + 16384 + 8192 + 128;  // stage_parameter_count test above
  CHECK(estimate.stages[0].num_parameters == layer + 16384);
  CHECK(estimate.stages[1].num_parameters == 2 * layer);
  CHECK(estimate.stages[2].num_parameters == layer + 64 + 16384);
}

TEST_CASE("first_last_stage_layers: Megatron-Core's first/last rule") {
  // 126 layers on pp 16, first and last 7: the other 112 over 14 stages, 8 each (Llama 3 405B).
  const std::vector<int64_t> llama = first_last_stage_layers(126, 16, 7, 7, "--first-stage-layers");
  REQUIRE(llama.size() == 16);
  CHECK(llama.front() == 7);
  CHECK(llama[1] == 8);
  CHECK(llama.back() == 7);
  // Only the first given: 3 on stage 0, the other 1 on stage 1.
  CHECK(first_last_stage_layers(4, 2, 3, std::nullopt, "f") == std::vector<int64_t>{3, 1});
  // The even result is the even split, {}.
  CHECK(first_last_stage_layers(8, 4, 2, 2, "f").empty());
  CHECK(input_error([] { first_last_stage_layers(10, 4, 3, 2, "--last-stage-layers"); }) ==
        "--last-stage-layers: the other 5 layers do not split evenly into 2 stages of at least "
        "one (10 layers)");
  CHECK(input_error([] { first_last_stage_layers(10, 4, 0, 3, "--first-stage-layers"); }) ==
        "--first-stage-layers: first stage layers must be between 1 and num_layers 10 (0)");
}

TEST_CASE("candidate_stage_splits: Megatron first/last splits when pp does not divide") {
  // 126 on 16: middle ceil(126/16) = 8, first + last = 126 - 14 * 8 = 14: 7/7 and 8/6.
  const auto splits = candidate_stage_splits(126, 16);
  REQUIRE(splits.size() == 2);
  CHECK(splits[0].front() == 7);
  CHECK(splits[0].back() == 7);
  CHECK(splits[1].front() == 8);
  CHECK(splits[1].back() == 6);
  // 70 on 12 (BLOOM-176B-like): middle 6, first + last 70 - 60 = 10: 5/5 and 6/4.
  CHECK(candidate_stage_splits(70, 12).size() == 2);
  // 70 on 8 (GLM-130B): middle 9, first + last 70 - 54 = 16: 8/8 (the paper's) and 9/7.
  CHECK(candidate_stage_splits(70, 8)[0] == std::vector<int64_t>{8, 9, 9, 9, 9, 9, 9, 8});
  // 32 on 4 divides: the even split, plus middle 9 and 32 - 18 = 14 at the ends: 7/7, 9/5.
  const auto divisible = candidate_stage_splits(32, 4);
  REQUIRE(divisible.size() == 3);
  CHECK(divisible[0].empty());
  CHECK(divisible[1] == std::vector<int64_t>{7, 9, 9, 7});
  CHECK(divisible[2] == std::vector<int64_t>{9, 9, 9, 5});
  // No split: 3 layers on 4 stages; the even split comes back for check_layout to refuse.
  CHECK(candidate_stage_splits(3, 4) == std::vector<std::vector<int64_t>>{{}});
}

TEST_CASE(
    "memory_shifted_splits: a layer off each of the first pp/4 fullest stages, onto the last") {
  // Llama 3's 7/8x14/7 on pp 16: k = 4, stages 1-4 lose one, stages 12-15 gain one.
  std::vector<int64_t> base(16, 8);
  base.front() = base.back() = 7;
  const auto shifted = memory_shifted_splits(126, 16, base);
  REQUIRE(shifted.size() == 1);
  CHECK(shifted[0] == std::vector<int64_t>{7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 8});
  CHECK(std::accumulate(shifted[0].begin(), shifted[0].end(), int64_t{0}) == 126);
  // The even split of 32 on 4: k = 1: 7/8/8/9; of 64 on 8: k = 2: 7/7/8/8/8/8/9/9.
  CHECK(memory_shifted_splits(32, 4, {}) == std::vector<std::vector<int64_t>>{{7, 8, 8, 9}});
  CHECK(memory_shifted_splits(64, 8, {}) ==
        std::vector<std::vector<int64_t>>{{7, 7, 8, 8, 8, 8, 9, 9}});
  // pp < 4 has none; an even split pp does not divide has none.
  CHECK(memory_shifted_splits(32, 2, {}).empty());
  CHECK(memory_shifted_splits(31, 4, {}).empty());
}

TEST_CASE("plan file: stage_layers written only when uneven, and read back") {
  Layout even = split_layout(2, {});
  CHECK_FALSE(layout_to_json(even).contains("stage_layers"));  // older files stay identical
  const Layout uneven = split_layout(2, {3, 1});
  const nlohmann::json json = layout_to_json(uneven);
  CHECK(json.at("stage_layers") == nlohmann::json::array({3, 1}));
  CHECK(layout_from_json(json, "p.json").stage_layers == std::vector<int64_t>{3, 1});
  // An even list is read as written (the plan file checks it against the model, then stores
  // the even split as {}).
  nlohmann::json listed = layout_to_json(even);
  listed["stage_layers"] = {2, 2};
  CHECK(layout_from_json(listed, "p.json").stage_layers == std::vector<int64_t>{2, 2});
  CHECK(canonical_stage_layers({2, 2}).empty());
  listed["stage_layers"] = "3,1";
  CHECK(input_error([&] { layout_from_json(listed, "p.json"); }) ==
        "p.json: layout: stage_layers: expected a non-empty array of layer counts (string)");
}

TEST_CASE("search: a pp that does not divide the layers plans with an uneven split") {
  // llama3-405b's 126 layers on pp 16 (Llama 3 paper, Sec. 3.3.2: first and last one short).
  const models::TransformerConfig model = models::load_model("llama3-405b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  SearchSpace space;
  space.num_gpus = 16384;
  space.global_batch = 2048;
  space.tp = 8;
  space.pp = 16;
  space.micro_batch = 1;
  const SearchResult result = search_layouts(model, cluster, space, {}, Objective::kTime, 1);
  REQUIRE(result.best.size() == 1);
  const Layout& best = result.best.front().layout;
  REQUIRE(best.stage_layers.size() == 16);
  int64_t sum = 0;
  for (int64_t n : best.stage_layers) {
    sum += n;
  }
  CHECK(sum == 126);
}

TEST_CASE("search: a fixed vpp is paired only with the splits it chunks, as the free search") {
  // 32 layers on pp 4 at vpp 4: the even 8x4 split (8 % 4 = 0) and the first/last splits whose
  // counts 4 divides; an uneven split such as 7/9/9/7 is left out, as the free search leaves it
  // out with every vpp (until session 37 a fixed vpp was costed on it in uneven chunks). Given
  // with its split (--stage-layers), the pair is taken as given.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  SearchSpace space;
  space.num_gpus = 32;
  space.global_batch = 64;
  space.tp = 8;
  space.pp = 4;
  space.vpp = 4;
  space.micro_batch = 1;
  space.schedule = ScheduleKind::kInterleaved;
  const SearchResult result = search_layouts(model, cluster, space, {}, Objective::kTime, 1000);
  REQUIRE_FALSE(result.best.empty());
  // Memory-shifted splits (7/8/8/9) come with the vpps of the balanced split they shift.
  const std::vector<std::vector<int64_t>> shifted =
      memory_shifted_splits(model.num_layers, 4, candidate_stage_splits(model.num_layers, 4)[0]);
  for (const PlanEstimate& plan : result.best) {
    CAPTURE(describe(plan.layout));
    const std::vector<int64_t>& split = plan.layout.stage_layers;
    CHECK((split_allows_vpp(split, model.num_layers, 4, 4) ||
           std::find(shifted.begin(), shifted.end(), split) != shifted.end()));
    CHECK(split != std::vector<int64_t>{7, 9, 9, 7});
  }
  space.stage_layers = std::vector<int64_t>{7, 9, 9, 7};
  const SearchResult given = search_layouts(model, cluster, space, {}, Objective::kTime, 1);
  REQUIRE(given.best.size() == 1);
  CHECK(given.best.front().layout.stage_layers == std::vector<int64_t>{7, 9, 9, 7});
}

}  // namespace meshplan::planner
