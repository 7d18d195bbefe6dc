// Multi-token prediction (DeepSeek-V3 report Sec. 2.2; Megatron-Core --mtp-num-layers,
// transformer/multi_token_prediction.py): the last pipeline stage's cost, memory and parameters
// rise by exactly the MTP terms, worked out here from the planner's per-piece functions.
//
// The case: tiny-moe (h 64, 4 layers, the first dense, the last an MoE layer of 4 experts,
// V 256, s 32) with mtp_num_layers 1, on dgx-h100 (bf16, e = 2), tp 2, pp 2 (2 layers a stage),
// dp 1, micro-batch 1, sequence parallelism: T = 32 tokens a micro-batch (T / t = 16 on a
// rank between the tensor-parallel regions), V / t = 128 vocab rows a rank. The MTP depth's layer
// is the last layer's kind: MoE, full attention. Its layer terms are measured as the same chunk
// with one more layer of that kind (5 layers, split 2,3), everything else closed form.

#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "loss_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

models::TransformerConfig tiny_mtp(int64_t depths) {
  models::TransformerConfig model = models::load_model("tiny-moe");
  model.mtp_num_layers = depths;
  return model;
}

Layout tp2_pp2() {
  Layout layout = test::make_layout(2, 2, 1, 1, 4);
  layout.sequence_parallel = true;  // Megatron-LM's MoE with tp > 1 needs it
  return layout;
}

constexpr double kT = 32.0;      // tokens a micro-batch
constexpr double kH = 64.0;      // hidden
constexpr double kE = 2.0;       // bf16
constexpr double kRows = 128.0;  // padded V / tp
constexpr double kTp = 2.0;
constexpr double kSeq = kT / kTp;  // sequence-parallel tokens a rank

}  // namespace

TEST_CASE("mtp: the depth's layer is the decoder's last layer's kind") {
  const models::TransformerConfig model = tiny_mtp(1);
  CHECK(model.mtp_layer_is_moe());
  CHECK(mtp_layer_kind(model) == LayerKind{true, false});
  models::TransformerConfig dense = models::load_model("tiny");
  dense.mtp_num_layers = 1;
  CHECK_FALSE(dense.mtp_layer_is_moe());
  CHECK(mtp_layer_kind(dense) == LayerKind{false, false});
}

