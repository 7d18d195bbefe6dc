// Megatron-Core's --recompute-modules under selective recompute (Layout::recompute_modules,
// transformer_config.py recompute_modules at d98e8a64): core_attn (the default), moe_act and
// layernorm, each checked against the default by the bytes it drops and the kernels it re-runs,
// computed by hand from the layer's shape.

#include <doctest/doctest.h>

#include <bit>
#include <nlohmann/json.hpp>
#include <string>

#include "compute_cost.h"
#include "input_error.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

Layout selective(Layout layout, uint32_t modules) {
  layout.recompute = Recompute::kSelective;
  layout.recompute_modules = modules;
  return layout;
}

// tiny-moe with one shared expert of 96 (DeepSeek-V3's always-active expert, in small).
models::TransformerConfig tiny_moe_with_shared_expert() {
  models::TransformerConfig model = test::tiny_moe();
  model.num_shared_experts = 1;
  model.shared_expert_ffn_hidden_size = 96;
  return model;
}

// HBM seconds of `bytes` as the cost model charges memory-bound kernels.
double hbm_seconds(const models::ClusterConfig& cluster, double bytes) {
  return bytes / (cluster.gpu.hbm_bytes_per_second * cluster.efficiency.hbm_efficiency);
}

TEST_CASE("recompute_modules: names as Megatron-Core spells them, the uncosted ones refused") {
  CHECK(parse_recompute_modules({"core_attn", "moe_act"}, "f") ==
        (kRecomputeCoreAttn | kRecomputeMoeAct));
  CHECK(parse_recompute_modules({"moe", "shared_experts"}, "f") ==
        (kRecomputeMoe | kRecomputeSharedExperts));
  CHECK(format_recompute_modules(kRecomputeLayernorm | kRecomputeCoreAttn) ==
        "core_attn,layernorm");
  CHECK(test::input_error([] { parse_recompute_modules({"mhc"}, "f"); }) ==
        "f: mhc is a Megatron-Core module meshplan does not cost yet (costed: core_attn, "
        "moe_act, layernorm, mla_up_proj, mlp, shared_experts, moe)");
  CHECK(test::input_error([] { parse_recompute_modules({"attention"}, "f"); }) ==
        "f: unknown module, expected core_attn, moe_act, layernorm, mla_up_proj, mlp, "
        "shared_experts or moe (attention)");
  CHECK(test::input_error([] { parse_recompute_modules({}, "f"); }).starts_with("f: no module"));
}

TEST_CASE("recompute_modules: moe_act drops the routed experts' second-GEMM input") {
  // tiny-moe on local-cpu, tp 2, micro-batch 2 (64 tokens): an MoE layer keeps k T f_e e / t =
  // 2 x 64 x 96 x 4 / 2 = 24,576 bytes less; its backward re-runs the SwiGLU on them, reading
  // 2 k f_e and writing k f_e per token: 3 x 24,576 bytes. Dense layers do not change.
  const models::TransformerConfig& model = test::tiny_moe();
  const models::ClusterConfig& cpu = test::local_cpu();
  const Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  const Layout act = selective(base, kRecomputeCoreAttn | kRecomputeMoeAct);
  const double routed_fc2_input = 2.0 * 64 * 96 * 4 / 2;
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, true) -
            activation_bytes_per_layer(model, cpu, act, {}, true) ==
        doctest::Approx(routed_fc2_input).scale(0));
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, false) ==
        activation_bytes_per_layer(model, cpu, act, {}, false));
  CHECK(selective_module_recompute_bytes(model, cpu, act, true) ==
        doctest::Approx(3.0 * routed_fc2_input).scale(0));
  CHECK(selective_module_recompute_bytes(model, cpu, act, false) == 0.0);
  // The chunk's three MoE layers each re-run it in the backward.
  const ChunkCost plain = chunk_cost(model, cpu, base, {}, 0, 0);
  const ChunkCost with_act = chunk_cost(model, cpu, act, {}, 0, 0);
  CHECK(with_act.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(3.0 * hbm_seconds(cpu, 3.0 * routed_fc2_input)).scale(0));
  CHECK(with_act.forward_compute_seconds == plain.forward_compute_seconds);
}

