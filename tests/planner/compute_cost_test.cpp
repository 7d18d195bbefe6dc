// planner/compute_cost.cpp: gemm_seconds, the GEMM time by its whole shape, checked against the
// formula worked out by hand, e = e_max / (1 + x_half (1/K + 0.2 (1/M + 1/N))); the attention
// core; the memory-bound passes of the loss, embedding and dropout, counted from the source.

#include "compute_cost.h"

#include <doctest/doctest.h>

#include <string>

#include "loss_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "optimizer_cost.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

// Products and quotients of exact inputs in another order: rounding only.
constexpr double kRounding = 1e-12;

TEST_CASE("gemm_seconds: the 1T model's QKV GEMM at tp 8 on A100, by hand") {
  // dgx-a100-80gb: peak 312e12, e_max 0.795, x_half 384. M 2048 tokens, N 3 x 25600 / 8 = 9600,
  // K 25600: 1/K + 0.2 (1/M + 1/N) = 3.90625e-5 + 0.2 (4.8828125e-4 + 1.0416667e-4)
  // = 1.5755208e-4; x 384 = 0.0605; e = 0.795 / 1.0605 = 0.7496464.
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const double m = 2048, n = 9600, k = 25600;
  const double inverse_size = 1.0 / 25600 + 0.2 * (1.0 / 2048 + 1.0 / 9600);
  const double efficiency = 0.795 / (1.0 + 384.0 * inverse_size);
  CHECK(efficiency ==
        doctest::Approx(0.7496464).epsilon(1e-6).scale(0));  // the hand figure, 7 digits
  CHECK(gemm_inverse_size(m, n, k) == doctest::Approx(inverse_size).epsilon(kRounding).scale(0));
  CHECK(gemm_seconds(a100, m, n, k) ==
        doctest::Approx(2.0 * m * n * k / (312e12 * efficiency)).epsilon(kRounding).scale(0));
}

TEST_CASE("gemm_seconds: the reduced dimension K weighs five times M or N") {
  // Same FLOPs, same smallest dimension (2048), different shapes: the earlier min-dimension
  // curve gave all three 0.75 x 2048 / (2048 + 192) of peak. Now (dgx-a100-80gb):
  //   2048 x 2304 x 2304:  u = 1/2304 + 0.2 (1/2048 + 1/2304) = 6.18490e-4, e = 0.795 / 1.2375
  //   2304 x 2304 x 2048:  u = 1/2048 + 0.2 (2/2304)          = 6.61892e-4, e = 0.795 / 1.2541667
  //   2048 x 25600 x 25600 (123 times the FLOPs): u = 1/25600 + 0.2 (1/2048 + 1/25600)
  //                                                         = 1.4453125e-4, e = 0.795 / 1.0555
  const models::ClusterConfig a100 = models::load_cluster("dgx-a100-80gb");
  const auto achieved = [&](double m, double n, double k) {
    return 2.0 * m * n * k / gemm_seconds(a100, m, n, k) / 312e12;
  };
  CHECK(achieved(2048, 2304, 2304) == doctest::Approx(0.795 / 1.2375).epsilon(1e-6).scale(0));
  CHECK(achieved(2304, 2304, 2048) == doctest::Approx(0.795 / 1.2541667).epsilon(1e-6).scale(0));
  CHECK(achieved(2048, 25600, 25600) == doctest::Approx(0.795 / 1.0555).epsilon(1e-6).scale(0));
  // M and N are symmetric: the output's two sides.
  CHECK(gemm_seconds(a100, 2048, 9600, 25600) ==
        doctest::Approx(gemm_seconds(a100, 9600, 2048, 25600)).epsilon(kRounding).scale(0));
}

TEST_CASE("gemm_seconds: a cube of side x runs at e_max x / (x + 1.4 x_half)") {
  // 1/x + 0.2 (2/x) = 1.4 / x. dgx-h100: peak 989.4e12, e_max 0.61, x_half 768; x = 8192:
  // e = 0.61 x 8192 / (8192 + 1075.2) = 0.539227.
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const double x = 8192;
  const double efficiency = 0.61 * x / (x + 1.4 * 768.0);
  CHECK(efficiency ==
        doctest::Approx(0.539227).epsilon(1e-5).scale(0));  // the hand figure, 6 digits
  CHECK(gemm_seconds(h100, x, x, x) ==
        doctest::Approx(2.0 * x * x * x / (989.4e12 * efficiency)).epsilon(kRounding).scale(0));
}

TEST_CASE("flash attention: the causal half of the square, its backward 2.5 x the forward") {
  // Llama-2 7B on dgx-h100, one sequence of 4,096 tokens, tp 1: Megatron's square count
  // 4 s^2 a d = 4 x 4096^2 x 32 x 128 = 274,877,906,944 FLOPs; a causal flash kernel does half,
  // 137,438,953,472, which FlashAttention's benchmark (and the efficiency) counts: at
  // 989.4e12 x attention_efficiency. Unfused, the two batched GEMMs per head (s x s x d and
  // s x d x s) plus reading and writing the a s^2 scores in 2 bytes.
  const models::TransformerConfig model = models::load_model("llama2-7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 1, 1, 1, 1);
  PlanOptions flash;
  const double causal_flops = 137438953472.0;
  CHECK(attention_forward_seconds(model, h100, layout, flash, false) ==
        doctest::Approx(causal_flops / (989.4e12 * h100.efficiency.attention_efficiency))
            .epsilon(kRounding)
            .scale(0));
  CHECK(attention_backward_to_forward(flash) == 2.5);
  PlanOptions unfused;
  unfused.flash_attention = false;
  const double heads = 32;
  const double unfused_seconds =
      heads * (gemm_seconds(h100, 4096, 4096, 128) + gemm_seconds(h100, 4096, 128, 4096)) +
      2.0 * heads * 4096.0 * 4096.0 * 2.0 /
          (h100.gpu.hbm_bytes_per_second * h100.efficiency.hbm_efficiency);
  CHECK(attention_forward_seconds(model, h100, layout, unfused, false) ==
        doctest::Approx(unfused_seconds).epsilon(kRounding).scale(0));
  CHECK(attention_backward_to_forward(unfused) == 2.0);
}

TEST_CASE("flash attention version 1: the causal half at half FlashAttention-2's rate") {
  // MPT-13B as llm-foundry benchmarked it (h 5120, 40 heads of 128, seq 2048), micro-batch 2,
  // on dgx-h100: the causal half of Megatron's square, 4 b s^2 a d / 2 = 2 x 2 x 2048^2 x 5120
  // = 85,899,345,920 FLOPs per layer, at 989.4e12 x attention_efficiency / 2 (Dao 2023:
  // FlashAttention-2 about twice FlashAttention-1). The backward keeps its 2.5 x.
  models::TransformerConfig model = models::load_model("llama2-7b");
  model.hidden_size = 5120;
  model.num_attention_heads = 40;
  model.num_kv_heads = 40;
  model.head_dim = 128;
  model.seq_length = 2048;
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 1, 1, 2, 2);
  PlanOptions v1;
  v1.flash_attention_version = 1;
  const double causal_flops = 85899345920.0;
  CHECK(attention_forward_seconds(model, h100, layout, v1, false) ==
        doctest::Approx(causal_flops / (989.4e12 * h100.efficiency.attention_efficiency * 0.5))
            .epsilon(kRounding)
            .scale(0));
  CHECK(attention_backward_to_forward(v1) == 2.5);
}