TEST_CASE("mtp: the last chunk's cost rises by one layer, embedding, eh_proj and one more head") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanOptions options;
  const Layout layout = tp2_pp2();
  const models::TransformerConfig base_model = tiny_mtp(0);
  const models::TransformerConfig model = tiny_mtp(1);
  REQUIRE(check_layout(model, cluster, layout.num_gpus(), layout).ok());
  const ChunkCost base = chunk_cost(base_model, cluster, layout, options, 1, 0);
  const ChunkCost mtp = chunk_cost(model, cluster, layout, options, 1, 0);
  // The first stage does not change.
  CHECK(chunk_cost(model, cluster, layout, options, 0, 0).forward_seconds() ==
        chunk_cost(base_model, cluster, layout, options, 0, 0).forward_seconds());

  // One more MoE layer on the same chunk: a 5-layer model split 2,3.
  models::TransformerConfig five = base_model;
  five.num_layers = 5;
  Layout five_layout = layout;
  five_layout.stage_layers = {2, 3};
  const ChunkCost plus_layer = chunk_cost(five, cluster, five_layout, options, 1, 0);
  REQUIRE(plus_layer.num_moe_layers == base.num_moe_layers + 1);

  const double eh_proj = gemm_seconds(cluster, kT, kH / kTp, 2.0 * kH);
  const double head = gemm_seconds(cluster, kT, kRows, kH);
  const PassBytes embedding = embedding_bytes(model, cluster, layout, options);
  const PassBytes loss = loss_bytes_per_logit(kE, options);
  // Fused norms: read and write forward (2e), twice that backward; enorm and hnorm, then the
  // concatenation written and read (4 e T h each way), then final_layernorm with the head.
  const double forward =
      memory_seconds(cluster, embedding.forward) + eh_proj +
      memory_seconds(cluster, 2.0 * 2.0 * kE * kSeq * kH + 4.0 * kE * kSeq * kH) + head +
      memory_seconds(cluster, 2.0 * kE * kSeq * kH + loss.forward * kT * kRows);
  CHECK(mtp.forward_compute_seconds - base.forward_compute_seconds ==
        doctest::Approx(plus_layer.forward_compute_seconds - base.forward_compute_seconds + forward)
            .epsilon(1e-9)
            .scale(0));
  const double input_backward =
      eh_proj + memory_seconds(cluster, 2.0 * 4.0 * kE * kSeq * kH + 4.0 * kE * kSeq * kH) + head +
      memory_seconds(cluster, 4.0 * kE * kSeq * kH + loss.backward * kT * kRows);
  CHECK(mtp.backward_input_compute_seconds - base.backward_input_compute_seconds ==
        doctest::Approx(plus_layer.backward_input_compute_seconds -
                        base.backward_input_compute_seconds + input_backward)
            .epsilon(1e-9)
            .scale(0));
  // Tensor parallelism with sequence parallelism, in hidden all-reduces (an all-gather or a
  // reduce-scatter of T h e is half of one): forward the embedding's reduce-scatter (1/2),
  // eh_proj's 2h-wide input all-gather (1) and output all-gather (1/2), the head's input
  // all-gather (1/2) and the loss's three fp32 all-reduces; backward the embedding's output-
  // gradient all-gather (1/2), eh_proj's input-gradient reduce-scatter (1) and the
  // scatter_to_sequence_parallel_region's all-gather (1/2), the head's input gradient (1).
  const double hidden_all_reduce = collective_seconds(cluster, CollectiveKind::kAllReduce,
                                                      static_cast<int64_t>(kT * kH * kE), 2, 1);
  const double loss_all_reduce =
      collective_seconds(cluster, CollectiveKind::kAllReduce, static_cast<int64_t>(kT * 4), 2, 1);
  CHECK(mtp.forward_tp_comm_seconds - base.forward_tp_comm_seconds ==
        doctest::Approx(plus_layer.forward_tp_comm_seconds - base.forward_tp_comm_seconds +
                        2.5 * hidden_all_reduce + 3.0 * loss_all_reduce)
            .epsilon(1e-9)
            .scale(0));
  CHECK(mtp.backward_tp_comm_seconds - base.backward_tp_comm_seconds ==
        doctest::Approx(plus_layer.backward_tp_comm_seconds - base.backward_tp_comm_seconds +
                        3.0 * hidden_all_reduce)
            .epsilon(1e-9)
            .scale(0));
  // The MoE layer's all-to-alls come with it.
  CHECK(std::abs(mtp.forward_ep_comm_seconds - plus_layer.forward_ep_comm_seconds) <=
        1e-12 * plus_layer.forward_ep_comm_seconds);
  // Executed FLOPs per rank: the layer, eh_proj 2 T (2h) h / t and the head 2 T h V / t.
  const double flops = static_cast<double>(plus_layer.forward_flops - base.forward_flops) +
                       2.0 * kT * 2.0 * kH * kH / kTp + 2.0 * kT * kH * 256.0 / kTp;
  CHECK(static_cast<double>(mtp.forward_flops - base.forward_flops) ==
        doctest::Approx(flops).epsilon(1e-6).scale(0));
}

TEST_CASE("mtp: the depth's MoE layer brings its all-to-alls (ep 2)") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = test::make_layout(2, 2, 2, 1, 8);
  layout.sequence_parallel = true;
  layout.ep = 2;
  REQUIRE(check_layout(tiny_mtp(1), cluster, layout.num_gpus(), layout).ok());
  const ChunkCost base = chunk_cost(tiny_mtp(0), cluster, layout, PlanOptions{}, 1, 0);
  const ChunkCost mtp = chunk_cost(tiny_mtp(1), cluster, layout, PlanOptions{}, 1, 0);
  REQUIRE(base.num_moe_layers == 2);
  REQUIRE(base.forward_ep_comm_seconds > 0);
  // Every MoE layer of the chunk has the same all-to-alls: one more layer's worth.
  CHECK(mtp.forward_ep_comm_seconds - base.forward_ep_comm_seconds ==
        doctest::Approx(base.forward_ep_comm_seconds / 2).epsilon(1e-9).scale(0));
  CHECK(mtp.backward_ep_comm_seconds - base.backward_ep_comm_seconds ==
        doctest::Approx(base.backward_ep_comm_seconds / 2).epsilon(1e-9).scale(0));
  const std::vector<CollectiveTraffic> inventory =
      collective_inventory(tiny_mtp(1), cluster, layout, PlanOptions{});
  const std::vector<CollectiveTraffic> base_inventory =
      collective_inventory(tiny_mtp(0), cluster, layout, PlanOptions{});
  const char* what = "ep: MoE token dispatch and combine all-to-alls (forward)";
  int64_t last_stage_calls = 0, base_calls = 0;
  for (const CollectiveTraffic& traffic : inventory) {
    last_stage_calls += traffic.what == what && traffic.stage == 1 ? traffic.calls_per_step : 0;
  }
  for (const CollectiveTraffic& traffic : base_inventory) {
    base_calls += traffic.what == what && traffic.stage == 1 ? traffic.calls_per_step : 0;
  }
  CHECK(last_stage_calls == base_calls * 3 / 2);  // 3 MoE layers instead of 2
}