TEST_CASE("recompute_modules: layernorm drops the outputs of norms that are modules") {
  // Under Transformer Engine's specs only an MoE layer's pre-MLP norm and a latent-attention
  // layer's input norm are modules of their own (the others are fused into the next linear):
  // each drops T h e / sp, here 64 x 64 x 4 / 2 with sequence parallelism at tp 2, and re-runs
  // the norm (read and write the same).
  const models::ClusterConfig& cpu = test::local_cpu();
  Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  base.sequence_parallel = true;
  const Layout norms = selective(base, kRecomputeCoreAttn | kRecomputeLayernorm);
  const double norm_output = 64.0 * 64 * 4 / 2;
  const models::TransformerConfig& moe = test::tiny_moe();
  CHECK(activation_bytes_per_layer(moe, cpu, base, {}, true) -
            activation_bytes_per_layer(moe, cpu, norms, {}, true) ==
        doctest::Approx(norm_output).scale(0));
  CHECK(activation_bytes_per_layer(moe, cpu, base, {}, false) ==
        activation_bytes_per_layer(moe, cpu, norms, {}, false));
  CHECK(selective_module_recompute_bytes(moe, cpu, norms, true) ==
        doctest::Approx(2.0 * norm_output).scale(0));
  const models::TransformerConfig mla = models::load_model("tiny-mla");
  CHECK(activation_bytes_per_layer(mla, cpu, base, {}, false) -
            activation_bytes_per_layer(mla, cpu, norms, {}, false) ==
        doctest::Approx(norm_output).scale(0));
  const models::TransformerConfig tiny = models::load_model("tiny");
  CHECK(activation_bytes_per_layer(tiny, cpu, base, {}, false) ==
        activation_bytes_per_layer(tiny, cpu, norms, {}, false));
}

TEST_CASE("recompute_modules: mla_up_proj rebuilds Q, K and V from the latents") {
  // tiny-mla on local-cpu (fp32), tp 2 with sequence parallelism, micro-batch 2 (64 tokens): a
  // layer drops Q, K and V, T (a + 2a) d e / t = 64 x 12 x 24 x 4 / 2 bytes (meshplan's MLA
  // count, d = d_qk), and keeps the gathered rotary key, T d_rope e = 64 x 8 x 4, the
  // checkpointed function's input; its backward re-runs the q up projection (query latent 32 -> 4 x
  // 24 / 2 per token) and the kv up projection (kv latent 16 -> 4 x (16 + 16) / 2), writes Q, K and
  // V again (read and write), and all-gathers the two latents (32 and 16 per token) again.
  const models::TransformerConfig model = models::load_model("tiny-mla");
  const models::ClusterConfig& cpu = test::local_cpu();
  Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  base.sequence_parallel = true;
  const Layout up = selective(base, kRecomputeCoreAttn | kRecomputeMlaUpProj);
  const double qkv = 64.0 * 12 * 24 * 4 / 2;
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, false) -
            activation_bytes_per_layer(model, cpu, up, {}, false) ==
        doctest::Approx(qkv - 64.0 * 8 * 4).scale(0));
  const ChunkCost plain = chunk_cost(model, cpu, base, {}, 0, 0);
  const ChunkCost with_up = chunk_cost(model, cpu, up, {}, 0, 0);
  const double per_layer = gemm_seconds(cpu, 64, 4.0 * 24 / 2, 32, GemmPrecision::kBf16) +
                           gemm_seconds(cpu, 64, 4.0 * 32 / 2, 16, GemmPrecision::kBf16) +
                           hbm_seconds(cpu, 2.0 * qkv);
  CHECK(with_up.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(4.0 * per_layer).scale(0));
  const double gathers = collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 32 * 4, 2, 1) +
                         collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 16 * 4, 2, 1);
  CHECK(with_up.backward_tp_comm_seconds - plain.backward_tp_comm_seconds ==
        doctest::Approx(4.0 * gathers).scale(0));
  // The inventory: each latent's all-gathers, forward and weight-gradient re-gather (2 per layer
  // and micro-batch, m = 16 / 2 = 8), plus one per layer and micro-batch.
  const PlanEstimate estimate = estimate_plan(model, cpu, up, {});
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const CollectiveTraffic* latents =
      test::find_traffic(estimate.collectives,
                         "tp: MLA query latent all-gathers (forward, weight-gradient re-gather)");
  REQUIRE(latents != nullptr);
  CHECK(latents->calls_per_step == 3 * 4 * 8);
}

