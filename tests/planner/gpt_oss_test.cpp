// gpt-oss's model parts in the planner (models.h: attention_sinks, router_bias, quick_geglu with
// glu_linear_offset and activation_clamp_value) against values worked out by hand.
//
// The case: tiny-moe (4 layers, the first dense; h 64, 4 heads, E 4 experts, SwiGLU) with
// gpt-oss's parts switched on one at a time.
//   Sinks: one logit per head, split with the heads over tp (Megatron-Core
//   DotProductAttention.softmax_offset, num_attention_heads / tp per rank): 4 / tp per layer.
//   Router bias: E = 4 per MoE layer, replicated over tp like the router weight.
//   Expert biases (mlp_bias): each local expert's 2 f_e + h, expert parameters.
//   The quick GeGLU unit, its offset and clamp are elementwise inside the gated activation: the
//   same parameters, FLOPs, stored bytes and time as SwiGLU's.

#include <doctest/doctest.h>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;
using test::tiny_moe;

TEST_CASE("attention sinks: num_attention_heads / tp per layer, sharded with the heads") {
  models::TransformerConfig model = tiny_moe();
  const LayerParameters plain = layer_parameters(model, 2, true, 1, 0);
  model.attention_sinks = true;
  const LayerParameters sinks = layer_parameters(model, 2, true, 1, 0);
  CHECK(sinks.sharded - plain.sharded == 4 / 2);
  CHECK(sinks.replicated == plain.replicated);
  CHECK(sinks.expert == plain.expert);
  CHECK(layer_parameters(model, 1, false).sharded -
            layer_parameters(tiny_moe(), 1, false).sharded ==
        4);
}

TEST_CASE("router bias: E replicated entries per MoE layer, none in a dense layer") {
  models::TransformerConfig model = tiny_moe();
  const LayerParameters plain = layer_parameters(model, 2, true, 2, 0);
  model.router_bias = true;
  const LayerParameters biased = layer_parameters(model, 2, true, 2, 0);
  CHECK(biased.replicated - plain.replicated == model.num_experts);
  CHECK(biased.sharded == plain.sharded);
  CHECK(layer_parameters(model, 2, false).replicated ==
        layer_parameters(tiny_moe(), 2, false).replicated);
}

TEST_CASE("expert biases (mlp_bias): each expert's 2 f_e + h are expert parameters") {
  // gpt-oss's gate_up_proj_bias and down_proj_bias: the E / ep local experts' fc1 (gated, 2 f_e
  // = 192) and fc2 (h = 64) biases, reduced over the expert data parallel group with their
  // weights; the shared experts' and the dense MLP's fc2 bias stay replicated.
  models::TransformerConfig model = tiny_moe();
  const LayerParameters plain = layer_parameters(model, 1, true, 2, 0);
  model.mlp_bias = true;
  const LayerParameters biased = layer_parameters(model, 1, true, 2, 0);
  CHECK(biased.expert - plain.expert == (4 / 2) * (2 * 96 + 64));
  CHECK(biased.replicated == plain.replicated);
  CHECK(biased.sharded == plain.sharded);
  model.num_shared_experts = 1;
  model.shared_expert_ffn_hidden_size = 96;
  models::TransformerConfig shared_plain = model;
  shared_plain.mlp_bias = false;
  CHECK(layer_parameters(model, 1, true, 2, 0).replicated -
            layer_parameters(shared_plain, 1, true, 2, 0).replicated ==
        64);
  CHECK(layer_parameters(model, 1, false).replicated -
            layer_parameters(tiny_moe(), 1, false).replicated ==
        64);
}

TEST_CASE("quick GeGLU with gpt-oss's offset and clamp costs exactly SwiGLU's step") {
  const models::TransformerConfig swiglu = tiny_moe();
  models::TransformerConfig quick = swiglu;
  quick.activation = models::Activation::kQuickGeglu;
  quick.glu_linear_offset = 1.0;
  quick.activation_clamp_value = 7.0;
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  Layout layout = make_layout(2, 1, 4, 1, 8);
  layout.sequence_parallel = true;  // Megatron-Core's MoE with tp > 1 needs it
  const PlanEstimate a = estimate_plan(swiglu, cluster, layout);
  const PlanEstimate b = estimate_plan(quick, cluster, layout);
  CAPTURE(a.rejection_code);
  REQUIRE(a.feasible);
  REQUIRE(b.feasible);
  CHECK(b.step_time_s == a.step_time_s);
  CHECK(b.stages.at(0).memory.total_bytes() == a.stages.at(0).memory.total_bytes());
  CHECK(b.stages.at(0).num_parameters == a.stages.at(0).num_parameters);
}

TEST_CASE("attention sinks are costed inside a fused attention kernel only") {
  models::TransformerConfig model = tiny_moe();
  model.attention_sinks = true;
  PlanOptions options;
  CHECK_NOTHROW(check_attention_sinks_kernel(model, options, "--flash-attention"));
  options.flash_attention = false;
  CHECK_THROWS_WITH_AS(
      check_attention_sinks_kernel(model, options, "--flash-attention"),
      "--flash-attention: off: model tiny-moe has attention_sinks, costed only inside a fused "
      "attention kernel (Transformer Engine's learnable softmax offset); plan it with flash "
      "attention on",
      InputError);
  CHECK_THROWS_AS(
      estimate_plan(model, models::load_cluster("local-cpu"), make_layout(1, 1, 1, 1, 1), options),
      InputError);
  model.attention_sinks = false;
  CHECK_NOTHROW(check_attention_sinks_kernel(model, options, "--flash-attention"));
}

TEST_CASE("framework deepspeed refuses attention sinks by name") {
  models::TransformerConfig model = models::load_model("tiny");
  model.attention_sinks = true;
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  const Validity validity = check_framework(model, options, make_layout(1, 1, 1, 1, 1));
  CHECK_FALSE(validity.ok());
  CHECK(validity.reason.rfind(
            "deepspeed cannot run this layout: Megatron-DeepSpeed's attention has no learnable "
            "softmax offset (attention_sinks) (",
            0) == 0);
  model.attention_sinks = false;
  CHECK(check_framework(model, options, make_layout(1, 1, 1, 1, 1)).ok());
}

}  // namespace
}  // namespace meshplan::planner