TEST_CASE("mtp: full recompute re-runs each depth's layer and eh_proj; the block method skips it") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanOptions options;
  Layout layout = tp2_pp2();
  layout.recompute = Recompute::kFull;
  const ChunkCost none = chunk_cost(tiny_mtp(1), cluster, tp2_pp2(), options, 1, 0);
  const ChunkCost full = chunk_cost(tiny_mtp(1), cluster, layout, options, 1, 0);
  const ChunkCost full_base = chunk_cost(tiny_mtp(0), cluster, layout, options, 1, 0);
  const ChunkCost none_base = chunk_cost(tiny_mtp(0), cluster, tp2_pp2(), options, 1, 0);
  // The recompute adds the MTP layer's forward and eh_proj's GEMM to the depth's backward.
  const double eh_proj = gemm_seconds(cluster, kT, kH / kTp, 2.0 * kH);
  const double extra_mtp_recompute =
      (full.backward_input_compute_seconds - full_base.backward_input_compute_seconds) -
      (none.backward_input_compute_seconds - none_base.backward_input_compute_seconds);
  CHECK(extra_mtp_recompute > eh_proj);
  CHECK(mtp_recomputed_under_full(layout));
  Layout block = layout;
  block.recompute_layers = 1;
  CHECK_FALSE(mtp_recomputed_under_full(block));
}

TEST_CASE("mtp: the last stage holds the depth's parameters and a copy of the embedding") {
  const Layout layout = tp2_pp2();
  const models::TransformerConfig model = tiny_mtp(1);
  const LayerParameters layer = layer_parameters(model, 2, true, 1, 0);
  // eh_proj 2h x h column-parallel; enorm, hnorm, final_layernorm (RMSNorm h each); the
  // untied embedding's V / t x h shard, which pp 2 puts on the last stage for the lookups.
  const int64_t expected =
      layer.sharded + layer.replicated + layer.expert + 2 * 64 * 64 / 2 + 3 * 64 + 128 * 64;
  CHECK(stage_parameter_count(model, layout, 1, PlanOptions{}) -
            stage_parameter_count(tiny_mtp(0), layout, 1, PlanOptions{}) ==
        expected);
  CHECK(stage_parameter_count(model, layout, 0, PlanOptions{}) ==
        stage_parameter_count(tiny_mtp(0), layout, 0, PlanOptions{}));
  // pp 1: the embedding is on the stage already.
  Layout one_stage = test::make_layout(2, 1, 1, 1, 4);
  one_stage.sequence_parallel = true;
  CHECK(stage_parameter_count(model, one_stage, 0, PlanOptions{}) -
            stage_parameter_count(tiny_mtp(0), one_stage, 0, PlanOptions{}) ==
        expected - 128 * 64);
  // Two depths, twice the module; the embedding copy once.
  CHECK(stage_parameter_count(tiny_mtp(2), layout, 1, PlanOptions{}) -
            stage_parameter_count(tiny_mtp(0), layout, 1, PlanOptions{}) ==
        2 * expected - 128 * 64);
}