TEST_CASE("recompute_modules: mlp re-runs a dense layer's MLP, collectives included") {
  // tiny (SwiGLU, f 176) on local-cpu (fp32), tp 2, micro-batch 2 (64 tokens): a dense layer
  // drops the fused norm's output (T h e / sp) and the SwiGLU input (2 T f e / t) and second
  // projection input (T f e / t); its backward re-runs both projections, the norm and the
  // SwiGLU, and the MLP's tp collectives: without sequence parallelism one all-reduce of T h e,
  // with it an all-gather and a reduce-scatter. tiny-moe's MoE layers do not change.
  const models::ClusterConfig& cpu = test::local_cpu();
  const models::TransformerConfig tiny = models::load_model("tiny");
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
    base.sequence_parallel = sp;
    const Layout mlp = selective(base, kRecomputeCoreAttn | kRecomputeMlp);
    const double split = sp ? 2.0 : 1.0;
    const double dropped = 64.0 * 64 * 4 / split + 3.0 * 64 * 176 * 4 / 2;
    CHECK(activation_bytes_per_layer(tiny, cpu, base, {}, false) -
              activation_bytes_per_layer(tiny, cpu, mlp, {}, false) ==
          doctest::Approx(dropped).scale(0));
    const ChunkCost plain = chunk_cost(tiny, cpu, base, {}, 0, 0);
    const ChunkCost with_mlp = chunk_cost(tiny, cpu, mlp, {}, 0, 0);
    const double per_layer = gemm_seconds(cpu, 64, 2.0 * 176 / 2, 64, GemmPrecision::kBf16) +
                             gemm_seconds(cpu, 64, 64, 176.0 / 2, GemmPrecision::kBf16) +
                             hbm_seconds(cpu, 2.0 * 64 * 64 * 4 / split + 3.0 * 64 * 176 * 4 / 2);
    CHECK(with_mlp.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
          doctest::Approx(4.0 * per_layer).scale(0));
    const double collectives =
        sp ? collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 64 * 4, 2, 1) +
                 collective_seconds(cpu, CollectiveKind::kReduceScatter, 64 * 64 * 4, 2, 1)
           : collective_seconds(cpu, CollectiveKind::kAllReduce, 64 * 64 * 4, 2, 1);
    CHECK(with_mlp.backward_tp_comm_seconds - plain.backward_tp_comm_seconds ==
          doctest::Approx(4.0 * collectives).scale(0));
    // m = 16 / 2 = 8 micro-batches, 4 dense layers: one more call of each kind per layer.
    const PlanEstimate estimate = estimate_plan(tiny, cpu, mlp, {});
    REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
    const CollectiveTraffic* again =
        test::find_traffic(estimate.collectives,
                           sp ? "tp: recomputed MLP output reduce-scatters (recompute_modules mlp)"
                              : "tp: recomputed MLP output all-reduces (recompute_modules mlp)");
    REQUIRE(again != nullptr);
    CHECK(again->calls_per_step == 4 * 8);
  }
  const Layout moe_mlp =
      selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn | kRecomputeMlp);
  CHECK(activation_bytes_per_layer(test::tiny_moe(), cpu, moe_mlp, {}, true) ==
        activation_bytes_per_layer(test::tiny_moe(), cpu, selective(moe_mlp, kRecomputeCoreAttn),
                                   {}, true));
}

TEST_CASE("selective recompute: the backward holds one layer's rebuilt modules at the peak") {
  // tiny, tp 2, pp 1, one micro-batch of 64 tokens held at the peak: of its 4 layers, the one
  // whose backward runs has its dropped tensors back (what `execute` measures: the peak of live
  // tensors falls by 3 layers' MLP tensors, not 4). mlp drops the norm output (64 x 64 x 4 B)
  // and the SwiGLU input and output (3 x 64 x 176 x 4 / 2 B) per layer; without flash attention
  // core_attn drops the probabilities, a s T e / t = 4 x 32 x 64 x 4 / 2 B.
  const models::ClusterConfig& cpu = test::local_cpu();
  const models::TransformerConfig tiny = models::load_model("tiny");
  const Layout none = test::make_layout(2, 1, 1, 2, 2);
  const InFlight one = peak_in_flight(none.schedule, 1, 1, 1, 0);
  const auto activations = [&](const Layout& layout, const PlanOptions& options) {
    return static_cast<double>(stage_memory(tiny, cpu, layout, options, 0, one).activations_bytes);
  };
  const double mlp_dropped = 64.0 * 64 * 4 + 3.0 * 64 * 176 * 4 / 2;
  CHECK(activations(selective(none, kRecomputeCoreAttn), {}) -
            activations(selective(none, kRecomputeCoreAttn | kRecomputeMlp), {}) ==
        doctest::Approx(3.0 * mlp_dropped).epsilon(1e-12).scale(0));
  PlanOptions unfused;
  unfused.flash_attention = false;
  const double probabilities = 4.0 * 32 * 64 * 4 / 2;
  CHECK(activations(none, unfused) - activations(selective(none, kRecomputeCoreAttn), unfused) ==
        doctest::Approx(3.0 * probabilities).epsilon(1e-12).scale(0));
}

