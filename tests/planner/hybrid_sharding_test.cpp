// Hybrid sharding (HSDP, Layout::dp_shard; torchtitan's data_parallel_shard_degree x
// data_parallel_replicate_degree, FSDP2 fully_shard on a 2-D mesh) against values worked out by
// hand: the layout rules, the framework rule, model states sharded over the shard group only,
// the search's variants and the plan file.
//
// The case: llama3-8b (8,030,261,248 parameters) on dgx-h100 under framework fsdp, tp 1, pp 1,
// ZeRO 3, full recompute, micro-batch 1. FSDP2 keeps fp32 sharded parameters, fp32 gradients
// and Adam's two fp32 moments: 4 + 4 + 8 bytes per parameter, each over the shard group
// (memory.cpp bytes_per_parameter).

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// llama3-8b, tp 1 x pp 1 x dp `dp`, ZeRO 3, full recompute, one sequence per GPU.
Layout hybrid(int64_t dp, int64_t dp_shard) {
  Layout layout = make_layout(1, 1, dp, 1, dp);
  layout.zero = 3;
  layout.recompute = Recompute::kFull;
  set_dp_shard(layout, dp_shard);
  return layout;
}

PlanOptions fsdp() {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  return options;
}

}  // namespace

TEST_CASE("dp_shard: 0 spells dp; shard and replica sizes; describe names it") {
  Layout layout = hybrid(64, 64);
  CHECK(layout.dp_shard == 0);  // full sharding has one spelling
  CHECK_FALSE(hybrid_sharded(layout));
  CHECK(dp_shard_size(layout) == 64);
  CHECK(dp_replicate_size(layout) == 1);
  layout = hybrid(64, 8);
  CHECK(hybrid_sharded(layout));
  CHECK(dp_replicate_size(layout) == 8);
  CHECK(zero_shard_group_size(layout) == 8);
  CHECK(grad_group_size(layout) == 64);
  layout.cp = 2;  // torchtitan's dp_shard_cp: the shard group holds the cp ranks too
  CHECK(zero_shard_group_size(layout) == 16);
  CHECK(describe(hybrid(64, 8)) ==
        "tp=1 pp=1 dp=64 dp_shard=8 vpp=1 mb=1 recompute=full sp=off zero=3 schedule=1f1b");
}

TEST_CASE("dp_shard: layout rules name the field; fsdp at ZeRO 3, megatron at ZeRO 1 run it") {
  CHECK(check_hybrid_sharding(hybrid(64, 8)).ok());
  CHECK(check_hybrid_sharding(hybrid(64, 64)).ok());
  Validity v = check_hybrid_sharding(hybrid(64, 3));
  CHECK(v.code == "dp_shard");
  CHECK(v.reason == "dp_shard must divide dp (64 % 3)");
  Layout zero1 = hybrid(64, 8);
  zero1.zero = 1;  // Megatron's distributed optimizer instances
  CHECK(check_hybrid_sharding(zero1).ok());
  Layout zero2 = hybrid(64, 8);
  zero2.zero = 2;
  v = check_hybrid_sharding(zero2);
  CHECK(v.code == "dp_shard");
  CHECK(v.reason ==
        "hybrid sharding (dp_shard 8 of dp 64) shards ZeRO-3's states (PyTorch FSDP2) "
        "or ZeRO-1's optimizer (Megatron's distributed optimizer instances); it needs "
        "zero 1 or 3 (zero 2)");
  v = check_hybrid_sharding(hybrid(64, 1));
  CHECK(v.reason ==
        "a shard group of dp_shard*cp = 1 shards nothing: use zero 0 (DDP) for plain "
        "replication (dp_shard 1)");
  Layout placed = hybrid(64, 8);
  placed.placement = Placement::kTpPpDp;
  CHECK(check_hybrid_sharding(placed).code == "dp_shard");
  // check_layout applies them.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  CHECK(check_layout(model, cluster, 64, hybrid(64, 3)).code == "dp_shard");
  CHECK(check_layout(model, cluster, 64, hybrid(64, 8)).ok());
  // Not for mixture-of-experts models: their expert data-parallel instances are not modelled.
  Layout moe = hybrid(8, 2);
  moe.zero = 1;
  moe.global_batch = 8;
  CHECK(check_layout(models::load_model("mixtral-8x7b"), cluster, 8, moe).code == "moe_dp_shard");
  // FSDP2's 2-D mesh at ZeRO 3 and Megatron-Core's distributed optimizer instances at ZeRO 1.
  CHECK(check_framework(Framework::kFsdp, hybrid(64, 8), true).ok());
  CHECK(check_framework(Framework::kMegatron, zero1, true).ok());
  const std::string why =
      "hybrid sharding (dp_shard < dp) is modelled as PyTorch FSDP2 runs it at "
      "ZeRO 3 and as Megatron-Core's distributed optimizer instances at ZeRO 1 "
      "only";
  const std::vector<std::pair<Framework, Layout>> refused = {{Framework::kMegatron, hybrid(64, 8)},
                                                             {Framework::kFsdp, zero1},
                                                             {Framework::kDeepSpeed, hybrid(64, 8)},
                                                             {Framework::kDeepSpeed, zero1},
                                                             {Framework::kMeshplan, zero1}};
  for (const auto& entry : refused) {  // clang 14: no bindings in CHECK's lambda
    CAPTURE(to_string(entry.first));
    v = check_framework(entry.first, entry.second, true);
    CHECK(v.code == "framework");
    CHECK(v.reason.find(why) != std::string::npos);
  }
}