TEST_CASE("mtp: the last stage's activations rise by the depth's layer, inputs and logits") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanOptions options;
  const Layout layout = tp2_pp2();
  const PlanEstimate base = estimate_plan(tiny_mtp(0), cluster, layout, options);
  const PlanEstimate mtp = estimate_plan(tiny_mtp(1), cluster, layout, options);
  REQUIRE(mtp.stages.size() == 2);
  // 1F1B holds one last-chunk micro-batch on the last stage: the MoE layer's activations,
  // enorm's, hnorm's and eh_proj's (2h) inputs, final_layernorm's and the head's inputs
  // (6 (T / t) h e, sequence-sharded), and the fp32 logits Megatron's loss keeps (4 T V / t).
  const double layer = activation_bytes_per_layer(tiny_mtp(1), cluster, layout, options, true);
  const double expected = layer + 6.0 * kSeq * kH * kE + 4.0 * kT * kRows;
  CHECK(static_cast<double>(mtp.stages[1].memory.activations_bytes -
                            base.stages[1].memory.activations_bytes) ==
        doctest::Approx(expected).epsilon(1e-9).scale(0));
  CHECK(mtp.stages[0].memory.total_bytes() == base.stages[0].memory.total_bytes());
  CHECK(mtp.stages[1].memory.weights_bytes > base.stages[1].memory.weights_bytes);
}

TEST_CASE("mtp: under selective recompute the depth's layer keeps what a selective layer keeps") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanOptions options;
  Layout layout = tp2_pp2();
  layout.recompute = Recompute::kSelective;
  layout.recompute_modules = kRecomputeCoreAttn | kRecomputeMoeAct;  // moe_act: fewer bytes kept
  const PlanEstimate base = estimate_plan(tiny_mtp(0), cluster, layout, options);
  const PlanEstimate mtp = estimate_plan(tiny_mtp(1), cluster, layout, options);
  REQUIRE(mtp.stages.size() == 2);
  const double selective_layer =
      activation_bytes_per_layer(tiny_mtp(1), cluster, layout, options, true);
  Layout unrecomputed = layout;
  unrecomputed.recompute = Recompute::kNone;
  // The selective layer keeps less than an unrecomputed one (else this case checks nothing).
  REQUIRE(selective_layer <
          activation_bytes_per_layer(tiny_mtp(1), cluster, unrecomputed, options, true));
  const double expected = selective_layer + 6.0 * kSeq * kH * kE + 4.0 * kT * kRows;
  CHECK(static_cast<double>(mtp.stages[1].memory.activations_bytes -
                            base.stages[1].memory.activations_bytes) ==
        doctest::Approx(expected).epsilon(1e-9).scale(0));
}

TEST_CASE("mtp: model FLOPs as Megatron-LM's num_floating_point_operations counts them") {
  // training.py (d98e8a64) lines 1042-1046 and 1286-1303, per token and depth D: the MTP layer
  // as one more layer of the last layer's kind, then 3 (fwd + bwd) x 2 (FMA) x D (3h + 2 h^2)
  // for the norms and eh_proj, and 3 x 2 x h V x (D + 1) for the logits.
  const models::TransformerConfig model = tiny_mtp(1);
  const int64_t global_batch = 4;
  const double tokens = 4.0 * 32.0;
  const double h = kH;
  const double V = 256.0;
  const double megatron_mtp_terms =
      3.0 * 2.0 * tokens * 1.0 * (3.0 * h + 2.0 * h * h) + 3.0 * 2.0 * tokens * h * V * 1.0;
  const double layer = 3.0 * layer_forward_flops(model, tokens, LayerKind{true, false}).total();
  CHECK(model_flops_per_step(model, global_batch) -
            model_flops_per_step(tiny_mtp(0), global_batch) ==
        doctest::Approx(layer + megatron_mtp_terms).epsilon(1e-12).scale(0));
}