TEST_CASE("recompute_modules: mlp under Transformer Engine's FP8") {
  // tiny, tp 2 with sequence parallelism, micro-batch 2 (64 tokens), local-cpu's 4-byte
  // elements. FP8 keeps the MLP's two inputs in 1 byte (te_fp8_activation_delta_bytes_per_layer:
  // (64 x 64 / 2 + 64 x 176 / 2) x 3 bytes less); mlp drops them whole, so its saving is its
  // 16-bit figure less that: 8,192 + 67,584 - 23,040 bytes. Its recompute casts the GEMMs'
  // inputs again: fc1's from the norm (1 byte less written: -32 x 64) and fc2's (read 2, write
  // 1: 3 x 64 x 88) bytes; the GEMMs run at the FP8 rate.
  const models::ClusterConfig& cpu = test::local_cpu();
  const models::TransformerConfig tiny = models::load_model("tiny");
  Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  base.sequence_parallel = true;
  const Layout mlp = selective(base, kRecomputeCoreAttn | kRecomputeMlp);
  PlanOptions fp8;
  fp8.gemm_precision = GemmPrecision::kFp8;
  CHECK(activation_bytes_per_layer(tiny, cpu, base, fp8, false) -
            activation_bytes_per_layer(tiny, cpu, mlp, fp8, false) ==
        doctest::Approx(8192.0 + 67584.0 - 23040.0).scale(0));
  // Times on an H100 (local-cpu has no FP8 rate).
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const double casts_seconds = hbm_seconds(h100, -32.0 * 64 + 3.0 * 64 * 88);
  const auto backward_input = [&](const Layout& layout, const PlanOptions& options) {
    return chunk_cost(tiny, h100, layout, options, 0, 0).backward_input_compute_seconds;
  };
  const double bf16_extra = backward_input(mlp, {}) - backward_input(base, {});
  const double fp8_extra = backward_input(mlp, fp8) - backward_input(base, fp8);
  const double gemms_bf16 = gemm_seconds(h100, 64, 2.0 * 176 / 2, 64, GemmPrecision::kBf16) +
                            gemm_seconds(h100, 64, 64, 176.0 / 2, GemmPrecision::kBf16);
  const double gemms_fp8 = gemm_seconds(h100, 64, 2.0 * 176 / 2, 64, GemmPrecision::kFp8) +
                           gemm_seconds(h100, 64, 64, 176.0 / 2, GemmPrecision::kFp8);
  CHECK((fp8_extra - bf16_extra) - 4.0 * (gemms_fp8 - gemms_bf16) ==
        doctest::Approx(4.0 * casts_seconds).scale(0));
}

