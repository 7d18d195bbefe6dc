// overlap_moe_expert_parallel_comm (Megatron-Core's EP all-to-all overlap, "combined 1F1B";
// docs/research/ep-a2a-overlap.md): the two-stream replay of one merged layer pair against hand
// traces, the pp 1 step (m - 1 merged pairs), the plan file and the refusals.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "model_shape.h"

namespace meshplan::planner {
namespace {

EpOverlapLayer moe_layer(double a2a_seconds) {
  EpOverlapLayer layer;
  layer.attention_forward_seconds = 3;
  layer.mlp_forward_seconds = 2;
  layer.attention_backward_seconds = 6;
  layer.mlp_backward_seconds = 4;
  layer.dispatch_seconds = a2a_seconds;
  layer.combine_seconds = a2a_seconds;
  return layer;
}

Plan tiny_moe_plan() {
  Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.ep = 2;
  plan.layout.global_batch = 8;  // micro-batch 1, dp 2: m = 4
  plan.num_gpus = 2;
  plan.options.framework = Framework::kMegatron;
  return plan;
}

}  // namespace

TEST_CASE("ep overlap: short all-to-alls hide entirely behind the other micro-batch's compute") {
  // Node by node (comm: combine_bwd, dispatch_fwd, dispatch_bwd, combine_fwd; comp: attn_fwd,
  // mlp_bwd, mlp_fwd, attn_bwd), a2a 1: combine_bwd [0,1], attn_fwd [0,3], mlp_bwd [3,7],
  // dispatch_fwd [3,4], dispatch_bwd [7,8], mlp_fwd [7,9], combine_fwd [9,10], attn_bwd [9,15]:
  // the compute stream's 3 + 4 + 2 + 6 = 15, against 19 in sequence.
  const std::vector<EpOverlapLayer> one{moe_layer(1)};
  CHECK(ep_overlap_layers_seconds(one, one) == 15.0);
}

TEST_CASE("ep overlap: long all-to-alls leave the communication stream on the critical path") {
  // a2a 5: combine_bwd [0,5], attn_fwd [0,3], mlp_bwd [5,9], dispatch_fwd [5,10], dispatch_bwd
  // [10,15], mlp_fwd [10,12], combine_fwd [15,20], attn_bwd [15,21]: 21, against 35.
  const std::vector<EpOverlapLayer> one{moe_layer(5)};
  CHECK(ep_overlap_layers_seconds(one, one) == 21.0);
}

TEST_CASE("ep overlap: a side without layers runs the other's nodes in sequence") {
  const std::vector<EpOverlapLayer> one{moe_layer(1)};
  // Forward alone: 3 + 1 + 2 + 1; backward alone: 1 + 4 + 1 + 6.
  CHECK(ep_overlap_layers_seconds(one, {}) == 7.0);
  CHECK(ep_overlap_layers_seconds({}, one) == 12.0);
  // A dense layer has no all-to-all: beside an MoE layer's backward it only adds compute.
  EpOverlapLayer dense;
  dense.attention_forward_seconds = 5;
  dense.attention_backward_seconds = 10;
  // combine_bwd [0,1], dense fwd [0,5], mlp_bwd [5,9], dispatch_bwd [9,10], attn_bwd [10,16].
  CHECK(ep_overlap_layers_seconds({dense}, one) == 16.0);
}

TEST_CASE("ep overlap: pp 1 step saves m - 1 merged pairs, and off stays as before") {
  Plan plan = tiny_moe_plan();
  const PlanEstimate off = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(off.feasible);
  CHECK(off.stages.at(0).chunks.at(0).ep_overlap_saved_seconds == 0.0);
  plan.options.overlap_moe_expert_parallel_comm = true;
  const PlanEstimate on = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(on.feasible);
  const ChunkCost& chunk = on.stages.at(0).chunks.at(0);
  const double saved = chunk.ep_overlap_saved_seconds;
  CHECK(saved > 0);
  // At most every backward and forward all-to-all of the pair (3 MoE layers x 4, token count
  // gathers aside), and never more than the pair's compute could hide.
  const double a2a = moe_all_to_all_seconds(plan.model, plan.cluster, plan.layout, 0);
  CHECK(saved <= 3 * 4 * a2a * (1 + 1e-12));
  const ChunkCost& chunk_off = off.stages.at(0).chunks.at(0);
  CHECK(chunk.forward_seconds() == chunk_off.forward_seconds());
  CHECK(chunk.backward_seconds() == chunk_off.backward_seconds());
  // m = 4: the first forward and the last backward alone, 3 merged pairs.
  CHECK(off.step_time_s - on.step_time_s == doctest::Approx(3.0 * saved).epsilon(1e-12).scale(0));
}

TEST_CASE("ep overlap: stored only when on, read back, refused where Megatron refuses it") {
  Plan plan = tiny_moe_plan();
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("overlap_moe_expert_parallel_comm"));
  plan.options.overlap_moe_expert_parallel_comm = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("overlap_moe_expert_parallel_comm") == true);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.overlap_moe_expert_parallel_comm);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["overlap_moe_expert_parallel_comm"] = "on";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: overlap_moe_expert_parallel_comm"),
                       InputError);

  const auto code = [](const Plan& p) {
    return check_moe_a2a_overlap(p.model, p.layout, p.options).code;
  };
  CHECK(code(plan).empty());
  Plan fsdp = plan;
  fsdp.options.framework = Framework::kFsdp;
  CHECK(code(fsdp) == "moe_a2a_overlap");
  CHECK(check_moe_a2a_overlap(fsdp.model, fsdp.layout, fsdp.options)
            .reason.find("overlap_moe_expert_parallel_comm: framework fsdp") == 0);
  Plan ep1 = plan;
  ep1.layout.ep = 1;
  CHECK(code(ep1) == "moe_a2a_overlap");
  Plan dense = plan;
  dense.model = models::load_model("tiny");
  dense.layout.ep = 1;
  CHECK(code(dense) == "moe_a2a_overlap");
  Plan full = plan;
  full.layout.recompute = Recompute::kFull;
  CHECK(code(full) == "moe_a2a_overlap");
  Plan moe_module = plan;
  moe_module.layout.recompute = Recompute::kSelective;
  moe_module.layout.recompute_modules = kRecomputeMoe;
  CHECK(code(moe_module) == "moe_a2a_overlap");
  Plan pp2 = plan;
  pp2.layout.pp = 2;
  CHECK(code(pp2) == "moe_a2a_overlap");
  Plan zero2 = plan;
  zero2.layout.zero = 2;
  CHECK(code(zero2) == "moe_a2a_overlap");
  // The estimate reports the refusal as a rejection naming the option.
  const PlanEstimate refused = estimate_plan(full.model, full.cluster, full.layout, full.options);
  CHECK_FALSE(refused.feasible);
  CHECK(refused.rejection_code == "moe_a2a_overlap");
  // A plan file stating it with full recompute is an error naming the option.
  nlohmann::json full_json = json;
  full_json["layout"]["recompute"] = "full";
  CHECK_THROWS_WITH_AS(plan_from_json(full_json, "p.json"),
                       doctest::Contains("overlap_moe_expert_parallel_comm: recompute full"),
                       InputError);
}

}  // namespace meshplan::planner