TEST_CASE("flash_attention_version: only 1 or 2, 1 only with a fused kernel and not meshplan") {
  PlanOptions options;
  options.flash_attention_version = 3;
  CHECK_THROWS_WITH_AS(check_flash_attention_version(options, "--flash-attention-version"),
                       "--flash-attention-version: expected 1 or 2 (3)", InputError);
  options.flash_attention_version = 1;
  CHECK_NOTHROW(check_flash_attention_version(options, "--flash-attention-version"));
  options.flash_attention = false;
  CHECK_THROWS_WITH_AS(check_flash_attention_version(options, "--flash-attention-version"),
                       "--flash-attention-version: 1 needs flash_attention on (unfused attention "
                       "has no kernel generation)",
                       InputError);
  options.flash_attention = true;
  options.framework = Framework::kMeshplan;
  CHECK_THROWS_WITH_AS(check_flash_attention_version(options, "--flash-attention-version"),
                       "--flash-attention-version: 1 under framework meshplan: the executor runs "
                       "its own fused kernel",
                       InputError);
}

TEST_CASE("fsdp_version: only 1 or 2, 1 only under framework fsdp") {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.fsdp_version = 3;
  CHECK_THROWS_WITH_AS(check_fsdp_version(options, "--fsdp-version"),
                       "--fsdp-version: expected 1 or 2 (3)", InputError);
  options.fsdp_version = 1;
  CHECK_NOTHROW(check_fsdp_version(options, "--fsdp-version"));
  options.framework = Framework::kMegatron;
  CHECK_THROWS_WITH_AS(check_fsdp_version(options, "--fsdp-version"),
                       "--fsdp-version: 1 needs framework fsdp (framework megatron)", InputError);
}

TEST_CASE("cross-entropy: Megatron-Core's unfused passes, bytes per logit element") {
  // bf16 logits. Forward: .float() read 2 + write 4, max read 4, x - max read 4 + write 4, exp
  // read 4 + write 4, sum read 4, / sum read 4 + write 4 = 6 + 4 + 8 + 8 + 4 + 8 = 38.
  // Backward: x grad_output read 4 + write 4, the cast back to bf16 read 4 + write 2 = 14.
  const PassBytes bf16 = cross_entropy_bytes_per_logit(2.0, CrossEntropyFusion::kOff);
  CHECK(bf16.forward == 38.0);
  CHECK(bf16.backward == 14.0);
  // fp32 logits: no casts, 32 and 8.
  const PassBytes fp32 = cross_entropy_bytes_per_logit(4.0, CrossEntropyFusion::kOff);
  CHECK(fp32.forward == 32.0);
  CHECK(fp32.backward == 8.0);
}

TEST_CASE("cross-entropy: Megatron-Core's fused kernels move fewer bytes per logit") {
  // native (fused_cross_entropy.py, three compiled kernels), bf16 logits. Forward: cast + max
  // read 2 + write 4; subtract, exp and sum read 4 + write 4; divide read 4 + write 4: 22.
  // Backward: the in-place multiply read 4 + write 4 and its bf16 result write 2: 10.
  const PassBytes native = cross_entropy_bytes_per_logit(2.0, CrossEntropyFusion::kNative);
  CHECK(native.forward == 22.0);
  CHECK(native.backward == 10.0);
  // fp32 logits: no cast (max reads 4), the gradient still returned in bf16: 20 and 10.
  const PassBytes native_fp32 = cross_entropy_bytes_per_logit(4.0, CrossEntropyFusion::kNative);
  CHECK(native_fp32.forward == 20.0);
  CHECK(native_fp32.backward == 10.0);
  // te (Transformer Engine's Triton kernels), bf16: online softmax read 2, loss-and-gradient
  // read 2 + write 2 in place: 6; backward the in-place scale read 2 + write 2: 4.
  const PassBytes te = cross_entropy_bytes_per_logit(2.0, CrossEntropyFusion::kTe);
  CHECK(te.forward == 6.0);
  CHECK(te.backward == 4.0);
  // The fusions' saving against the eager loss: 38 + 14 = 52 bytes per logit against 32 and 10.
  const PassBytes eager = cross_entropy_bytes_per_logit(2.0, CrossEntropyFusion::kOff);
  CHECK(eager.forward + eager.backward - (native.forward + native.backward) == 20.0);
  CHECK(eager.forward + eager.backward - (te.forward + te.backward) == 42.0);
}

TEST_CASE("cross_entropy_loss_fusion: the loss's bytes change by the ratio counted by hand") {
  // Same plan, only the loss differs; the change in the last chunk's forward and backward time
  // is the change in bytes per logit times the same T V / t over the same bandwidth, so its
  // ratio between two fusions is a ratio of byte counts: forward (38 - 22) / (38 - 6) = 0.5,
  // backward input (14 - 10) / (14 - 4) = 0.4.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(2, 1, 4, 1, 8);
  PlanOptions options;
  const ChunkCost off = estimate_plan(model, cluster, layout, options).stages[0].chunks[0];
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kNative;
  const ChunkCost native = estimate_plan(model, cluster, layout, options).stages[0].chunks[0];
  options.cross_entropy_loss_fusion = CrossEntropyFusion::kTe;
  const ChunkCost te = estimate_plan(model, cluster, layout, options).stages[0].chunks[0];
  const double forward_saving = off.forward_compute_seconds - native.forward_compute_seconds;
  CHECK(forward_saving > 0);
  CHECK(forward_saving / (off.forward_compute_seconds - te.forward_compute_seconds) ==
        doctest::Approx(0.5).epsilon(1e-9).scale(0));
  CHECK((off.backward_input_compute_seconds - native.backward_input_compute_seconds) /
            (off.backward_input_compute_seconds - te.backward_input_compute_seconds) ==
        doctest::Approx(0.4).epsilon(1e-9).scale(0));
  // Only Megatron-Core has the switch.
  for (const Framework framework :
       {Framework::kFsdp, Framework::kDeepSpeed, Framework::kMeshplan}) {
    options.framework = framework;
    const std::string expected = "cross_entropy_loss_fusion: framework " + to_string(framework);
    CHECK_THROWS_WITH_AS(estimate_plan(model, cluster, layout, options),
                         doctest::Contains(expected.c_str()), InputError);
  }
  CHECK_THROWS_WITH_AS(parse_cross_entropy_fusion("on", "x"),
                       doctest::Contains("x: unknown cross_entropy_loss_fusion"), InputError);
}