TEST_CASE("recompute_modules: shared_experts re-runs the shared experts' MLP") {
  // tiny-moe with one shared expert of 96 on local-cpu (fp32), tp 2 with sequence parallelism,
  // micro-batch 2 (64 tokens): an MoE layer drops the shared SwiGLU's input (2 x 64 x 96 x 4 /
  // 2 B) and output (64 x 96 x 4 / 2 B); its backward re-runs the two shared GEMMs (64 tokens,
  // 64 -> 2 x 96 / 2 and 96 / 2 -> 64), the SwiGLU (read 2 x 96 / 2, write 96 / 2 per token),
  // the input's all-gather and the output's reduce-scatter (64 x 64 x 4 B each). The dense
  // layer does not change.
  const models::TransformerConfig model = tiny_moe_with_shared_expert();
  const models::ClusterConfig& cpu = test::local_cpu();
  Layout base = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  base.sequence_parallel = true;
  const Layout shared = selective(base, kRecomputeCoreAttn | kRecomputeSharedExperts);
  const double swiglu_io = 3.0 * 64 * 96 * 4 / 2;
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, true) -
            activation_bytes_per_layer(model, cpu, shared, {}, true) ==
        doctest::Approx(swiglu_io).scale(0));
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, false) ==
        activation_bytes_per_layer(model, cpu, shared, {}, false));
  const ChunkCost plain = chunk_cost(model, cpu, base, {}, 0, 0);
  const ChunkCost with_shared = chunk_cost(model, cpu, shared, {}, 0, 0);
  const double per_layer = gemm_seconds(cpu, 64, 2.0 * 96 / 2, 64, GemmPrecision::kBf16) +
                           gemm_seconds(cpu, 64, 64, 96.0 / 2, GemmPrecision::kBf16) +
                           hbm_seconds(cpu, swiglu_io);
  CHECK(with_shared.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(3.0 * per_layer).scale(0));
  const double collectives =
      collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 64 * 4, 2, 1) +
      collective_seconds(cpu, CollectiveKind::kReduceScatter, 64 * 64 * 4, 2, 1);
  CHECK(with_shared.backward_tp_comm_seconds - plain.backward_tp_comm_seconds ==
        doctest::Approx(3.0 * collectives).scale(0));
  // m = 16 / 2 = 8 micro-batches, 3 MoE layers: one more call of each kind per MoE layer.
  const PlanEstimate estimate = estimate_plan(model, cpu, shared, {});
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const CollectiveTraffic* again = test::find_traffic(
      estimate.collectives,
      "tp: recomputed shared-expert output reduce-scatters (recompute_modules shared_experts, "
      "moe)");
  REQUIRE(again != nullptr);
  CHECK(again->calls_per_step == 3 * 8);
  // A model without shared experts has nothing to re-run: refused, not ignored.
  PlanOptions options;
  CHECK(check_recompute_modules(test::tiny_moe(), shared, options).code == "recompute_modules");
  CHECK(check_recompute_modules(test::tiny_moe(), shared, options)
            .reason.find("shared_experts needs a mixture-of-experts model with shared experts") !=
        std::string::npos);
  CHECK(check_recompute_modules(model, shared, options).ok());
  // Nor mlp on a model whose every layer is an MoE layer (no dense MLP to checkpoint).
  models::TransformerConfig all_moe = test::tiny_moe();
  all_moe.first_dense_layers = 0;
  const Layout mlp = selective(base, kRecomputeCoreAttn | kRecomputeMlp);
  CHECK(check_recompute_modules(all_moe, mlp, options)
            .reason.find("mlp needs dense (non-MoE) layers") != std::string::npos);
  CHECK(check_recompute_modules(test::tiny_moe(), mlp, options).ok());
}

