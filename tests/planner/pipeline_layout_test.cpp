// Megatron-Core's --pipeline-model-parallel-layout (planner/pipeline_layout.cpp): the string's
// grammar and checks against pipeline_parallel_layer_layout.py's (d98e8a64), the split it
// gives, the layers each virtual stage then holds, and the plan file, by hand.

#include "meshplan/pipeline_layout.h"

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

// test::tiny_llama with `mtp_num_layers` MTP depths.
models::TransformerConfig small_model(int64_t num_layers, int64_t mtp_num_layers = 0) {
  models::TransformerConfig model = test::tiny_llama(num_layers);
  model.mtp_num_layers = mtp_num_layers;
  return model;
}

std::vector<int64_t> parsed(const models::TransformerConfig& model, int64_t pp,
                            const std::string& text) {
  return parse_pipeline_layout(model, pp, text, "--pipeline-layout");
}

std::string refused(const models::TransformerConfig& model, int64_t pp, const std::string& text) {
  return input_error([&] { parsed(model, pp, text); });
}

}  // namespace

TEST_CASE("parse_pipeline_layout: Megatron-Core's grammar, unrolled as parse_str_to_list does") {
  // DeepSeek-V3's Megatron-Bridge layout on pp 8 (vpp 4): "Et", 30 x "tt", "mL": 61 layers.
  const std::vector<int64_t> deepseek = parsed(small_model(61, 1), 8, "Et|(tt|)*30mL");
  REQUIRE(deepseek.size() == 32);
  CHECK(deepseek.front() == 1);
  CHECK(deepseek.back() == 0);
  CHECK(std::count(deepseek.begin(), deepseek.end(), 2) == 30);
  // "x*n" after "(...)*n"; commas are cosmetic; empty virtual stages count.
  CHECK(parsed(small_model(4), 2, "Et*3|,tL") == std::vector<int64_t>{3, 1});
  CHECK(parsed(small_model(4), 2, "E(t|)*3tL") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(parsed(small_model(4), 2, "E|t|t*3|L") == std::vector<int64_t>{0, 1, 3, 0});
  // "(t*2|)*2": the group is unrolled first, then each "t*2".
  CHECK(parsed(small_model(5), 2, "Et|(t*2|)*2L") == std::vector<int64_t>{1, 2, 2, 0});
}

TEST_CASE("parse_pipeline_layout: what Megatron-Core asserts and what meshplan does not model") {
  const models::TransformerConfig four = small_model(4);
  CHECK(refused(four, 3, "Et|t|t|tL") ==
        "--pipeline-layout: 4 virtual stages, not a multiple of the pipeline parallel size 3 "
        "(\"Et|t|t|tL\")");
  CHECK(refused(four, 2, "Et|t|x|tL") ==
        "--pipeline-layout: invalid layer character 'x' in virtual stage 2, known: E "
        "(embedding), t (decoder layer), m (MTP depth), L (loss) (\"Et|t|x|tL\")");
  CHECK(refused(four, 2, "tE|t|t|tL").find("'E' (the embedding) must open virtual stage 0") !=
        std::string::npos);
  CHECK(refused(four, 2, "|Et|t|ttL").find("'E' (the embedding) must open virtual stage 0") !=
        std::string::npos);
  CHECK(refused(four, 2, "tt|t|t|L").find("'E' (the embedding) must open") != std::string::npos);
  CHECK(refused(four, 2, "Et|t|tL|t").find("'L' (the loss) must close the last virtual stage") !=
        std::string::npos);
  CHECK(refused(four, 2, "Et|tL|t|tL").find("'L' (the loss) must close") != std::string::npos);
  CHECK(refused(four, 2, "Et|t|t|t").find("'L' (the loss) must close") != std::string::npos);
  CHECK(refused(four, 2, "Et|t|t|ttL") ==
        "--pipeline-layout: 5 decoder layers 't', the model has num_layers 4 "
        "(\"Et|t|t|ttL\")");
  CHECK(refused(four, 2, "Et|t|t|tmL") ==
        "--pipeline-layout: 1 MTP depths 'm', the model has mtp_num_layers 0 (\"Et|t|t|tmL\")");
  const models::TransformerConfig mtp = small_model(4, 1);
  CHECK(refused(mtp, 2, "Et|t|t|tL").find("0 MTP depths 'm', the model has mtp_num_layers 1") !=
        std::string::npos);
  CHECK(refused(mtp, 2, "Et|t|t|mtL").find("decoder layers 't' must come before the MTP") !=
        std::string::npos);
  // Megatron-Core's own example, "Ettt|(tt|)*29,m|L", puts the MTP depth on the second-last
  // rank ("standalone"), which meshplan does not cost.
  CHECK(refused(small_model(61, 1), 16, "Ettt|(tt|)*29,m|L") ==
        "--pipeline-layout: 'm' in virtual stage 30: meshplan places the MTP depths in the last "
        "virtual stage, with the loss (Megatron-Core's standalone MTP is not modelled) "
        "(\"Ettt|(tt|)*29,m|L\")");
  // A pipeline stage without a decoder layer (stage 1's chunks are both empty).
  CHECK(refused(four, 2, "Et||ttt|L") ==
        "--pipeline-layout: pipeline stage 1 holds no decoder layer; meshplan needs at least "
        "one per stage (\"Et||ttt|L\")");
  // A long string is quoted cut, so that the message stays a readable line.
  std::string long_text = "E";
  for (int i = 0; i < 999; ++i) {
    long_text += "t|";
  }
  CHECK(refused(four, 2, long_text + "L")
            .ends_with(
                "(\"Et|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|t|"
                "t...\" (2000 characters))"));
  // Absurd repeats are refused before they allocate.
  CHECK(refused(four, 2, "Et*999999999|t|t|tL").find("unrolls to more than 1000000 characters") !=
        std::string::npos);
  CHECK(refused(four, 2, "E(t|)*99999999999L").find("unrolls to more than") != std::string::npos);
}

TEST_CASE("pipeline_layout_split: canonical fields, so that flags that state a split agree") {
  const models::TransformerConfig four = small_model(4);
  // The even split at vpp 2: nothing but vpp.
  PipelineLayoutSplit even = pipeline_layout_split(four, 2, "Et|t|t|tL", "f");
  CHECK(even.vpp == 2);
  CHECK(even.stage_layers.empty());
  CHECK(even.virtual_stage_layers.empty());
  // 3/1 at vpp 1: a stage list, which --stage-layers 3,1 gives too.
  PipelineLayoutSplit stages = pipeline_layout_split(four, 2, "Ettt|tL", "f");
  CHECK(stages.vpp == 1);
  CHECK(stages.stage_layers == std::vector<int64_t>{3, 1});
  CHECK(stages.virtual_stage_layers.empty());
  // 3/1 at vpp 2 as the stage rule splits it (longer chunks last): s0c0 1, s1c0 0, s0c1 2,
  // s1c1 1, which --stage-layers 3,1 --vpp 2 gives.
  CHECK(pipeline_layout_split(four, 2, "Et||tt|tL", "f").virtual_stage_layers.empty());
  // The same sums otherwise chunked keep the list.
  PipelineLayoutSplit custom = pipeline_layout_split(four, 2, "Ett|t|t|L", "f");
  CHECK(custom.stage_layers == std::vector<int64_t>{3, 1});
  CHECK(custom.virtual_stage_layers == std::vector<int64_t>{2, 1, 1, 0});
  // Even sums over chunks the even split cannot give: 6 layers, pp 2, vpp 2.
  PipelineLayoutSplit uneven_chunks = pipeline_layout_split(small_model(6), 2, "Et|t|tt|ttL", "f");
  CHECK(uneven_chunks.stage_layers.empty());
  CHECK(uneven_chunks.virtual_stage_layers == std::vector<int64_t>{1, 1, 2, 2});
}

TEST_CASE("stage_layer_range: a layout string's virtual stages in order") {
  // DeepSeek-V3's "Et|(tt|)*30mL" on pp 8: virtual stage v = c * 8 + s holds layers
  // [2v - 1, 2v + 1) for 1 <= v <= 30; v 0 holds layer 0, v 31 (stage 7, chunk 3) none.
  const models::TransformerConfig model = small_model(61, 1);
  const PipelineLayoutSplit split = pipeline_layout_split(model, 8, "Et|(tt|)*30mL", "f");
  Layout layout = make_layout(1, 8, 1, 1, 8);
  layout.vpp = split.vpp;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.stage_layers = split.stage_layers;
  layout.virtual_stage_layers = split.virtual_stage_layers;
  CHECK(layout.stage_layers == std::vector<int64_t>{7, 8, 8, 8, 8, 8, 8, 6});
  CHECK(check_stage_layers(model, layout).empty());
  CHECK(stage_layer_range(model, layout, 0, 0).first == 0);
  CHECK(stage_layer_range(model, layout, 0, 0).end == 1);
  CHECK(stage_layer_range(model, layout, 3, 2).first == 2 * 19 - 1);  // v = 19
  CHECK(stage_layer_range(model, layout, 3, 2).count() == 2);
  CHECK(stage_layer_range(model, layout, 7, 3).count() == 0);
  CHECK(stage_layer_range(model, layout, 7, 3).first == 61);
  CHECK(stage_layer_count(model, layout, 7) == 6);
  CHECK(max_chunk_layer_count(model, layout, 0) == 2);
  // Written back in Megatron-Core's shorthand, and read again to the same counts.
  const std::string text = format_pipeline_layout(model, layout);
  CHECK(text == "Et|(t*2|)*30mL");
  CHECK(parse_pipeline_layout(model, 8, text, "f") == layout.virtual_stage_layers);
}

TEST_CASE("format_pipeline_layout: every split reads back to its own chunks") {
  // Stage lists, accounted splits and even splits over vpp 1-4 on pp 2-4.
  const models::TransformerConfig model = small_model(12, 2);
  for (int64_t pp : {2, 3, 4}) {
    for (int64_t vpp : {1, 2, 3, 4}) {
      for (const std::vector<int64_t>& stages :
           {std::vector<int64_t>{}, std::vector<int64_t>{5, 7}, std::vector<int64_t>{3, 5, 4},
            std::vector<int64_t>{2, 4, 4, 2}, std::vector<int64_t>{3, 4, 4, 1}}) {
        Layout layout = make_layout(1, pp, 1, 1, 12);
        layout.vpp = vpp;
        layout.stage_layers = stages;
        if ((!stages.empty() && static_cast<int64_t>(stages.size()) != pp) ||
            (stages.empty() && 12 % (pp * vpp) != 0)) {
          continue;
        }
        CAPTURE(describe(layout));
        const std::string text = format_pipeline_layout(model, layout);
        CAPTURE(text);
        const std::vector<int64_t> counts = parse_pipeline_layout(model, pp, text, "f");
        for (int64_t v = 0; v < pp * vpp; ++v) {
          CHECK(counts[static_cast<size_t>(v)] ==
                stage_layer_range(model, layout, v % pp, v / pp).count());
        }
        CHECK(text.substr(text.size() - 4) == "m*2L");
      }
    }
  }
}

TEST_CASE("a layout string's split: the cost model and the plan file") {
  const models::TransformerConfig model = small_model(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(1, 2, 1, 1, 8);
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  const PipelineLayoutSplit split = pipeline_layout_split(model, 2, "Ett|t|t|L", "f");
  layout.stage_layers = split.stage_layers;
  layout.virtual_stage_layers = split.virtual_stage_layers;
  // Chunk by chunk as the string says: stage 0 holds 2 then 1 layers, stage 1 1 then none.
  const PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.feasible);
  CHECK(estimate.stages[0].chunks[0].num_layers == 2);
  CHECK(estimate.stages[0].chunks[1].num_layers == 1);
  CHECK(estimate.stages[1].chunks[0].num_layers == 1);
  CHECK(estimate.stages[1].chunks[1].num_layers == 0);
  CHECK(estimate.stages[1].chunks[1].has_lm_head);
  // A list equal to the stage rule's chunks changes nothing.
  Layout stated = layout;
  stated.virtual_stage_layers = {1, 0, 2, 1};  // what {3, 1} at vpp 2 gives
  Layout rule = layout;
  rule.virtual_stage_layers.clear();
  CHECK(estimate_plan(model, cluster, stated).step_time_s ==
        estimate_plan(model, cluster, rule).step_time_s);
  CHECK(estimate_plan(model, cluster, stated).peak_memory_bytes ==
        estimate_plan(model, cluster, rule).peak_memory_bytes);
  // The plan file keeps it, and reads it back.
  PlanOptions options;  // Megatron-LM refuses interleaving at pp 2 without the p2p overlap
  options.framework = Framework::kMeshplan;
  const Plan plan{model, cluster, layout.num_gpus(), layout, options};
  const nlohmann::json json = plan_to_json(plan, nlohmann::json::object());
  CHECK(json.at("layout").at("virtual_stage_layers") == nlohmann::json({2, 1, 1, 0}));
  CHECK(plan_from_json(json, "p.json").layout.virtual_stage_layers == layout.virtual_stage_layers);
  // A list that contradicts the stage counts is named.
  nlohmann::json bad = json;
  bad["layout"]["virtual_stage_layers"] = {2, 1, 0, 1};
  CHECK(input_error([&] { plan_from_json(bad, "p.json"); }) ==
        "p.json: layout: virtual_stage_layers: stage 0 sums to 2 layers, its stage "
        "holds 3 (at least one) (2,1,0,1)");
  bad["layout"]["virtual_stage_layers"] = {2, 1, 1};
  CHECK(input_error([&] { plan_from_json(bad, "p.json"); }) ==
        "p.json: layout: virtual_stage_layers: 3 entries for pp 2 x vpp 2 (2,1,1)");
  bad["layout"]["virtual_stage_layers"] = "2,1,1,0";
  CHECK(input_error([&] { plan_from_json(bad, "p.json"); }) ==
        "p.json: layout: virtual_stage_layers: expected a non-empty array of layer counts "
        "(string)");
}

TEST_CASE("search_layouts: a fixed layout string's split reaches every layout") {
  const models::TransformerConfig model = small_model(4);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PipelineLayoutSplit split = pipeline_layout_split(model, 2, "Ett|t|t|L", "f");
  SearchSpace space;
  space.num_gpus = 8;
  space.global_batch = 16;
  space.pp = 2;
  space.vpp = split.vpp;
  space.schedule = ScheduleKind::kInterleaved;
  space.stage_layers = split.stage_layers;
  space.virtual_stage_layers = split.virtual_stage_layers;
  PlanOptions options;
  options.framework = Framework::kMeshplan;
  const SearchResult result = search_layouts(model, cluster, space, options, Objective::kTime, 100);
  REQUIRE_FALSE(result.best.empty());
  for (const PlanEstimate& plan : result.best) {
    CHECK(plan.layout.virtual_stage_layers == split.virtual_stage_layers);
    CHECK(plan.layout.vpp == 2);
  }
  space.vpp = 1;
  CHECK(input_error([&] { search_layouts(model, cluster, space, options, Objective::kTime, 1); }) ==
        "virtual_stage_layers: needs the split, pp and vpp fixed, 4 entries = pp x vpp (2,1,1,0)");
}

}  // namespace meshplan::planner
