// planner/deepspeed_partition.cpp: DeepSpeed's PipelineModule stage splits. Expected splits are
// DeepSpeed 0.19.6's own deepspeed/runtime/utils.py partition_balanced, run with Python and
// NumPy on the same layer-spec weights (embedding, layers, final norm, LM head; parameters per
// tensor-parallel rank, or 1 per matched spec for the type: methods), and GLM-130B's published
// split.

#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/search.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using Split = std::vector<int64_t>;

// GLM-130B (Zeng et al. 2023, Sec. 3 and Table 11): 70 layers, h 12288, 96 heads, GeGLU FFN
// 32768 (recorded as swiglu: the same three matrices), LayerNorm, vocabulary 150,528, tied.
models::TransformerConfig glm_130b() {
  models::TransformerConfig model = test::square_model("glm-130b");
  model.num_layers = 70;
  model.hidden_size = 12288;
  model.num_attention_heads = 96;
  model.num_kv_heads = 96;
  model.head_dim = 128;
  model.ffn_hidden_size = 32768;
  model.vocab_size = 150528;
  model.activation = models::Activation::kSwiglu;
  model.tied_embeddings = true;
  return model;
}

TEST_CASE("DeepSpeed partition_method parameters gives GLM-130B's published split") {
  // Sec. 3: "we remove one layer from the first and the last stage": 8, 9 x 6, 8 on pp 8, tp 4.
  // The embedding (150528 / 4 x 12288 = 462M per rank) weighs about one layer (453M per rank),
  // as does the tied LM head on the last stage.
  const models::TransformerConfig model = glm_130b();
  CHECK(deepspeed_stage_layers(model, 4, 8, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{8, 9, 9, 9, 9, 9, 9, 8});
  // type:transformer balances layer counts only; partition_balanced's ties keep the last split
  // point, so the short stages come last.
  CHECK(deepspeed_stage_layers(model, 4, 8, DeepSpeedPartition::kTypeTransformer, PlanOptions{}) ==
        Split{9, 9, 9, 9, 9, 9, 8, 8});
  // What GLM-130B's training code passed (Megatron-DeepSpeed --pp-partition-method
  // 'type:transformer|embedding'): 70 layers and the two tied embeddings, 9 units per stage.
  CHECK(deepspeed_stage_layers(model, 4, 8, DeepSpeedPartition::kTypeTransformerEmbedding,
                               PlanOptions{}) == Split{8, 9, 9, 9, 9, 9, 9, 8});
}

TEST_CASE("DeepSpeed splits of Llama 3 405B on pp 16 and of tiny on pp 4") {
  const models::TransformerConfig llama = models::load_model("llama3-405b");
  CHECK(deepspeed_stage_layers(llama, 8, 16, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7});
  CHECK(deepspeed_stage_layers(llama, 8, 16, DeepSpeedPartition::kTypeTransformer, PlanOptions{}) ==
        Split{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7, 7});
  // Untied: only the input embedding is an embedding spec (127 units).
  CHECK(deepspeed_stage_layers(llama, 8, 16, DeepSpeedPartition::kTypeTransformerEmbedding,
                               PlanOptions{}) ==
        Split{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7});
  // Tied, 32 layers on pp 4: 34 units, 9 + 9 + 8 + 8 with both embeddings counted.
  models::TransformerConfig tied = llama;
  tied.num_layers = 32;
  tied.tied_embeddings = true;
  CHECK(deepspeed_stage_layers(tied, 8, 4, DeepSpeedPartition::kTypeTransformerEmbedding,
                               PlanOptions{}) == Split{8, 9, 8, 7});
  models::TransformerConfig tiny = models::load_model("tiny");
  tiny.num_layers = 10;
  CHECK(deepspeed_stage_layers(tiny, 1, 4, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{2, 3, 3, 2});
  CHECK(deepspeed_stage_layers(tiny, 1, 4, DeepSpeedPartition::kTypeTransformer, PlanOptions{}) ==
        Split{3, 3, 2, 2});
  // Layers pp divides: type:transformer is the even split ({} once canonical).
  CHECK(deepspeed_stage_splits(models::load_model("tiny"), 1, 2, PlanOptions{}).front().empty());
}

TEST_CASE("DeepSpeed's parameters split follows an MoE layer pattern, layer by layer") {
  // tiny-moe at 10 layers, tp 1. Per rank: attention q 64 x 64, k and v 64 x 32 each, o 64 x 64
  // = 12,288, two RMSNorms 128; a dense layer adds the SwiGLU MLP 3 x 64 x 176 = 33,792
  // (46,208), an MoE layer 4 experts of 3 x 64 x 96 and the router 64 x 4 (86,400); embedding
  // and LM head 256 x 64 = 16,384 each, final norm 64. partition_balanced (DeepSpeed 0.19.6, run
  // with NumPy on those weights) gives the splits below.
  models::TransformerConfig model = models::load_model("tiny-moe");
  model.num_layers = 10;
  model.first_dense_layers = 0;
  model.moe_layers = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0};  // MoE first: the heavy layers lead
  CHECK(deepspeed_stage_layers(model, 1, 4, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{2, 2, 3, 3});
  CHECK(deepspeed_stage_layers(model, 1, 3, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{2, 3, 5});
  // The same five MoE layers after five dense ones (a dense prefix) split the other way round.
  model.moe_layers.clear();
  model.first_dense_layers = 5;
  CHECK(deepspeed_stage_layers(model, 1, 4, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{3, 3, 2, 2});
  CHECK(deepspeed_stage_layers(model, 1, 3, DeepSpeedPartition::kParameters, PlanOptions{}) ==
        Split{5, 3, 2});
  // type:transformer counts layers, whatever they hold.
  model.first_dense_layers = 0;
  model.moe_layers = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
  CHECK(deepspeed_stage_layers(model, 1, 4, DeepSpeedPartition::kTypeTransformer, PlanOptions{}) ==
        Split{3, 3, 2, 2});
}

TEST_CASE("deepspeed runs only the splits its PipelineModule builds") {
  const models::TransformerConfig model = glm_130b();
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  Layout layout = test::make_layout(4, 8, 24, 1, 4224);
  layout.recompute = Recompute::kFull;
  layout.stage_layers = {8, 9, 9, 9, 9, 9, 9, 8};
  CHECK(check_framework(model, options, layout).ok());
  CHECK(deepspeed_partition_of(model, layout, PlanOptions{}) == DeepSpeedPartition::kParameters);
  layout.stage_layers = {9, 9, 9, 9, 9, 9, 8, 8};
  CHECK(deepspeed_partition_of(model, layout, PlanOptions{}) ==
        DeepSpeedPartition::kTypeTransformer);
  layout.stage_layers = {8, 8, 9, 9, 9, 9, 9, 9};
  const Validity refused = check_framework(model, options, layout);
  CHECK(refused.code == "framework");
  CHECK(refused.reason.starts_with(
      "deepspeed cannot run this layout: its PipelineModule splits layers by partition_method, "
      "and none of type:transformer (9,9,9,9,9,9,8,8), parameters (8,9,9,9,9,9,9,8), "
      "type:transformer|embedding (8,9,9,9,9,9,9,8) gives 8,8,9,9,9,9,9,9"));
  // Megatron takes any list.
  options.framework = Framework::kMegatron;
  CHECK(check_framework(model, options, layout).ok());
}

TEST_CASE("a deepspeed search tries exactly DeepSpeed's splits") {
  const models::TransformerConfig model = glm_130b();
  SearchSpace space;
  space.num_gpus = 768;
  space.global_batch = 4224;
  space.tp = 4;
  space.pp = 8;
  space.micro_batch = 1;
  space.recompute = Recompute::kFull;
  space.zero = 1;
  space.sequence_parallel = false;
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  options.flash_attention = false;
  const SearchResult result = search_layouts(model, models::load_cluster("dgx-a100-80gb"), space,
                                             options, Objective::kTime, 10);
  // Each split under 1F1B and under Megatron-DeepSpeed's ZB-H1.
  REQUIRE(result.best.size() == 4);
  std::vector<std::pair<Split, ScheduleKind>> found;
  for (const PlanEstimate& e : result.best) {
    found.emplace_back(e.layout.stage_layers, e.layout.schedule);
  }
  for (const Split& split : {Split{8, 9, 9, 9, 9, 9, 9, 8}, Split{9, 9, 9, 9, 9, 9, 8, 8}}) {
    for (ScheduleKind schedule : {ScheduleKind::kOneFOneB, ScheduleKind::kZbH1}) {
      CHECK(std::find(found.begin(), found.end(), std::make_pair(split, schedule)) != found.end());
    }
  }
}

}  // namespace
}  // namespace meshplan::planner