TEST_CASE("recompute_modules: moe re-runs the whole MoE block, its all-to-alls included") {
  // tiny-moe with one shared expert of 96, tp 2 with sequence parallelism, ep 2, micro-batch 2
  // (64 tokens): an MoE layer keeps only its input and drops the routed and shared SwiGLU
  // inputs and outputs (3 x 64 x (2 x 96 + 96) x 4 / 2 B), the dispatched tokens (k T h e, 2
  // x 64 x 64 x 4 at etp = tp) and the router's fp32 probabilities (4 x 64 x 4 / 2). Its
  // backward runs the block's forward again: two more all-to-alls, one more token-count
  // all-gather and one more shared-expert pair per MoE layer and micro-batch.
  const models::TransformerConfig model = tiny_moe_with_shared_expert();
  const models::ClusterConfig& cpu = test::local_cpu();
  Layout base = selective(test::make_layout(2, 1, 2, 2, 16), kRecomputeCoreAttn);
  base.sequence_parallel = true;
  base.ep = 2;
  const Layout moe = selective(base, kRecomputeCoreAttn | kRecomputeMoe);
  const double dropped = 3.0 * 64 * (2 * 96 + 96) * 4 / 2 + 2.0 * 64 * 64 * 4 + 4.0 * 64 * 4 / 2;
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, true) -
            activation_bytes_per_layer(model, cpu, moe, {}, true) ==
        doctest::Approx(dropped).scale(0));
  CHECK(activation_bytes_per_layer(model, cpu, base, {}, false) ==
        activation_bytes_per_layer(model, cpu, moe, {}, false));
  // moe_act and shared_experts beside moe drop nothing more, but their nested checkpoints run
  // inside the rebuilt block once more (Megatron-Core experts.py CheckpointWithoutOutput,
  // moe_layer.py tensor_parallel.checkpoint): per MoE layer the routed SwiGLU (3 x 64 x 2 x 96 /
  // 2 x 4 B: k = 2 routed copies of 64 tokens at etp 2) and the shared expert's two GEMMs,
  // SwiGLU and tp pair a third time.
  const Layout all = selective(
      base, kRecomputeCoreAttn | kRecomputeMoe | kRecomputeMoeAct | kRecomputeSharedExperts);
  CHECK(activation_bytes_per_layer(model, cpu, all, {}, true) ==
        activation_bytes_per_layer(model, cpu, moe, {}, true));
  const ChunkCost plain = chunk_cost(model, cpu, base, {}, 0, 0);
  const ChunkCost with_moe = chunk_cost(model, cpu, moe, {}, 0, 0);
  const ChunkCost with_all = chunk_cost(model, cpu, all, {}, 0, 0);
  const double shared_again = gemm_seconds(cpu, 64, 96, 64, GemmPrecision::kBf16) +
                              gemm_seconds(cpu, 64, 64, 48, GemmPrecision::kBf16) +
                              hbm_seconds(cpu, 3.0 * 64 * 96 * 4 / 2);
  const double activation_again = hbm_seconds(cpu, 3.0 * 64 * 2 * 96 * 4 / 2);
  CHECK(with_all.backward_input_compute_seconds - with_moe.backward_input_compute_seconds ==
        doctest::Approx(3.0 * (shared_again + activation_again)).scale(0));
  CHECK(with_all.backward_tp_comm_seconds - with_moe.backward_tp_comm_seconds ==
        doctest::Approx(
            3.0 * (collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 64 * 4, 2, 1) +
                   collective_seconds(cpu, CollectiveKind::kReduceScatter, 64 * 64 * 4, 2, 1)))
            .scale(0));
  CHECK(with_all.backward_ep_comm_seconds == with_moe.backward_ep_comm_seconds);
  // The ep time backward grows by the forward's: dispatch, combine and the count gather again.
  CHECK(with_moe.backward_ep_comm_seconds - plain.backward_ep_comm_seconds ==
        doctest::Approx(plain.forward_ep_comm_seconds).scale(0));
  // The block's forward per MoE layer: 2 local experts of 64 tokens each (64 x 2 x 2 x 2 / (4 x
  // 2)), fc1 64 -> 2 x 96 / 2 and fc2 96 / 2 -> 64; the shared expert's two GEMMs on 64 tokens;
  // the router on 32 (64 / sp) tokens, 64 -> 4; permute and unpermute (read and write 2 x 64 x
  // 64 x 4 / 2 B each), the dispatcher's sort and unsort by local expert over the copies
  // gathered from the etp 2 ranks (twice that each: token_dispatcher.py Permutation 2) and the
  // SwiGLUs (3 x 64 x (2 x 96 + 96) / 2 x 4 B); its tp collectives:
  // the routed tokens' etp pair and the shared expert's all-gather and reduce-scatter.
  const auto gemm = [&](double m, double n, double k) {
    return gemm_seconds(cpu, m, n, k, GemmPrecision::kBf16);
  };
  const double block_compute =
      2.0 * gemm(64, 96, 64) + 2.0 * gemm(64, 64, 48) + gemm(64, 96, 64) + gemm(64, 64, 48) +
      gemm(32, 4, 64) +
      hbm_seconds(cpu, (4.0 + 4.0 * 2) * 64 * 2 * 64 * 4 / 2 + 3.0 * 64 * 144 * 4);
  CHECK(with_moe.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(3.0 * block_compute).scale(0));
  const double block_tp =
      moe_expert_tp_seconds(model, cpu, moe, CollectiveKind::kAllReduce) +
      collective_seconds(cpu, CollectiveKind::kAllGather, 64 * 64 * 4, 2, 1) +
      collective_seconds(cpu, CollectiveKind::kReduceScatter, 64 * 64 * 4, 2, 1);
  CHECK(with_moe.backward_tp_comm_seconds - plain.backward_tp_comm_seconds ==
        doctest::Approx(3.0 * block_tp).scale(0));
  const PlanEstimate without = estimate_plan(model, cpu, base, {});
  const PlanEstimate estimate = estimate_plan(model, cpu, moe, {});
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const auto calls = [](const PlanEstimate& plan, const std::string& what) {
    const CollectiveTraffic* traffic = test::find_traffic(plan.collectives, what.c_str());
    return traffic == nullptr ? int64_t{0} : traffic->calls_per_step;
  };
  // m = 16 / (2 x 2) = 4 micro-batches, 3 MoE layers.
  CHECK(calls(estimate, "ep: MoE token dispatch and combine all-to-alls (forward)") -
            calls(without, "ep: MoE token dispatch and combine all-to-alls (forward)") ==
        2 * 3 * 4);
  CHECK(calls(estimate, "ep: MoE token-count all-gather (dispatch preprocess)") -
            calls(without, "ep: MoE token-count all-gather (dispatch preprocess)") ==
        3 * 4);
  CHECK(calls(estimate,
              "tp: recomputed shared-expert input all-gathers (recompute_modules shared_experts, "
              "moe)") == 3 * 4);
  // With shared_experts beside moe the shared experts' pair runs twice more per MoE layer.
  const PlanEstimate nested = estimate_plan(model, cpu, all, {});
  REQUIRE_MESSAGE(nested.feasible, nested.rejection_reason);
  CHECK(calls(nested,
              "tp: recomputed shared-expert output reduce-scatters (recompute_modules "
              "shared_experts, moe)") == 2 * 3 * 4);
}