TEST_CASE("optimizer step: Adam alone, and Megatron's per-step passes, bytes by hand") {
  // Adam alone: read G, read + write p, m, v (24), write the bf16 weights (2).
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kAdamOnly).per_updated_parameter == 30.0);
  CHECK(optimizer_step_bytes(2, 2, OptimizerPasses::kAdamOnly).per_updated_parameter == 28.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kAdamOnly).per_grad_buffer_parameter == 0.0);
  // Megatron, fp32 main_grad (G 4, aliased as the main grad): norm read 4, Adam read 4 + 24,
  // main-to-model read 4 + write 2: 38; zero_grad_buffer writes 4 per buffer parameter.
  const OptimizerBytes fp32_grads = optimizer_step_bytes(4, 2, OptimizerPasses::kMegatron);
  CHECK(fp32_grads.per_updated_parameter == 38.0);
  CHECK(fp32_grads.per_grad_buffer_parameter == 4.0);
  // bf16 buffer (G 2): the .float() copy read 2 + write 4 first: 6 + 38 = 44; zeroing 2.
  const OptimizerBytes bf16_grads = optimizer_step_bytes(2, 2, OptimizerPasses::kMegatron);
  CHECK(bf16_grads.per_updated_parameter == 44.0);
  CHECK(bf16_grads.per_grad_buffer_parameter == 2.0);
  // fp32 training: no copies, norm 4 + Adam 4 + 24 = 32, zeroing 4.
  const OptimizerBytes fp32_training = optimizer_step_bytes(4, 4, OptimizerPasses::kMegatron);
  CHECK(fp32_training.per_updated_parameter == 32.0);
  CHECK(fp32_training.per_grad_buffer_parameter == 4.0);
  // Averaged over 8 data-parallel ranks: the in-place scaling by 1/8 before the collectives
  // reads and writes the buffer (fp32: 8 more per buffer parameter, bf16: 4); the update's
  // bytes do not change. Over one rank the factor is 1 and no pass runs.
  const OptimizerBytes averaged =
      optimizer_step_bytes(4, 2, OptimizerPasses::kMegatron, OptimizerImpl::kFused, true, 8);
  CHECK(averaged.per_updated_parameter == 38.0);
  CHECK(averaged.per_grad_buffer_parameter == 4.0 + 8.0);
  CHECK(optimizer_step_bytes(2, 2, OptimizerPasses::kMegatron, OptimizerImpl::kFused, true, 8)
            .per_grad_buffer_parameter == 2.0 + 4.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kMegatron, OptimizerImpl::kFused, true, 1)
            .per_grad_buffer_parameter == 4.0);
  // Adam alone and FSDP run no such pass here (FSDP1's divide is per unit: fsdp_unit_pass_bytes).
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kAdamOnly, OptimizerImpl::kFused, true, 8)
            .per_grad_buffer_parameter == 0.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kFsdp, OptimizerImpl::kFused, true, 8)
            .per_grad_buffer_parameter == 0.0);
}

TEST_CASE("optimizer step under fsdp: clipping plus each Adam implementation, bytes by hand") {
  // FSDP steps on fp32 shards whatever the reduce dtype (G = 4), writes no 16-bit copy, and
  // clips first: norm read 4 + scale read 4 write 4 = 12.
  // fused: read g 4, read + write p, m, v 24: 12 + 28 = 40, bf16 reduce or not.
  CHECK(optimizer_step_bytes(2, 2, OptimizerPasses::kFsdp).per_updated_parameter == 40.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kFsdp).per_updated_parameter == 40.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kFsdp).per_grad_buffer_parameter == 0.0);
  // torch foreach / for-loop, op by op: decay p 8, lerp m (4 + 4 + 4) 12, mul v 8, addcmul v
  // (4 + 4 + 4) 12, sqrt 8, div 8, add 8, addcdiv (12 + 4) 16: 80; 12 + 80 = 92.
  for (const OptimizerImpl impl : {OptimizerImpl::kForeach, OptimizerImpl::kForLoop}) {
    CHECK(optimizer_step_bytes(2, 2, OptimizerPasses::kFsdp, impl, true).per_updated_parameter ==
          92.0);
    // Without decay the p pass goes: 84.
    CHECK(optimizer_step_bytes(2, 2, OptimizerPasses::kFsdp, impl, false).per_updated_parameter ==
          84.0);
  }
  // Composer's DecoupledAdamW: m.mul_ 8 and m.add_ 12 instead of lerp 12: 88 + 12 = 100, and
  // 92 without decay (the llm-foundry MPT yamls' weight_decay 0.0).
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kFsdp, OptimizerImpl::kComposer, true)
            .per_updated_parameter == 100.0);
  CHECK(optimizer_step_bytes(4, 2, OptimizerPasses::kFsdp, OptimizerImpl::kComposer, false)
            .per_updated_parameter == 92.0);
  // The implementation reaches the step time: 1e9 updated parameters of a megatron-1.7b-like
  // fsdp plan on dgx-h100 move 92e9 bytes under foreach against 40e9 fused.
  PlanOptions fused;
  fused.framework = Framework::kFsdp;
  PlanOptions foreach_options = fused;
  foreach_options.optimizer_impl = OptimizerImpl::kForeach;
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const double fused_s =
      optimizer_step_seconds(h100, 1000000000, 2, 0, OptimizerPasses::kFsdp, fused, 8);
  const double foreach_s =
      optimizer_step_seconds(h100, 1000000000, 2, 0, OptimizerPasses::kFsdp, foreach_options, 8);
  CHECK(foreach_s / fused_s == doctest::Approx(92.0 / 40.0).scale(0));
}

TEST_CASE("optimizer implementation: parsed by name, unfused only under fsdp, decay off unfused") {
  CHECK(parse_optimizer_impl("for-loop", "x") == OptimizerImpl::kForLoop);
  CHECK(to_string(OptimizerImpl::kComposer) == "composer");
  CHECK_THROWS_WITH_AS(parse_optimizer_impl("adamw", "--optimizer-impl"),
                       doctest::Contains("--optimizer-impl: unsupported optimizer implementation "
                                         "(adamw)"),
                       InputError);
  PlanOptions options;
  options.optimizer_impl = OptimizerImpl::kForeach;
  for (const Framework framework :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kMeshplan}) {
    options.framework = framework;
    const std::string expected = "f: foreach under framework " + to_string(framework);
    CHECK_THROWS_WITH_AS(check_optimizer_impl_options(options, "f"),
                         doctest::Contains(expected.c_str()), InputError);
  }
  options.framework = Framework::kFsdp;
  CHECK_NOTHROW(check_optimizer_impl_options(options, "f"));
  options.weight_decay = false;
  CHECK_NOTHROW(check_weight_decay_options(options, "w"));
  options.optimizer_impl = OptimizerImpl::kFused;
  CHECK_THROWS_WITH_AS(check_weight_decay_options(options, "w"),
                       doctest::Contains("w: off with the fused optimizer"), InputError);
}

