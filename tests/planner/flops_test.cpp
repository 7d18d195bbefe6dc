// Model and hardware FLOPs (planner/flops.cpp, summed by estimate_plan) against the published
// closed forms: Megatron-LM's model FLOPs (shared/validation/README.md), Narayanan et al. 2021
// eq. 3 (with full recompute) and PaLM's 6N + 12 L H Q T (Chowdhery et al. 2022, App. B).

#include <doctest/doctest.h>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// Every expected value below is a sum of products of exact integers below 2^63; the code adds
// the same FLOPs per matrix in doubles in another order, so they agree to a few ulps. 1e-12
// relative leaves room for that rounding and nothing else.
constexpr double kFlopsRoundingTolerance = 1e-12;

TEST_CASE("model FLOPs, GPT-3 175B, B 1536: 72 B s l h^2 (1 + s/(6h)) + 6 B s h V") {
  // B 1536, s 2048, l 96, h 12288, V 50257 (the README's Megatron-LM count, ffn 4h, MHA):
  // 72 * 1536 * 2048 * 96 * 12288^2 * (1 + 2048 / 73728) + 6 * 1536 * 2048 * 12288 * 50257
  // = 3,385,978,038,062,678,016 (computed in exact rationals).
  const models::TransformerConfig model = models::load_model("gpt3-175b");
  const double expected = 3'385'978'038'062'678'016.0;
  CHECK(model_flops_per_step(model, 1536) ==
        doctest::Approx(expected).epsilon(kFlopsRoundingTolerance).scale(0));
  // Linear in the batch: half the batch, half the FLOPs.
  CHECK(model_flops_per_step(model, 768) ==
        doctest::Approx(expected / 2).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("model FLOPs, Llama-3 8B (GQA, SwiGLU): PaLM's 6N + 12 L H Q T per token") {
  // Chowdhery et al. 2022, App. B: per token 6 N + 12 L H Q T with N the matmul parameters
  // (embedding lookup excluded, LM head included), L layers, H heads, Q head dim, T sequence.
  // Llama-3 8B: h 4096, a 32, g 8, d 128, f 14336, V 128256, s 8192.
  // Per layer: Q and O 2 * 4096^2 = 33,554,432; K and V 2 * 8 * 128 * 4096 = 8,388,608;
  // MLP 3 * 4096 * 14336 = 176,160,768; sum 218,103,808. N = 32 * 218,103,808 + V h
  // 525,336,576 = 7,504,658,432; 6 N = 45,027,950,592.
  // 12 L H Q T = 12 * 32 * 32 * 128 * 8192 = 12,884,901,888.
  // Per token 57,912,852,480; one sequence of 8192 tokens: 474,422,087,516,160.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  CHECK(model_flops_per_step(model, 1) ==
        doctest::Approx(474'422'087'516'160.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

struct Flops {
  double model = 0;
  double hardware = 0;
};

Flops estimate_flops(Recompute recompute) {
  // megatron-7.5b (V 51200, divisible by tp 2: no padded rows), tp 2, pp 2, dp 2, micro-batch 1,
  // global batch 16 (8 micro-batches per pipeline).
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  Layout layout = make_layout(2, 2, 2, 1, 16);
  layout.recompute = recompute;
  const PlanEstimate estimate = estimate_plan(model, models::load_cluster("dgx-a100-80gb"), layout);
  REQUIRE(estimate.rejection_code != "sizes");
  return {estimate.model_flops_per_step, estimate.hardware_flops_per_step};
}

// megatron-7.5b, B 16, s 2048, l 36, h 4096, V 51200.
// Model FLOPs 72 B s l h^2 (1 + s/(6h)) + 6 B s h V = 1,584,946,011,439,104.
constexpr double kModelFlops7b = 1'584'946'011'439'104.0;

TEST_CASE("hardware FLOPs: no recompute equals model FLOPs") {
  const Flops flops = estimate_flops(Recompute::kNone);
  CHECK(flops.model == doctest::Approx(kModelFlops7b).epsilon(kFlopsRoundingTolerance).scale(0));
  CHECK(flops.hardware == doctest::Approx(kModelFlops7b).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("hardware FLOPs: full recompute is Narayanan et al. 2021 eq. 3") {
  // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)): one more forward of every layer (the LM head is not
  // recomputed) = 2,099,517,453,238,272.
  const Flops flops = estimate_flops(Recompute::kFull);
  CHECK(flops.model == doctest::Approx(kModelFlops7b).epsilon(kFlopsRoundingTolerance).scale(0));
  CHECK(flops.hardware ==
        doctest::Approx(2'099'517'453'238'272.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("hardware FLOPs: selective recompute re-runs the attention core") {
  // Korthikanti et al. 2022, Sec. 5: Q K^T and softmax(.) V again, 2 * 2 B s^2 a d = 4 B s^2 h
  // per layer: 4 * 16 * 2048^2 * 4096 * 36 = 39,582,418,599,936 on top of the model FLOPs:
  // 1,624,528,430,039,040.
  const Flops flops = estimate_flops(Recompute::kSelective);
  CHECK(flops.hardware ==
        doctest::Approx(1'624'528'430'039'040.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

// torchtitan's op-level selective recompute (--framework fsdp, recompute selective) on Llama-3 8B
// (h 4096, a 32, g 8, d 128, f 14336, l 32, s 8192), tp 1, dp 8, micro-batch 1, global batch 8.
PlanEstimate op_sac_estimate(Framework framework, Recompute recompute) {
  const models::TransformerConfig model = models::load_model("llama3-8b");
  Layout layout = make_layout(1, 1, 8, 1, 8);
  layout.zero = 3;
  layout.recompute = recompute;
  PlanOptions options;
  options.framework = framework;
  return estimate_plan(model, models::load_cluster("dgx-a100-80gb"), layout, options);
}

TEST_CASE("hardware FLOPs: selective-op is torchtitan's op policy, every second mm again") {
  // torchtitan parallelize_llama.py saves every odd-numbered mm of a block (wq, wv, w1, w2) and
  // re-runs wk, wo and w3: per token and layer 2 (h g d + h a d + h f) = 2 (4,194,304 +
  // 16,777,216 + 58,720,256) = 159,383,552; x 32 layers x 8192 tokens = 41,781,441,855,488
  // per sequence. Model FLOPs per sequence 474,422,087,516,160 (the PaLM case above); 8
  // sequences: 8 x 516,203,529,371,648 = 4,129,628,234,973,184.
  const PlanEstimate e = op_sac_estimate(Framework::kFsdp, Recompute::kSelectiveOp);
  REQUIRE(e.rejection_code != "sizes");
  CHECK(e.model_flops_per_step ==
        doctest::Approx(8 * 474'422'087'516'160.0).epsilon(kFlopsRoundingTolerance).scale(0));
  CHECK(e.hardware_flops_per_step ==
        doctest::Approx(4'129'628'234'973'184.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("time: selective-op re-runs wk, wo, w3 and the element-wise work in the backward") {
  // Megatron's selective recompute with flash attention (nothing re-run) against fsdp's
  // selective-op, eager (no --compile). Per token at 2 bytes, both: norms 2 x 2 h and residual
  // adds 2 x 3 h; Megatron's fused SwiGLU 3 f and rotary 2 (a + g) d, backward twice forward.
  // torchtitan eager (model.py at 1ea476e9f): rotary 20 per q and k element each way (.float()
  // 6, complex mul 8, type_as 6), SwiGLU 10 f forward and 18 f backward, repeat_kv's copy of k
  // and v 2 (gd + ad) x 2 each way. The fsdp backward adds the three GEMMs (T 8192 rows) and
  // its forward's memory-bound bytes, all over the HBM at hbm_efficiency, per layer (32).
  // Under fsdp (FSDP2, ZeRO 3) each layer also pays FSDP's copies (fsdp_unit_pass_bytes) for
  // its P = h ad + 2 h gd + ad h + 3 h f + 2 h = 218,112,000 parameters: the all-gather
  // copy-out 4 P forward and again backward, the fp32 reduce-scatter copy-in 6 P backward;
  // megatron has none.
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const double T = 8192, h = 4096, f = 14336, ad = 4096, gd = 1024;
  const double gemms = gemm_seconds(cluster, T, gd, h) + gemm_seconds(cluster, T, h, ad) +
                       gemm_seconds(cluster, T, f, h);
  const double shared = 2.0 * (4 * T * h + 6 * T * h);
  const double fused = 2.0 * (3 * T * f + 2 * T * (ad + gd));
  const double eager_forward = 20 * T * (ad + gd) + 10 * T * f + 4 * T * (ad + gd);
  const double eager_backward = 20 * T * (ad + gd) + 18 * T * f + 4 * T * (ad + gd);
  const double bandwidth = cluster.gpu.hbm_bytes_per_second * cluster.efficiency.hbm_efficiency;
  const double p = h * ad + 2 * h * gd + ad * h + 3 * h * f + 2 * h;
  const double copies_forward = 4 * p, copies_backward = 4 * p + 6 * p;
  const PlanEstimate megatron = op_sac_estimate(Framework::kMegatron, Recompute::kSelective);
  const PlanEstimate fsdp = op_sac_estimate(Framework::kFsdp, Recompute::kSelectiveOp);
  const double added = fsdp.stages[0].chunks[0].backward_input_compute_seconds -
                       megatron.stages[0].chunks[0].backward_input_compute_seconds;
  const double recompute = gemms + (shared + eager_forward) / bandwidth;
  CHECK(p == 218'112'000.0);
  CHECK(added ==
        doctest::Approx(32 *
                        (recompute + (eager_backward - 2.0 * fused + copies_backward) / bandwidth))
            .epsilon(1e-12)
            .scale(0));
  CHECK(fsdp.stages[0].chunks[0].forward_seconds() -
            megatron.stages[0].chunks[0].forward_seconds() ==
        doctest::Approx(32 * (eager_forward - fused + copies_forward) / bandwidth)
            .epsilon(1e-9)
            .scale(0));
}

TEST_CASE("inventory: FSDP selective re-gathers the sequence-parallel forward inputs") {
  // torchtitan's op policy saves reduce-scatter outputs, not all-gather outputs: with tp 2 and
  // sequence parallelism the 2 forward all-gathers per layer run twice per micro-batch:
  // 2 x 32 layers x 4 micro-batches (global 8 / dp 2 / mb 1) x 2 = 512 calls; 256 without.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  Layout layout = make_layout(2, 1, 2, 1, 8);
  layout.zero = 3;
  layout.sequence_parallel = true;
  const auto forward_gathers = [&](Framework framework, Recompute recompute) {
    layout.recompute = recompute;
    PlanOptions options;
    options.framework = framework;
    const PlanEstimate e = estimate_plan(model, models::load_cluster("dgx-h100"), layout, options);
    for (const CollectiveTraffic& c : e.collectives) {
      if (c.what == "tp: layer forward all-gathers (QKV in, MLP in)") {
        return c.calls_per_step;
      }
    }
    return int64_t{-1};
  };
  CHECK(forward_gathers(Framework::kFsdp, Recompute::kSelectiveOp) == 512);
  CHECK(forward_gathers(Framework::kFsdp, Recompute::kNone) == 256);
  CHECK(forward_gathers(Framework::kMegatron, Recompute::kSelective) == 256);
}

TEST_CASE("FSDP selective recompute of an MoE model is refused, not costed as dense") {
  // ZeRO 0 (DDP over dp_replicate): meshplan has no ZeRO-3 for MoE (moe_zero3).
  const models::TransformerConfig model = models::load_model("mixtral-8x7b");
  Layout layout = make_layout(1, 1, 8, 1, 8);
  layout.recompute = Recompute::kSelectiveOp;
  PlanOptions options;
  options.framework = Framework::kFsdp;
  const PlanEstimate e = estimate_plan(model, models::load_cluster("dgx-h100"), layout, options);
  CHECK_FALSE(e.feasible);
  CHECK(e.rejection_code == "framework");
  CHECK(e.rejection_reason.find("op-level selective recompute") != std::string::npos);
}

TEST_CASE("hardware FLOPs: selective-op under tp re-runs each rank's share of wk, wo, w3") {
  // tp 2, dp 4: each rank runs the same mm calls on its column/row shards, so the re-run
  // FLOPs of all ranks sum to the tp 1 figure above: 41,781,441,855,488 per sequence, 8
  // sequences; the model FLOPs are unchanged.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  Layout layout = make_layout(2, 1, 4, 1, 8);
  layout.zero = 3;
  PlanOptions options;
  options.framework = Framework::kFsdp;
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  layout.recompute = Recompute::kNone;
  const PlanEstimate none = estimate_plan(model, cluster, layout, options);
  layout.recompute = Recompute::kSelectiveOp;
  const PlanEstimate op = estimate_plan(model, cluster, layout, options);
  REQUIRE(op.rejection_code.empty());
  CHECK(op.hardware_flops_per_step - none.hardware_flops_per_step ==
        doctest::Approx(8 * 41'781'441'855'488.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("hardware FLOPs: fsdp full recompute stops before w2 (non-reentrant early stop)") {
  // torch.utils.checkpoint's early stop ends the recompute when w2's inputs are saved, before
  // w2 runs: per token and layer 2 h f = 2 x 4096 x 14336 = 117,440,512 FLOPs not re-run; x 32
  // layers x 8192 tokens = 30,786,325,577,728 per sequence, 8 sequences. Megatron's
  // CheckpointFunction re-runs the whole layer.
  const PlanEstimate megatron = op_sac_estimate(Framework::kMegatron, Recompute::kFull);
  const PlanEstimate fsdp = op_sac_estimate(Framework::kFsdp, Recompute::kFull);
  REQUIRE(megatron.rejection_code.empty());
  REQUIRE(fsdp.rejection_code.empty());
  CHECK(megatron.hardware_flops_per_step - fsdp.hardware_flops_per_step ==
        doctest::Approx(8 * 30'786'325'577'728.0).epsilon(kFlopsRoundingTolerance).scale(0));
}

TEST_CASE("time: fsdp full recompute skips w2's GEMM unless dropout's mask is saved after it") {
  // With dropout the last saved tensor is native_dropout's mask, saved after w2 runs: only the
  // final residual add is skipped, as without dropout. So (full - none) of the input-gradient
  // time grows with dropout by w2's GEMM (T 8192 rows, n h, k f) plus what dropout adds to the
  // recomputed forward: the two residual adds' 1-byte masks, 2 T h bytes over the HBM, per
  // layer (32).
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const double T = 8192, h = 4096, f = 14336;
  const double bandwidth = cluster.gpu.hbm_bytes_per_second * cluster.efficiency.hbm_efficiency;
  const auto recompute_seconds = [&](bool dropout) {
    models::TransformerConfig model = models::load_model("llama3-8b");
    model.dropout = dropout;
    Layout layout = make_layout(1, 1, 8, 1, 8);
    layout.zero = 3;
    PlanOptions options;
    options.framework = Framework::kFsdp;
    layout.recompute = Recompute::kNone;
    const PlanEstimate none = estimate_plan(model, cluster, layout, options);
    layout.recompute = Recompute::kFull;
    const PlanEstimate full = estimate_plan(model, cluster, layout, options);
    REQUIRE(full.rejection_code.empty());
    return full.stages[0].chunks[0].backward_input_compute_seconds -
           none.stages[0].chunks[0].backward_input_compute_seconds;
  };
  CHECK(recompute_seconds(true) - recompute_seconds(false) ==
        doctest::Approx(32 * (gemm_seconds(cluster, T, h, f) + 2 * T * h / bandwidth))
            .epsilon(1e-9)
            .scale(0));
}

TEST_CASE("inventory: fsdp full recompute does not re-run the MLP's reduce-scatter") {
  // tp 2, sequence parallel: 2 forward reduce-scatters per layer (attention out, MLP out), 32
  // layers, 4 micro-batches (global 8 / dp 2 / mb 1): 256 without recompute; Megatron's full
  // recompute re-runs both (512); under fsdp early stop ends before w2, so its reduce-scatter
  // is not re-run: 512 - 32 x 4 = 384.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  Layout layout = make_layout(2, 1, 2, 1, 8);
  layout.zero = 3;
  layout.sequence_parallel = true;
  const auto forward_scatters = [&](Framework framework, Recompute recompute) {
    layout.recompute = recompute;
    PlanOptions options;
    options.framework = framework;
    const PlanEstimate e = estimate_plan(model, models::load_cluster("dgx-h100"), layout, options);
    for (const CollectiveTraffic& c : e.collectives) {
      if (c.what == "tp: layer forward reduce-scatters (attention out, MLP out)") {
        return c.calls_per_step;
      }
    }
    return int64_t{-1};
  };
  CHECK(forward_scatters(Framework::kFsdp, Recompute::kNone) == 256);
  CHECK(forward_scatters(Framework::kMegatron, Recompute::kFull) == 512);
  CHECK(forward_scatters(Framework::kFsdp, Recompute::kFull) == 384);
}

TEST_CASE("selective-op runs under fsdp only; fsdp has no attention-core selective") {
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const auto refusal = [&](Framework framework, Recompute recompute) {
    Layout layout = make_layout(1, 1, 8, 1, 8);
    layout.recompute = recompute;
    PlanOptions options;
    options.framework = framework;
    const PlanEstimate e = estimate_plan(model, cluster, layout, options);
    return e.rejection_code == "framework" ? e.rejection_reason : std::string();
  };
  CHECK(refusal(Framework::kMegatron, Recompute::kSelectiveOp)
            .starts_with("megatron cannot run this layout: selective-op is torchtitan's"));
  CHECK(refusal(Framework::kDeepSpeed, Recompute::kSelectiveOp)
            .starts_with("deepspeed cannot run this layout: selective-op is torchtitan's"));
  CHECK(refusal(Framework::kMeshplan, Recompute::kSelectiveOp)
            .starts_with("meshplan cannot run this layout: selective-op is torchtitan's"));
  CHECK(refusal(Framework::kFsdp, Recompute::kSelective)
            .starts_with("fsdp cannot run this layout: torchtitan has no attention-core"));
  CHECK(refusal(Framework::kFsdp, Recompute::kSelectiveOp).empty());
  CHECK(refusal(Framework::kMegatron, Recompute::kSelective).empty());
}

TEST_CASE("MFU, HFU, model TFLOP/s per GPU and tokens/s from the step time") {
  // MFU = model FLOPs / (step time * GPUs * peak) with the A100's dense bf16 peak 312e12 FLOP/s
  // (NVIDIA A100 datasheet); HFU the same with the executed FLOPs.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  Layout layout = make_layout(2, 2, 2, 1, 16);
  layout.recompute = Recompute::kFull;
  const PlanEstimate e = estimate_plan(model, models::load_cluster("dgx-a100-80gb"), layout);
  REQUIRE(e.step_time_s > 0);
  const double gpus = 8;  // tp 2 * pp 2 * dp 2
  CHECK(e.mfu == doctest::Approx(kModelFlops7b / (e.step_time_s * gpus * 312e12))
                     .epsilon(kFlopsRoundingTolerance)
                     .scale(0));
  CHECK(e.hfu == doctest::Approx(2'099'517'453'238'272.0 / (e.step_time_s * gpus * 312e12))
                     .epsilon(kFlopsRoundingTolerance)
                     .scale(0));
  CHECK(e.model_tflops_per_gpu == doctest::Approx(kModelFlops7b / (e.step_time_s * gpus) / 1e12)
                                      .epsilon(kFlopsRoundingTolerance)
                                      .scale(0));
  CHECK(e.tokens_per_s == doctest::Approx(16.0 * 2048.0 / e.step_time_s)
                              .epsilon(kFlopsRoundingTolerance)
                              .scale(0));  // B s / t
}

}  // namespace
}  // namespace meshplan::planner