TEST_CASE("mtp: the embedding gradient is all-reduced between first and last stage") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = tp2_pp2();
  CHECK_FALSE(embedding_gradient_all_reduced(tiny_mtp(0), layout));  // untied, no MTP
  CHECK(embedding_gradient_all_reduced(tiny_mtp(1), layout));
  CHECK_FALSE(embedding_gradient_all_reduced(tiny_mtp(1), test::make_layout(2, 1, 1, 1, 4)));
  const std::vector<CollectiveTraffic> inventory =
      collective_inventory(tiny_mtp(1), cluster, layout, PlanOptions{});
  int found = 0;
  for (const CollectiveTraffic& traffic : inventory) {
    if (traffic.what == "embedding: MTP word-embedding copy gradient all-reduce") {
      ++found;
      CHECK(traffic.message_bytes == 128 * 64 * 2);
    }
  }
  CHECK(found == 2);  // first and last stage
  // The depth's own tensor-parallel calls on the last stage, once per micro-batch (m = 4), and
  // its MoE layer's all-to-alls beside the stage's two MoE layers'.
  const CollectiveTraffic* eh_proj =
      test::find_traffic(inventory, "tp: MTP eh_proj input all-gather (2h, forward)");
  REQUIRE(eh_proj != nullptr);
  CHECK(eh_proj->stage == 1);
  CHECK(eh_proj->calls_per_step == 4);
  CHECK(eh_proj->message_bytes == 2 * 32 * 64 * 2);
  const CollectiveTraffic* losses =
      test::find_traffic(inventory, "tp: vocab-parallel cross-entropy all-reduces");
  REQUIRE(losses != nullptr);
  CHECK(losses->calls_per_step == 3 * 4 * 2);
}

TEST_CASE("mtp: refused outside megatron and with the EP overlap, naming the field") {
  const models::TransformerConfig model = tiny_mtp(1);
  PlanOptions options;
  CHECK_NOTHROW(check_mtp_options(model, options));
  options.framework = Framework::kDeepSpeed;
  CHECK(test::input_error([&] { check_mtp_options(model, options); }) ==
        "mtp_num_layers: framework deepspeed: Megatron-DeepSpeed's GPTModel has no "
        "multi-token-prediction module; plan it with --framework megatron (1)");
  options.framework = Framework::kFsdp;
  CHECK(test::input_error([&] { check_mtp_options(model, options); }) ==
        "mtp_num_layers: framework fsdp: meshplan's torchtitan hand-off does not run the "
        "multi-token-prediction module; plan it with --framework megatron (1)");
  options.framework = Framework::kMeshplan;
  CHECK(test::input_error([&] { check_mtp_options(model, options); }) ==
        "mtp_num_layers: framework meshplan: meshplan's executors do not build the "
        "multi-token-prediction module; plan it with --framework megatron (1)");
  CHECK_NOTHROW(check_mtp_options(tiny_mtp(0), options));
  // Megatron-Core runs one MTP layer in the EP overlap's merged schedule, not two.
  PlanOptions overlap;
  overlap.overlap_moe_expert_parallel_comm = true;
  CHECK_NOTHROW(check_mtp_options(model, overlap));
  CHECK(test::input_error([&] { check_mtp_options(tiny_mtp(2), overlap); }) ==
        "mtp_num_layers: overlap_moe_expert_parallel_comm: Megatron-Core runs at most one MTP "
        "layer in the merged forward-backward schedule (2)");
  // Megatron-Core asserts one layer per uniform recompute group with MTP.
  Layout grouped = tp2_pp2();
  grouped.recompute = Recompute::kFull;
  grouped.recompute_group_layers = 2;
  const Validity validity = check_framework(model, PlanOptions{}, grouped);
  CHECK(validity.code == "framework");
  CHECK(validity.reason.find("recompute_num_layers 1") != std::string::npos);
  CHECK(check_framework(tiny_mtp(0), PlanOptions{}, grouped).ok());
}

TEST_CASE("mtp: a plan file round-trips the depths and its estimate") {
  Plan plan;
  plan.model = tiny_mtp(1);
  plan.cluster = models::load_cluster("dgx-h100");
  plan.layout = tp2_pp2();
  plan.num_gpus = plan.layout.num_gpus();
  const PlanEstimate estimate = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("model").at("mtp_num_layers") == 1);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.model == plan.model);
  const PlanEstimate again = estimate_plan(back.model, back.cluster, back.layout, back.options);
  CHECK(again.step_time_s == estimate.step_time_s);
  CHECK(again.peak_memory_bytes == estimate.peak_memory_bytes);
  // A plan file costed for another framework is refused on reading.
  nlohmann::json deepspeed = json;
  deepspeed["options"]["framework"] = "deepspeed";
  CHECK(test::input_error([&] { plan_from_json(deepspeed, "p.json"); }) ==
        "p.json: model: mtp_num_layers: framework deepspeed: Megatron-DeepSpeed's GPTModel has "
        "no multi-token-prediction module; plan it with --framework megatron (1)");
}

}  // namespace meshplan::planner