TEST_CASE("dp_shard: model states are sharded over the shard group, not the replicas") {
  // 8,030,261,248 parameters padded to a multiple of the shard group: over 8 ranks
  // 1,003,782,656 each, so the 8-byte Adam moments are 8,030,261,248 bytes on every rank of
  // dp 64 as 8 replicas of 8, exactly as on dp 8 fully sharded; fully sharded over 64,
  // ceil(8,030,261,248 / 64) = 125,472,832 parameters, 1,003,782,656 bytes.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanEstimate hybrid_64 = estimate_plan(model, cluster, hybrid(64, 8), fsdp());
  const PlanEstimate full_8 = estimate_plan(model, cluster, hybrid(8, 8), fsdp());
  const PlanEstimate full_64 = estimate_plan(model, cluster, hybrid(64, 64), fsdp());
  REQUIRE(hybrid_64.feasible);
  CHECK(hybrid_64.stages[0].memory.optimizer_bytes == 8 * int64_t{1'003'782'656});
  CHECK(full_8.stages[0].memory.optimizer_bytes == hybrid_64.stages[0].memory.optimizer_bytes);
  CHECK(full_64.stages[0].memory.optimizer_bytes == 8 * int64_t{125'472'832});
  // Every rank still reduces all 64 ranks' gradients: the batch is split over dp, not dp_shard.
  CHECK(hybrid_64.layout.num_micro_batches() == full_64.layout.num_micro_batches());
}

TEST_CASE("dp_shard: the fsdp search tries each shard group; a fixed one is held to the rules") {
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  SearchSpace space;
  space.num_gpus = 64;
  space.global_batch = 64;
  space.tp = 1;
  space.pp = 1;
  space.micro_batch = 1;
  space.zero = 3;
  space.recompute = Recompute::kFull;
  // Full sharding and the proper divisors 2, 4, 8, 16, 32 of dp 64: six layouts.
  CHECK(search_layouts(model, cluster, space, fsdp(), Objective::kTime, 10).num_evaluated == 6);
  CHECK(search_layouts(model, cluster, space, PlanOptions{}, Objective::kTime, 10).num_evaluated ==
        1);
  space.dp_shard = 8;
  const SearchResult fixed = search_layouts(model, cluster, space, fsdp(), Objective::kTime, 10);
  REQUIRE(fixed.best.size() == 1);
  CHECK(dp_shard_size(fixed.best[0].layout) == 8);
  CHECK_THROWS_WITH_AS(search_layouts(model, cluster, space, PlanOptions{}, Objective::kTime, 10),
                       doctest::Contains("--framework: megatron cannot run this layout: hybrid "
                                         "sharding (dp_shard < dp) is modelled as PyTorch FSDP2 "
                                         "runs it at ZeRO 3"),
                       FrameworkRefusal);
}

TEST_CASE("dp_shard: the plan file stores it only under hybrid sharding and checks it") {
  Plan plan;
  plan.model = models::load_model("llama3-8b");
  plan.cluster = models::load_cluster("dgx-h100");
  plan.num_gpus = 64;
  plan.layout = hybrid(64, 8);
  plan.options = fsdp();
  nlohmann::json json = plan_to_json(plan, nlohmann::json::object());
  CHECK(json.at("layout").at("dp_shard") == 8);
  CHECK(plan_from_json(json, "p.json") == plan);
  plan.layout = hybrid(64, 64);
  CHECK_FALSE(plan_to_json(plan, nlohmann::json::object()).at("layout").contains("dp_shard"));
  json["layout"]["dp_shard"] = 3;
  CHECK_THROWS_WITH_AS(plan_from_json(json, "p.json"),
                       doctest::Contains("dp_shard must divide dp (64 % 3)"), InputError);
}

}  // namespace meshplan::planner