// megatron-1.7b (h 2304, V 51200, s 2048, learned positions, dropout) on dgx-h100 at tp 1,
// micro-batch 1: T = 2048 tokens, T h = 4,718,592, HBM 3.35e12 x 0.8 = 2.68e12 B/s.
constexpr double kTokensTimesHidden = 4718592.0;
constexpr double kH100Bandwidth = 3.35e12 * 0.8;

TEST_CASE("embedding_bytes: lookup, position add, dropout; the dense table gradient") {
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 2, 1, 1, 1);
  // Forward, bf16: word lookup read + write (4 T h), position lookup (4 T h) and add (6 T h),
  // no copy at micro-batch 1, dropout read + write + mask (5 T h): 19 T h = 89,653,248.
  PlanOptions megatron;
  const PassBytes bytes = embedding_bytes(model, h100, layout, megatron);
  CHECK(bytes.forward == doctest::Approx(19.0 * kTokensTimesHidden).epsilon(kRounding).scale(0));
  CHECK(19.0 * kTokensTimesHidden == 89653248.0);
  // Backward: the two lookups' gradients (2 x 4 T h), dropout (5 T h): 61,341,696; the dense
  // gradient of (51,200 + 2,048) x 2304 rows zeroed in bf16: 245,366,784; Megatron adds it
  // into the fp32 main_grad (read 2, read 4, write 4): 1,226,833,920. Total 1,533,542,400.
  CHECK(bytes.backward == doctest::Approx(1533542400.0).epsilon(kRounding).scale(0));
  // FSDP (torchtitan) has no main_grad accumulation: 61,341,696 + 245,366,784.
  PlanOptions fsdp;
  fsdp.framework = Framework::kFsdp;
  CHECK(embedding_bytes(model, h100, layout, fsdp).backward ==
        doctest::Approx(306708480.0).epsilon(kRounding).scale(0));
  // Gemma's x sqrt(h) (scale_embeddings): one more read and write of T h in bf16 each way,
  // 4 T h = 18,874,368 bytes.
  models::TransformerConfig scaled = model;
  scaled.scale_embeddings = true;
  const PassBytes scaled_bytes = embedding_bytes(scaled, h100, layout, megatron);
  CHECK(scaled_bytes.forward - bytes.forward ==
        doctest::Approx(18874368.0).epsilon(kRounding).scale(0));
  CHECK(scaled_bytes.backward - bytes.backward ==
        doctest::Approx(18874368.0).epsilon(kRounding).scale(0));
}