TEST_CASE("recompute_modules: without core_attn the attention scores are kept") {
  // Without flash attention, selective recompute that does not name core_attn keeps the scores
  // as no recompute does; moe_act's saving comes on top.
  const models::TransformerConfig& model = test::tiny_moe();
  const models::ClusterConfig& cpu = test::local_cpu();
  PlanOptions unfused;
  unfused.flash_attention = false;
  Layout none = test::make_layout(2, 1, 1, 2, 16);
  const Layout act_only = selective(none, kRecomputeMoeAct);
  const Layout act = selective(none, kRecomputeCoreAttn | kRecomputeMoeAct);
  CHECK(activation_bytes_per_layer(model, cpu, act_only, unfused, false) ==
        activation_bytes_per_layer(model, cpu, none, unfused, false));
  CHECK(activation_bytes_per_layer(model, cpu, act_only, unfused, true) -
            activation_bytes_per_layer(model, cpu, act, unfused, true) ==
        doctest::Approx(activation_bytes_per_layer(model, cpu, none, unfused, false) -
                        activation_bytes_per_layer(model, cpu, selective(none, kRecomputeCoreAttn),
                                                   unfused, false))
            .scale(0));
}

TEST_CASE("recompute_modules: Megatron and meshplan, recompute selective, moe_act on MoE models") {
  const auto code = [&](const models::TransformerConfig& model, const Layout& layout,
                        Framework framework) {
    PlanOptions options;
    options.framework = framework;
    return check_recompute_modules(model, layout, options).code;
  };
  const Layout act = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeMoeAct);
  CHECK(code(test::tiny_moe(), act, Framework::kMegatron).empty());
  CHECK(code(test::tiny_moe(), act, Framework::kMeshplan).empty());  // the executor runs it
  CHECK(code(test::tiny_moe(), act, Framework::kDeepSpeed) == "framework");
  CHECK(code(models::load_model("tiny"), act, Framework::kMegatron) == "recompute_modules");
  Layout full = act;
  full.recompute = Recompute::kFull;
  CHECK(code(test::tiny_moe(), full, Framework::kMegatron) == "recompute_modules");
  CHECK(code(models::load_model("tiny"), selective(act, kRecomputeLayernorm), Framework::kMegatron)
            .empty());
  CHECK(code(models::load_model("tiny"), selective(act, 0), Framework::kMegatron) ==
        "recompute_modules");
  CHECK(code(models::load_model("tiny"), selective(act, kRecomputeMlaUpProj),
             Framework::kMegatron) == "recompute_modules");
  CHECK(code(models::load_model("tiny-mla"), selective(act, kRecomputeMlaUpProj),
             Framework::kMegatron)
            .empty());
  // A parallel block (GPT-NeoX's) has no MLP of its own to checkpoint: its MLP and attention
  // share one output reduction.
  models::TransformerConfig parallel = models::load_model("tiny");
  CHECK(code(parallel, selective(act, kRecomputeMlp), Framework::kMeshplan).empty());
  parallel.parallel_residual = true;
  CHECK(code(parallel, selective(act, kRecomputeMlp), Framework::kMeshplan) == "recompute_modules");
  CHECK(check_recompute_modules(parallel, selective(act, kRecomputeMlp), PlanOptions{})
            .reason.find("mlp needs separate attention and MLP blocks") != std::string::npos);
}

