// Sliding-window attention in the planner: the (query, key) pair count worked out by hand, the
// attention FLOPs and FlashAttention time scaled by it, the unfused path's full s x s score
// matrix kept, context parallelism and Megatron-DeepSpeed refused, and a real plan of
// Mistral-7B-v0.1 at seq 32768 against the same model without its window.

#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "compute_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// tiny (s 32) with every layer windowed to `window_tokens` keys.
models::TransformerConfig tiny_windowed(int64_t window_tokens) {
  models::TransformerConfig model = models::load_model("tiny");
  model.sliding_window = window_tokens;
  return model;
}

// A dense layer with full causal attention, and one attending over the window.
constexpr LayerKind kFull{false, false};
constexpr LayerKind kWindowed{false, true};

std::string mistral_v01() {
  return std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/hf/Mistral-7B-v0.1.json";
}

TEST_CASE("attention_key_pairs: causal s (s + 1) / 2, windowed w (w + 1) / 2 + (s - w) w") {
  // s 8, w 3: queries 0, 1, 2 see 1, 2, 3 keys, the other 5 see 3 each: 6 + 15 = 21 of 36.
  CHECK(attention_key_pairs(8, 3) == 21.0);
  CHECK(attention_key_pairs(8, 0) == 36.0);
  // A window of the sequence or more is full causal attention.
  CHECK(attention_key_pairs(8, 8) == 36.0);
  CHECK(attention_key_pairs(8, 100) == 36.0);
  // w 1: each query sees itself only; w s - 1: only query 7's key 0 is dropped.
  CHECK(attention_key_pairs(8, 1) == 8.0);
  CHECK(attention_key_pairs(8, 7) == 35.0);
  // Mistral-7B-v0.1 at 32768: 4096 * 4097 / 2 + 28672 * 4096 = 125,831,168 of 536,887,296.
  CHECK(attention_key_pairs(32768, 4096) == 125'831'168.0);
  CHECK(attention_key_pairs(32768, 0) == 536'887'296.0);
}

TEST_CASE("attention FLOPs of a windowed model: the full ones times the pair ratio") {
  const models::TransformerConfig full = models::load_model("tiny");
  const models::TransformerConfig windowed = tiny_windowed(8);
  // s 32, w 8: 36 + 24 * 8 = 228 pairs of 528.
  const double ratio = 228.0 / 528.0;
  CHECK(attention_window_fraction(windowed) == doctest::Approx(ratio).epsilon(1e-12).scale(0));
  CHECK(attention_window_fraction(full) == 1.0);
  const LayerFlops f = layer_forward_flops(full, 32.0, kFull);
  const LayerFlops w = layer_forward_flops(windowed, 32.0, kWindowed);
  CHECK(w.attention == doctest::Approx(f.attention * ratio).epsilon(1e-12).scale(0));
  // The projections and the MLP do not change.
  CHECK(w.qkv == f.qkv);
  CHECK(w.output == f.output);
  CHECK(w.mlp == f.mlp);
  // A window covering the sequence changes nothing.
  CHECK(layer_forward_flops(tiny_windowed(32), 32.0, kWindowed).attention == f.attention);
  // A full-attention layer of a windowed model keeps the full count.
  CHECK(layer_forward_flops(windowed, 32.0, kFull).attention == f.attention);
  // MLA and MoE layers are scaled the same way.
  models::TransformerConfig mla = models::load_model("tiny-mla");
  const double mla_full = layer_forward_flops(mla, 32.0, kFull).attention;
  mla.sliding_window = 8;
  CHECK(layer_forward_flops(mla, 32.0, kWindowed).attention ==
        doctest::Approx(mla_full * attention_window_fraction(mla)).epsilon(1e-12).scale(0));
  models::TransformerConfig moe = models::load_model("tiny-moe");
  const double moe_full = layer_forward_flops(moe, 32.0, LayerKind{true, false}).attention;
  moe.sliding_window = 8;
  CHECK(layer_forward_flops(moe, 32.0, LayerKind{true, true}).attention ==
        doctest::Approx(moe_full * attention_window_fraction(moe)).epsilon(1e-12).scale(0));
}