TEST_CASE("chunk_cost: the last stage's head and loss against the first stage's embedding") {
  // pp 2, 12 layers each: the stages differ by the embedding (stage 0) and the final norm, LM
  // head GEMM and loss (stage 1). Loss over T V = 2048 x 51200 = 104,857,600 logits: 38 and
  // 14 bytes each; final norm 2 T h e forward (18,874,368), 4 T h e backward (37,748,736).
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 2, 1, 1, 1);
  const PlanOptions options;
  const ChunkCost first = chunk_cost(model, h100, layout, options, 0, 0);
  const ChunkCost last = chunk_cost(model, h100, layout, options, 1, 0);
  const double head_gemm = gemm_seconds(h100, 2048, 51200, 2304);
  const double logits = 104857600.0;
  CHECK(last.forward_compute_seconds - first.forward_compute_seconds ==
        doctest::Approx(head_gemm + (18874368.0 + 38.0 * logits - 89653248.0) / kH100Bandwidth)
            .epsilon(1e-9)
            .scale(0));
  CHECK(last.backward_input_compute_seconds - first.backward_input_compute_seconds ==
        doctest::Approx(head_gemm + (37748736.0 + 14.0 * logits) / kH100Bandwidth)
            .epsilon(1e-9)
            .scale(0));
  CHECK(last.backward_weight_compute_seconds - first.backward_weight_compute_seconds ==
        doctest::Approx(head_gemm - 1533542400.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
}

TEST_CASE("eager element-wise: torchtitan's rope, SwiGLU and GQA repeat kernels, by hand") {
  // a 4, g 2, d 16, f 128 at tp 2: per rank q 2 x 16 = 32 and k 16 elements (48), f 64.
  // bf16 (e 2). Rope per element: .float() read 2 write 4, complex mul read 4 write 4,
  // type_as read 4 write 2 = 20 (backward the same three in reverse: 20); 48 x 20 = 960.
  // SwiGLU per f: silu read 2 write 2, mul read 4 write 2 = 10 (640); backward two muls
  // (read 4, write 2 each) and silu_backward (read 4, write 2) = 18 (1,152). repeat_kv: k and v
  // each read 16 x 2 = 32 and write 32 x 2 = 64: 192 forward, the sum back 192 backward.
  models::TransformerConfig model;
  model.num_attention_heads = 4;
  model.num_kv_heads = 2;
  model.head_dim = 16;
  model.ffn_hidden_size = 128;
  model.activation = models::Activation::kSwiglu;
  model.positions = models::Positions::kRope;
  const PassBytes bf16 = eager_elementwise_bytes_per_token(model, 2, 2.0);
  CHECK(bf16.forward == 960.0 + 640.0 + 192.0);
  CHECK(bf16.backward == 960.0 + 1152.0 + 192.0);
  // fp32 (e 4): the casts are no kernels, rope is the complex mul alone (8 x 48 = 384 each way);
  // SwiGLU 20 per f forward (1,280), 36 backward (2,304); repeat_kv 2 x (64 + 128) = 384.
  const PassBytes fp32 = eager_elementwise_bytes_per_token(model, 2, 4.0);
  CHECK(fp32.forward == 384.0 + 1280.0 + 384.0);
  CHECK(fp32.backward == 384.0 + 2304.0 + 384.0);
  // GELU, learned positions, as many kv heads as query heads (llm-foundry's MPT): none of them.
  model.activation = models::Activation::kGelu;
  model.positions = models::Positions::kLearned;
  model.num_kv_heads = 4;
  const PassBytes none = eager_elementwise_bytes_per_token(model, 2, 2.0);
  CHECK(none.forward == 0.0);
  CHECK(none.backward == 0.0);
}

TEST_CASE("eager RMSNorm: torchtitan's hand-written norm, op by op, by hand") {
  // Per hidden element, bf16 (e 2): forward .float() 2 + 4, pow(2) 4 + 4, mean 4, x * rsqrt
  // 4 + 4, type_as 4 + 2, * weight 2 + 2 = 36. Backward: * weight's grad * weight 2 + 2, grad
  // * output 4 + 2 and its sum 2 (12); type_as's cast back 2 + 4; x * r's grad * r 4 + 4,
  // grad * x 8 + 4, its row sum 4 (24); mean's divide 4; pow's pow(1) copy 4 + 4, 2 * 4 + 4,
  // grad * 8 + 4 (28); the two gradients added 8 + 4; .float()'s cast back 4 + 2 = 92.
  const PassBytes bf16 = eager_rmsnorm_bytes_per_element(2.0);
  CHECK(bf16.forward == 36.0);
  CHECK(bf16.backward == 92.0);
  // fp32 (e 4): no casts; forward 8 + 4 + 8 + 8 = 28, backward 24 + 24 + 4 + 28 + 12 = 92.
  const PassBytes fp32 = eager_rmsnorm_bytes_per_element(4.0);
  CHECK(fp32.forward == 28.0);
  CHECK(fp32.backward == 92.0);
}

TEST_CASE("norm_kernel eager: two norms per layer and the final norm at the eager bytes") {
  // Stage 1 of pp 2 (as below): 12 layers and the final norm, T h = 2048 x 2304 = 4,718,592.
  // GELU, learned positions, as many kv heads as heads: no other eager kernel. Fused, a norm
  // moves 4 bytes per element forward and 8 backward (bf16); eager 36 and 92. Forward: (12 x 2
  // x 32 + 32) T h = 800 T h = 3,774,873,600; backward (12 x 2 x 84 + 84) T h = 2,100 T h =
  // 9,909,043,200.
  models::TransformerConfig model = models::load_model("megatron-1.7b");
  model.norm = models::Norm::kRmsNorm;
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 2, 1, 1, 1);
  PlanOptions fused;
  fused.framework = Framework::kFsdp;
  PlanOptions eager = fused;
  eager.norm_kernel = NormKernel::kEager;
  const ChunkCost on = chunk_cost(model, h100, layout, eager, 1, 0);
  const ChunkCost off = chunk_cost(model, h100, layout, fused, 1, 0);
  CHECK(on.forward_compute_seconds - off.forward_compute_seconds ==
        doctest::Approx(3774873600.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
  CHECK(on.backward_input_compute_seconds - off.backward_input_compute_seconds ==
        doctest::Approx(9909043200.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
}

TEST_CASE("norm_kernel: eager only under fsdp without compile, for rmsnorm models") {
  PlanOptions options;
  options.norm_kernel = NormKernel::kEager;
  CHECK_THROWS_WITH_AS(check_norm_kernel_options(options, "--norm-kernel"),
                       doctest::Contains("--norm-kernel: eager under framework megatron"),
                       InputError);
  options.framework = Framework::kFsdp;
  CHECK_NOTHROW(check_norm_kernel_options(options, "--norm-kernel"));
  options.compile = true;
  CHECK_THROWS_WITH_AS(check_norm_kernel_options(options, "--norm-kernel"),
                       doctest::Contains("--norm-kernel: eager with compile on"), InputError);
  options.compile = false;
  const models::TransformerConfig gpt = models::load_model("megatron-1.7b");  // LayerNorm
  CHECK_THROWS_WITH_AS(check_norm_kernel_model(gpt, options, "--norm-kernel"),
                       doctest::Contains("--norm-kernel: eager: model megatron-1.7b uses "
                                         "layernorm"),
                       InputError);
  CHECK_NOTHROW(check_norm_kernel_model(models::load_model("llama3-8b"), options));
  CHECK(parse_norm_kernel("eager", "f") == NormKernel::kEager);
  CHECK_THROWS_WITH_AS(parse_norm_kernel("Eager", "--norm-kernel"),
                       "--norm-kernel: unsupported norm kernel (Eager); supported: fused, eager",
                       InputError);
}

TEST_CASE("fsdp passes: FSDP2's copy-out and copy-in, FSDP1's gradient cat and pre-divide") {
  // P 1,000 parameters in bf16 (e 2), reduce-scatter in fp32 (r 4) over 8 ranks. FSDP2: the
  // copy-out reads and writes 2 bytes per parameter after each all-gather (4,000 forward,
  // 4,000 backward); the reduce-scatter copy-in reads 2 and writes 4 (6,000 backward); no
  // divide (NCCL averages). FSDP1: the backward's cat of the views' gradients reads 2 and
  // writes 2 (4,000), the pre-divide reads and writes the 4-byte gradient (8,000); nothing
  // forward.
  const PassBytes fsdp2 = fsdp_unit_pass_bytes(2, 1000.0, 2.0, 4.0, 8);
  CHECK(fsdp2.forward == 4000.0);
  CHECK(fsdp2.backward == 4000.0 + 6000.0);
  const PassBytes fsdp1 = fsdp_unit_pass_bytes(1, 1000.0, 2.0, 4.0, 8);
  CHECK(fsdp1.forward == 0.0);
  CHECK(fsdp1.backward == 4000.0 + 8000.0);
  // llm-foundry's bf16 reduce-scatter: FSDP2's copy-in reads 2 and writes 2; FSDP1's pre-divide
  // reads and writes 2 (4,000). On one rank FSDP1 divides by 1: no pass.
  CHECK(fsdp_unit_pass_bytes(2, 1000.0, 2.0, 2.0, 8).backward == 4000.0 + 4000.0);
  CHECK(fsdp_unit_pass_bytes(1, 1000.0, 2.0, 2.0, 64).backward == 4000.0 + 4000.0);
  CHECK(fsdp_unit_pass_bytes(1, 1000.0, 2.0, 2.0, 1).backward == 4000.0);
  // torchao's float8 all-gather, 800 of the 1,000 in fp8: the gathered unit holds 800 bytes
  // less (1,200 bytes), copied out forward and backward (read + write: 2,400 each); the
  // gradients' copy-in stays 6,000.
  const PassBytes fp8 = fsdp_unit_pass_bytes(2, 1000.0, 2.0, 4.0, 8, 800.0);
  CHECK(fp8.forward == 2400.0);
  CHECK(fp8.backward == 2400.0 + 6000.0);
}

TEST_CASE("fsdp_version 1 is refused with precision fp8 (torchao's float8 all-gather is FSDP2's)") {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.fsdp_version = 1;
  CHECK_NOTHROW(check_fsdp_version(options, "--fsdp-version"));
  options.gemm_precision = GemmPrecision::kFp8;
  CHECK_THROWS_WITH_AS(check_fsdp_version(options, "--fsdp-version"),
                       doctest::Contains("--fsdp-version: 1 with precision fp8"), InputError);
}

TEST_CASE("fsdp passes: 24 GPT layers of 12 h^2 + 13 h parameters at ZeRO-3, per FSDP") {
  // megatron-1.7b, h 2304, all biases, LayerNorm: P = 12 x 2304^2 + 13 x 2304 = 63,730,944
  // per layer, 24 layers in the one stage, bf16 on H100 (3.35e12 x 0.8 B/s). fsdp's default
  // reduce dtype is fp32. FSDP1 against ZeRO-2 (no per-micro-batch gather): the cat 24 x 4 P
  // plus the fp32 pre-divide over dp 8, 24 x 8 P: 18,354,511,872 bytes backward, none forward.
  // FSDP2 against FSDP1: 24 x 4 P forward (the copy-out, 6,118,170,624), backward 24 x (4 P +
  // 6 P) against 24 x 12 P: 3,059,085,312 fewer (no pre-divide; the copy-out equals the cat).
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  Layout zero3 = test::make_layout(1, 1, 8, 1, 8);
  zero3.zero = 3;
  Layout zero2 = zero3;
  zero2.zero = 2;
  PlanOptions fsdp2;
  fsdp2.framework = Framework::kFsdp;
  PlanOptions fsdp1 = fsdp2;
  fsdp1.fsdp_version = 1;
  const ChunkCost none = chunk_cost(model, h100, zero2, fsdp1, 0, 0);
  const ChunkCost v1 = chunk_cost(model, h100, zero3, fsdp1, 0, 0);
  const ChunkCost v2 = chunk_cost(model, h100, zero3, fsdp2, 0, 0);
  CHECK(v1.forward_compute_seconds == doctest::Approx(none.forward_compute_seconds).scale(0));
  CHECK(v1.backward_input_compute_seconds - none.backward_input_compute_seconds ==
        doctest::Approx(18354511872.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
  CHECK(v2.forward_compute_seconds - v1.forward_compute_seconds ==
        doctest::Approx(6118170624.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
  CHECK(v2.backward_input_compute_seconds - v1.backward_input_compute_seconds ==
        doctest::Approx(-3059085312.0 / kH100Bandwidth).epsilon(1e-9).scale(0));
}

TEST_CASE("layer dropout: two 1-byte bias-dropout-add masks per token and hidden unit") {
  // Stage 1 of the pp 2 layout above: 12 layers, no embedding. Dropout adds 2 T h bytes per
  // layer forward (9,437,184; 113,246,208 over 12 layers) and, backward = 2 x forward, twice
  // that to the input-gradient backward.
  const models::TransformerConfig with = models::load_model("megatron-1.7b");
  models::TransformerConfig without = with;
  without.dropout = false;
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 2, 1, 1, 1);
  const ChunkCost on = chunk_cost(with, h100, layout, {}, 1, 0);
  const ChunkCost off = chunk_cost(without, h100, layout, {}, 1, 0);
  const double masks_seconds = 113246208.0 / kH100Bandwidth;
  CHECK(on.forward_compute_seconds - off.forward_compute_seconds ==
        doctest::Approx(masks_seconds).epsilon(1e-9).scale(0));
  CHECK(on.backward_input_compute_seconds - off.backward_input_compute_seconds ==
        doctest::Approx(2.0 * masks_seconds).epsilon(1e-9).scale(0));
}

TEST_CASE("parallel block: one tp reduction of the summed branches forward, two inputs' back") {
  // GPT-NeoX's gpt_j_residual (megatron/model/transformer.py): per layer and micro-batch, on
  // tiny at tp 2, T = 64 tokens, e = 4 (local-cpu): the hidden state is 64 x 64 x 4 = 16,384 B.
  // One layer's share: a 4-layer and a 3-layer model differ by one layer.
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  const auto seconds = [&](CollectiveKind kind) {
    return collective_seconds(cluster, kind, 16'384, 2, 1);
  };
  models::TransformerConfig four = models::load_model("tiny");
  four.parallel_residual = true;
  const auto per_layer = [&](const Layout& l, const models::TransformerConfig& model) {
    models::TransformerConfig shorter = model;
    shorter.num_layers = 3;
    const ChunkCost a = chunk_cost(model, cluster, l, PlanOptions{}, 0, 0);
    const ChunkCost b = chunk_cost(shorter, cluster, l, PlanOptions{}, 0, 0);
    return std::pair{a.forward_tp_comm_seconds - b.forward_tp_comm_seconds,
                     a.backward_tp_comm_seconds - b.backward_tp_comm_seconds};
  };
  Layout layout = test::make_layout(2, 1, 1, 2, 16);
  std::pair<double, double> one = per_layer(layout, four);
  CHECK(one.first == doctest::Approx(seconds(CollectiveKind::kAllReduce)).scale(0));
  CHECK(one.second == doctest::Approx(2 * seconds(CollectiveKind::kAllReduce)).scale(0));
  // The sequential block: two each way.
  models::TransformerConfig sequential = four;
  sequential.parallel_residual = false;
  CHECK(per_layer(layout, sequential).first ==
        doctest::Approx(2 * seconds(CollectiveKind::kAllReduce)).scale(0));
  // Sequence parallel: forward the two normed inputs' all-gathers and one reduce-scatter;
  // backward one all-gather of the output gradient and the two inputs' reduce-scatters.
  layout.sequence_parallel = true;
  one = per_layer(layout, four);
  const double gather = seconds(CollectiveKind::kAllGather);
  const double reduce = seconds(CollectiveKind::kReduceScatter);
  CHECK(one.first == doctest::Approx(2 * gather + reduce).scale(0));
  CHECK(one.second == doctest::Approx(gather + 2 * reduce).scale(0));
  // Full recompute runs the forward's collectives again in the backward.
  layout.recompute = Recompute::kFull;
  one = per_layer(layout, four);
  CHECK(one.second == doctest::Approx(3 * gather + 3 * reduce).scale(0));
}

// megatron-1.7b (24 layers, 24 heads of 96, h 2304) at tp 1, T = 2048 tokens in bf16 on H100:
// with `with_feature` applied, the chunk's forward and backward compute grow by the memory time
// of `layer_bytes` (read plus written) per layer forward and twice that backward (layer_time's
// memory_backward).
template <typename Feature>
void check_memory_pass_per_layer(double layer_bytes, Feature with_feature) {
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 1, 1, 1, 1);
  models::TransformerConfig featured = model;
  with_feature(featured);
  const ChunkCost plain = chunk_cost(model, h100, layout, PlanOptions{}, 0, 0);
  const ChunkCost more = chunk_cost(featured, h100, layout, PlanOptions{}, 0, 0);
  CHECK(more.forward_compute_seconds - plain.forward_compute_seconds ==
        doctest::Approx(24 * memory_seconds(h100, layer_bytes)).epsilon(1e-9).scale(0));
  CHECK(more.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(24 * memory_seconds(h100, 2 * layer_bytes)).epsilon(1e-9).scale(0));
}

TEST_CASE("chunk_cost: sandwich norms are two more norm passes per layer") {
  // Gemma 2/3's post-attention and post-MLP norms: per layer forward 2 norms x (read, write)
  // T h e: 2 x 2 x 2048 x 2304 x 2 = 37,748,736 bytes.
  const double layer_bytes = 2.0 * 2.0 * 2048 * 2304 * 2;
  CHECK(layer_bytes == 37748736.0);
  check_memory_pass_per_layer(layer_bytes,
                              [](models::TransformerConfig& model) { model.sandwich_norm = true; });
}

TEST_CASE("chunk_cost: Gemma 2's final soft-cap is three eager passes over the logits") {
  // megatron-1.7b at tp 1, pp 1, T = 2048 tokens in bf16 over its V' padded vocabulary rows:
  // eager c tanh(x / c) is three ops each reading and writing the logits, 6 x 2 T V' bytes
  // forward; backward the product's 2, tanh's 3 (gradient, saved tanh, write), the division's 2
  // element passes: 7 x 2 T V' bytes. Compiled (the loss with it), one pass: 2 e and 3 e.
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 1, 1, 1, 1);
  models::TransformerConfig capped = model;
  capped.final_logit_softcapping = 30.0;
  const double logits = 2048.0 * static_cast<double>(padded_vocab_size(model, 1, PlanOptions{}));
  const ChunkCost plain = chunk_cost(model, h100, layout, PlanOptions{}, 0, 0);
  const ChunkCost soft = chunk_cost(capped, h100, layout, PlanOptions{}, 0, 0);
  // Differences of sums of a few hundred microseconds: 1e-9 relative absorbs the rounding.
  CHECK(soft.forward_compute_seconds - plain.forward_compute_seconds ==
        doctest::Approx(memory_seconds(h100, 6.0 * 2.0 * logits)).epsilon(1e-9).scale(0));
  CHECK(soft.backward_input_compute_seconds - plain.backward_input_compute_seconds ==
        doctest::Approx(memory_seconds(h100, 7.0 * 2.0 * logits)).epsilon(1e-9).scale(0));
  CHECK(soft.backward_weight_compute_seconds == plain.backward_weight_compute_seconds);
  CHECK(softcap_bytes_per_element(2.0, true).forward == 4.0);
  CHECK(softcap_bytes_per_element(2.0, true).backward == 6.0);
}

TEST_CASE("attention soft-cap: free in FlashAttention, eager passes over the unfused scores") {
  // megatron-1.7b (24 heads) at tp 1, micro-batch 1, s 2048, bf16. FlashAttention-2 >= 2.6.0
  // caps the scores on chip: no change. Unfused, three eager ops each reading and writing the
  // a s^2 b scores: 6 x 2 x 24 x 2048^2 bytes more per layer forward, twice that backward
  // (attention_backward_to_forward 2.0), on 24 layers.
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const Layout layout = test::make_layout(1, 1, 1, 1, 1);
  models::TransformerConfig capped = model;
  capped.attn_logit_softcapping = 50.0;
  const PlanOptions flash;
  CHECK(attention_forward_seconds(capped, h100, layout, flash, false) ==
        attention_forward_seconds(model, h100, layout, flash, false));
  PlanOptions unfused;
  unfused.flash_attention = false;
  const double layer_bytes = 6.0 * 2.0 * 24 * 2048.0 * 2048.0;
  CHECK(attention_forward_seconds(capped, h100, layout, unfused, false) -
            attention_forward_seconds(model, h100, layout, unfused, false) ==
        doctest::Approx(memory_seconds(h100, layer_bytes)).epsilon(1e-9).scale(0));
  const ChunkCost plain = chunk_cost(model, h100, layout, unfused, 0, 0);
  const ChunkCost soft = chunk_cost(capped, h100, layout, unfused, 0, 0);
  // Differences of sums: 1e-9 relative absorbs the rounding.
  CHECK(soft.forward_compute_seconds - plain.forward_compute_seconds ==
        doctest::Approx(24 * memory_seconds(h100, layer_bytes)).epsilon(1e-9).scale(0));
  CHECK(soft.backward_input_compute_seconds + soft.backward_weight_compute_seconds -
            plain.backward_input_compute_seconds - plain.backward_weight_compute_seconds ==
        doctest::Approx(24 * memory_seconds(h100, 2.0 * layer_bytes)).epsilon(1e-9).scale(0));
  // The attention scale (query_pre_attn_scalar) costs nothing.
  models::TransformerConfig scaled = model;
  scaled.query_pre_attn_scalar = 144.0;
  CHECK(chunk_cost(scaled, h100, layout, unfused, 0, 0).forward_compute_seconds ==
        plain.forward_compute_seconds);
}

TEST_CASE("chunk_cost: q/k norms are one more norm pass over Q and K per layer") {
  // Qwen3's and Gemma 3's per-head norms: forward read and write T (a + g) d e:
  // 2 x 2048 x (24 + 24) x 96 x 2 = 37,748,736 bytes.
  const double layer_bytes = 2.0 * 2048 * (24 + 24) * 96 * 2;
  CHECK(layer_bytes == 37748736.0);
  check_memory_pass_per_layer(layer_bytes,
                              [](models::TransformerConfig& model) { model.qk_norm = true; });
  // Llama 4's gainless L2 norm is the same pass (on every layer, NoPE layers included).
  check_memory_pass_per_layer(layer_bytes, [](models::TransformerConfig& model) {
    model.qk_l2_norm = true;
    model.no_rope_freq.assign(static_cast<size_t>(model.num_layers), 0);
    model.no_rope_freq.back() = 1;
  });
}

TEST_CASE(
    "async TP under fsdp: the backward's summed input gradients are reduce-scattered unfused") {
  // 32 layers of h 4096 (32 heads of 128), tp 4 with sequence parallelism, T = 2048 tokens.
  // Megatron's --tp-comm-overlap hides every tp collective behind these GEMMs; torch's async TP
  // (Inductor's micro_pipeline_tp: a reduce-scatter fuses only with the one matmul feeding it)
  // leaves the backward's input-gradient reduce-scatters exposed: the attention's (dq Wq + dk Wk
  // + dv Wv) always, the MLP's (w1 and w3) under SwiGLU, not a GELU MLP's single fc1. Each moves
  // T h bf16 bytes over the 4 tp ranks; Megatron's layers expose none of theirs at these GEMM
  // sizes. Without sequence parallelism (all-reduces) nothing fuses.
  models::TransformerConfig model = test::square_model("async-tp");
  model.norm = models::Norm::kRmsNorm;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = test::make_layout(4, 1, 2, 1, 8);
  layout.sequence_parallel = true;
  const double reduce =
      collective_seconds(cluster, CollectiveKind::kReduceScatter, int64_t{2048} * 4096 * 2, 4, 1);
  PlanOptions overlap;
  overlap.overlap_tp_comm = true;
  PlanOptions fsdp_overlap = overlap;
  fsdp_overlap.framework = Framework::kFsdp;
  for (const models::Activation activation :
       {models::Activation::kGelu, models::Activation::kSwiglu}) {
    model.activation = activation;
    const double unfused = activation == models::Activation::kSwiglu ? 2.0 : 1.0;
    const ChunkCost megatron = estimate_plan(model, cluster, layout, overlap).stages[0].chunks[0];
    const ChunkCost fsdp = estimate_plan(model, cluster, layout, fsdp_overlap).stages[0].chunks[0];
    // The embedding's and LM head's tp collectives (this one stage has both) are not layers'.
    CHECK(fsdp.forward_tp_comm_seconds == megatron.forward_tp_comm_seconds);
    CHECK(fsdp.backward_tp_comm_seconds - megatron.backward_tp_comm_seconds ==
          doctest::Approx(32.0 * unfused * reduce).epsilon(1e-9).scale(0));
  }
  layout.sequence_parallel = false;
  PlanOptions fsdp_plain;
  fsdp_plain.framework = Framework::kFsdp;
  const ChunkCost hidden = estimate_plan(model, cluster, layout, fsdp_overlap).stages[0].chunks[0];
  const ChunkCost plain = estimate_plan(model, cluster, layout, fsdp_plain).stages[0].chunks[0];
  CHECK(hidden.forward_tp_comm_seconds == plain.forward_tp_comm_seconds);
  CHECK(hidden.backward_tp_comm_seconds == plain.backward_tp_comm_seconds);
  CHECK(plain.backward_tp_comm_seconds > 0.0);
}

TEST_CASE("gradient accumulation: each framework's passes per parameter and micro-batch") {
  // e = 2 (bf16); m micro-batches, of which (m - 1) / m add into a held gradient.
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const auto bytes = [&](Framework framework, int64_t zero, int64_t pp, int64_t dp,
                         int64_t micro_batches, GradReduceDtype reduce = GradReduceDtype::kFp32) {
    Layout layout = test::make_layout(1, pp, dp, 1, dp * micro_batches);
    layout.zero = zero;
    PlanOptions options;
    options.framework = framework;
    options.grad_reduce_dtype = reduce;
    return gradient_accumulation_bytes_per_parameter(h100, layout, options);
  };
  // The GEMM accumulates into the gradient buffer: nothing beyond it.
  CHECK(bytes(Framework::kMegatron, 1, 2, 8, 32) == 0.0);
  CHECK(bytes(Framework::kMeshplan, 1, 2, 8, 32) == 0.0);
  // DeepSpeed ZeRO 1 and ZeRO 0 without a pipeline: autograd's in-place add, 3 e, after the
  // first micro-batch: 6 x 31/32 = 5.8125; none with one micro-batch.
  CHECK(bytes(Framework::kDeepSpeed, 1, 4, 12, 32) ==
        doctest::Approx(5.8125).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kDeepSpeed, 0, 1, 8, 32) ==
        doctest::Approx(5.8125).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kDeepSpeed, 1, 4, 12, 1) == 0.0);
  // ZeRO 0 under the pipeline engine (BF16_Optimizer): 3 e every micro-batch.
  CHECK(bytes(Framework::kDeepSpeed, 0, 2, 8, 32) ==
        doctest::Approx(6.0).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kDeepSpeed, 0, 2, 8, 1) ==
        doctest::Approx(6.0).epsilon(kRounding).scale(0));
  // ZeRO 2, dp 8, m 4: bucket copy 2 e, partition copy 2 e / 8, its add 3 e x 3/4 / 8:
  // 4 + (4 + 4.5) / 8 = 5.0625. ZeRO 3: the partition copied once a step, 4 / 4:
  // 4 + (1 + 4.5) / 8 = 4.6875.
  CHECK(bytes(Framework::kDeepSpeed, 2, 1, 8, 4) ==
        doctest::Approx(5.0625).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kDeepSpeed, 3, 1, 8, 4) ==
        doctest::Approx(4.6875).epsilon(kRounding).scale(0));
  // fsdp under pp, m 8, fp32 reduce: the upcast (2 + 4) / 8 then (2 + 8) x 7/8: 9.5; with a
  // bf16 reduce autograd adds in bf16, 6 x 7/8 = 5.25.
  CHECK(bytes(Framework::kFsdp, 3, 2, 8, 8) == doctest::Approx(9.5).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kFsdp, 3, 2, 8, 8, GradReduceDtype::kBf16) ==
        doctest::Approx(5.25).epsilon(kRounding).scale(0));
  // fsdp without pp adds the fp32 shard: 12 x 1/2 / 8 = 0.75; DDP its whole fp32 gradient:
  // 12 x 1/2 = 6.
  CHECK(bytes(Framework::kFsdp, 3, 1, 8, 2) == doctest::Approx(0.75).epsilon(kRounding).scale(0));
  CHECK(bytes(Framework::kFsdp, 0, 1, 8, 2) == doctest::Approx(6.0).epsilon(kRounding).scale(0));
  // fp32 training under pp (local-cpu, e = r = 4): autograd's add of the unsharded gradient,
  // 12 x 7/8 = 10.5.
  Layout fp32_pp = test::make_layout(1, 2, 8, 1, 64);
  fp32_pp.zero = 3;
  PlanOptions fsdp;
  fsdp.framework = Framework::kFsdp;
  CHECK(
      gradient_accumulation_bytes_per_parameter(models::load_cluster("local-cpu"), fp32_pp, fsdp) ==
      doctest::Approx(10.5).epsilon(kRounding).scale(0));
}

TEST_CASE("gradient accumulation: DeepSpeed ZeRO 1 at 32 micro-batches, both stages, by hand") {
  // megatron-1.7b, pp 2: 12 layers of 12 h^2 + 13 h = 63,730,944 parameters per stage, the
  // embedding's 51,200 + 2,048 learned positions rows of h 2,304 on stage 0 and the (tied, but
  // on another stage) head's 51,200 rows on stage 1: 887,454,720 and 882,736,128 parameters,
  // x 5.8125 bytes (above) = 5,158,330,560 and 5,130,903,744 bytes more in the weight gradient
  // than at one micro-batch; nothing else in the chunk changes with m.
  const models::TransformerConfig model = models::load_model("megatron-1.7b");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  Layout one = test::make_layout(1, 2, 1, 1, 1);
  one.zero = 1;
  Layout many = one;
  many.global_batch = 32;
  PlanOptions deepspeed;
  deepspeed.framework = Framework::kDeepSpeed;
  const double expected[] = {5158330560.0, 5130903744.0};
  for (int64_t stage = 0; stage < 2; ++stage) {
    const ChunkCost at_one = chunk_cost(model, h100, one, deepspeed, stage, 0);
    const ChunkCost at_many = chunk_cost(model, h100, many, deepspeed, stage, 0);
    CHECK(at_many.backward_weight_compute_seconds - at_one.backward_weight_compute_seconds ==
          doctest::Approx(expected[stage] / kH100Bandwidth).epsilon(1e-9).scale(0));
    CHECK(at_many.backward_input_compute_seconds == at_one.backward_input_compute_seconds);
    CHECK(at_many.forward_compute_seconds == at_one.forward_compute_seconds);
  }
  // Megatron's fused accumulation: the same layouts cost the same.
  const PlanOptions megatron;
  CHECK(chunk_cost(model, h100, many, megatron, 0, 0).backward_weight_compute_seconds ==
        chunk_cost(model, h100, one, megatron, 0, 0).backward_weight_compute_seconds);
}

}  // namespace
}  // namespace meshplan::planner