TEST_CASE("recompute_modules auto: the lists a model can take") {
  // Every combination of the modules that change the model, core_attn always in, fewest first.
  CHECK(recompute_module_lists(models::load_model("tiny")) ==
        std::vector<uint32_t>{kRecomputeCoreAttn | kRecomputeMlp});
  models::TransformerConfig parallel = models::load_model("tiny");
  parallel.parallel_residual = true;
  CHECK(recompute_module_lists(parallel).empty());
  // tiny-moe (layer 0 dense): {none, moe_act, moe} x {mlp, layernorm} subsets, less core_attn
  // alone: 11 lists.
  const std::vector<uint32_t> moe = recompute_module_lists(test::tiny_moe());
  CHECK(moe.size() == 11);
  for (size_t i = 0; i < moe.size(); ++i) {
    CAPTURE(format_recompute_modules(moe[i]));
    CHECK((moe[i] & kRecomputeCoreAttn) != 0);
    CHECK_FALSE(((moe[i] & kRecomputeMoe) != 0 && (moe[i] & kRecomputeMoeAct) != 0));
    CHECK(check_recompute_modules(
              test::tiny_moe(), selective(test::make_layout(1, 1, 1, 1, 4), moe[i]), PlanOptions{})
              .ok());
    if (i > 0) {
      CHECK(std::popcount(moe[i - 1]) <= std::popcount(moe[i]));
    }
  }
  // With a shared expert and latent attention (DeepSeek-V3's shape): MoE choices none, moe_act,
  // shared_experts, both, moe; mlp, layernorm, mla_up_proj in or out: 5 x 8 - 1.
  CHECK(recompute_module_lists(models::load_model("deepseek-v3")).size() == 39);
}

TEST_CASE("recompute_modules auto: the fastest list that fits, as searching each list finds") {
  // Qwen3-30B-A3B on 128 H100 (batch 1,024 of 4,096 tokens), tp 1, micro-batch 2, ZeRO 2: the
  // plain search's pick runs without recompute; auto also costs the selective layouts that do
  // not fit with each list and ranks the fastest that fits. Its pick must be the best of the
  // plain search and of a search with each list fixed.
  models::TransformerConfig model = models::load_model("qwen3-30b-a3b");
  model.seq_length = 4096;
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  PlanOptions options;
  options.overlap_p2p_comm = true;  // plan's default under megatron
  SearchSpace space;
  space.num_gpus = 128;
  space.global_batch = 1024;
  space.tp = 1;
  space.micro_batch = 2;
  space.zero = 2;
  const SearchResult plain = search_layouts(model, h100, space, options, Objective::kTime, 1);
  REQUIRE(plain.best.size() == 1);
  double best_s = plain.best[0].step_time_s;
  uint32_t best_modules = 0;
  for (const uint32_t modules : recompute_module_lists(model)) {
    SearchSpace fixed = space;
    fixed.recompute = Recompute::kSelective;
    fixed.recompute_modules = modules;
    const SearchResult result = search_layouts(model, h100, fixed, options, Objective::kTime, 1);
    if (!result.best.empty() && result.best[0].step_time_s < best_s) {
      best_s = result.best[0].step_time_s;
      best_modules = modules;
    }
  }
  space.search_recompute_modules = true;
  const SearchResult searched = search_layouts(model, h100, space, options, Objective::kTime, 1);
  REQUIRE(searched.best.size() == 1);
  CHECK(searched.best[0].step_time_s == best_s);
  CHECK(best_modules != 0);  // a list beats the plain search's pick here
  CHECK(searched.best[0].layout.recompute_modules == best_modules);
  CHECK(searched.best[0].step_time_s < plain.best[0].step_time_s);
  MESSAGE(format_recompute_modules(best_modules)
          << ": " << best_s << " s against " << plain.best[0].step_time_s << " s");
}

TEST_CASE("plan file: layout.recompute_modules as Megatron-Core's names, only when not default") {
  Layout layout = selective(test::make_layout(2, 1, 1, 2, 16), kRecomputeCoreAttn);
  layout.sequence_parallel = true;  // Megatron's MoE layers at tp > 1
  Plan plan{test::tiny_moe(), test::local_cpu(), 2, layout, PlanOptions{}};
  CHECK_FALSE(plan_to_json(plan, {}).at("layout").contains("recompute_modules"));
  plan.layout.recompute_modules = kRecomputeCoreAttn | kRecomputeMoeAct | kRecomputeLayernorm;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("layout").at("recompute_modules") ==
        nlohmann::json{"core_attn", "moe_act", "layernorm"});
  CHECK(plan_from_json(json, "p.json") == plan);
  nlohmann::json uncosted = json;
  uncosted["layout"]["recompute_modules"] = {"mhc"};
  CHECK(test::input_error([&] {
          plan_from_json(uncosted, "p.json");
        }).starts_with("p.json: layout: recompute_modules: mhc is a Megatron-Core module"));
  nlohmann::json deepspeed = json;
  deepspeed["options"]["framework"] = "deepspeed";
  CHECK(test::input_error([&] { plan_from_json(deepspeed, "p.json"); })
            .starts_with(
                "p.json: layout: deepspeed cannot run this layout: the list is Megatron-Core's"));
}

}  // namespace
}  // namespace meshplan::planner