TEST_CASE("flash attention's time shrinks with the pairs; the unfused path's does not") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const Layout layout = make_layout(1, 1, 1, 1, 1);
  const models::TransformerConfig full = models::load_model("tiny");
  const models::TransformerConfig windowed = tiny_windowed(8);
  PlanOptions flash;
  CHECK(attention_forward_seconds(windowed, cluster, layout, flash, true) ==
        doctest::Approx(attention_forward_seconds(full, cluster, layout, flash, false) * 228.0 /
                        528.0)
            .epsilon(1e-12)
            .scale(0));
  // Megatron-Core's unfused attention computes and masks the full s x s matrix.
  PlanOptions unfused;
  unfused.flash_attention = false;
  CHECK(attention_forward_seconds(windowed, cluster, layout, unfused, true) ==
        attention_forward_seconds(full, cluster, layout, unfused, false));
  // ... and stores it: the same activation bytes with and without the window.
  const PlanEstimate a = estimate_plan(full, cluster, layout, unfused);
  const PlanEstimate b = estimate_plan(windowed, cluster, layout, unfused);
  REQUIRE(a.feasible);
  REQUIRE(b.feasible);
  CHECK(a.stages[0].memory.activations_bytes == b.stages[0].memory.activations_bytes);
  // Its kernels execute the full square too, so the hardware FLOPs are a full-attention
  // model's; the model FLOPs (what MFU counts) keep the window's share.
  CHECK(b.hardware_flops_per_step == a.hardware_flops_per_step);
  CHECK(b.model_flops_per_step < a.model_flops_per_step);
  // FlashAttention skips the masked blocks: fewer hardware FLOPs, by the attention's share.
  const PlanEstimate a_flash = estimate_plan(full, cluster, layout, flash);
  const PlanEstimate b_flash = estimate_plan(windowed, cluster, layout, flash);
  REQUIRE(b_flash.feasible);
  const double attention_saved_per_sequence =
      layer_forward_flops(full, 32.0, kFull).attention -
      layer_forward_flops(windowed, 32.0, kWindowed).attention;
  // (Chunk FLOPs are whole numbers, truncated once forward and once backward.)
  CHECK(std::abs(a_flash.hardware_flops_per_step - b_flash.hardware_flops_per_step -
                 attention_saved_per_sequence * 3.0 *
                     static_cast<double>(full.num_layers * layout.global_batch)) <= 2.0);
}

TEST_CASE("a plan file carries the window and reads it back") {
  Plan plan;
  plan.model = tiny_windowed(8);
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.layout = make_layout(1, 1, 1, 1, 1);
  plan.num_gpus = 1;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("model").at("sliding_window") == 8);
  CHECK(plan_from_json(json, "p.json") == plan);
}

TEST_CASE("context parallelism with a window shorter than the sequence is refused") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout layout = make_layout(1, 1, 1, 1, 4);
  layout.cp = 2;
  const Validity v = check_cp_layout(tiny_windowed(8), layout);
  CHECK(v.code == "cp_window");
  CHECK(v.reason ==
        "cp > 1 with a sliding window shorter than seq_length is not modelled (ring attention's "
        "load balance under a window) (window 8 < seq_length 32, cp 2)");
  CHECK(estimate_plan(tiny_windowed(8), cluster, layout).rejection_code == "cp_window");
  // A window covering the sequence is full attention: cp runs.
  CHECK(check_cp_layout(tiny_windowed(32), layout).ok());
  // The search skips cp > 1 (--cp auto) and rejects a fixed --cp 2 by that rule.
  SearchSpace space;
  space.num_gpus = 4;
  space.global_batch = 4;
  space.search_cp = true;
  SearchResult result =
      search_layouts(tiny_windowed(8), cluster, space, PlanOptions{}, Objective::kTime, 100);
  REQUIRE_FALSE(result.best.empty());
  for (const PlanEstimate& e : result.best) {
    CHECK(e.layout.cp == 1);
  }
  space.search_cp = false;
  space.cp = 2;
  result = search_layouts(tiny_windowed(8), cluster, space, PlanOptions{}, Objective::kTime, 100);
  CHECK(result.best.empty());
  CHECK(result.rejections.at("cp_window") > 0);
  CHECK(result.example_reason.at("cp_window").find("cp > 1 with a sliding window") == 0);
}

TEST_CASE("framework deepspeed refuses a windowed model: Megatron-DeepSpeed has no window") {
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  const Layout layout = make_layout(1, 1, 1, 1, 1);
  const Validity v = check_framework(tiny_windowed(8), options, layout);
  CHECK(v.code == "framework");
  CHECK(v.reason.find("Megatron-DeepSpeed's ParallelAttention has no sliding window "
                      "(sliding_window 8 < seq_length 32)") != std::string::npos);
  CHECK(check_framework(tiny_windowed(32), options, layout).ok());
  options.framework = Framework::kMegatron;  // --window-size
  CHECK(check_framework(tiny_windowed(8), options, layout).ok());
}

TEST_CASE("Mistral-7B-v0.1 at seq 32768 plans, faster with its 4096 window than without") {
  models::TransformerConfig windowed = models::load_model(mistral_v01());
  windowed.seq_length = 32768;
  REQUIRE(windowed.is_windowed());
  models::TransformerConfig full = windowed;
  full.sliding_window = 0;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  SearchSpace space;
  space.num_gpus = 64;
  space.global_batch = 64;
  const SearchResult w = search_layouts(windowed, cluster, space, {}, Objective::kTime, 1);
  const SearchResult f = search_layouts(full, cluster, space, {}, Objective::kTime, 1);
  REQUIRE(w.best.size() == 1);
  REQUIRE(f.best.size() == 1);
  CHECK(w.best[0].step_time_s < f.best[0].step_time_s);
  // On the same layout the attention FLOPs fall by the pair ratio, 125,831,168 / 536,887,296.
  const PlanEstimate same = estimate_plan(full, cluster, w.best[0].layout);
  const double attention_full = layer_forward_flops(full, 32768.0, kFull).attention;
  const double attention_windowed = layer_forward_flops(windowed, 32768.0, kWindowed).attention;
  CHECK(attention_windowed / attention_full ==
        doctest::Approx(125'831'168.0 / 536'887'296.0).epsilon(1e-12).scale(0));
  CHECK(w.best[0].model_flops_per_step < same.model_flops_per_step);
  CHECK(w.best[0].step_time_s < same.step_time_s);
}

}  // namespace
}  // namespace meshplan::planner
