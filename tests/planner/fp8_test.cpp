// --precision fp8 (planner/compute_cost.cpp, planner/memory.cpp, planner/validity.cpp,
// planner/plan_file.cpp): the linear GEMMs at the FP8 peak, Transformer Engine's FP8 weight
// caches and amax history in memory, torchao's Float8Linear under fsdp, the A100 refused by
// name, the plan-file key.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "fp8_cast_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::input_error;
using test::make_layout;

// 32 layers of h 4096, 32 heads of 128 (no GQA), f 16384 GELU, 2048 tokens per micro-batch.
models::TransformerConfig square_model() {
  return test::square_model("fp8-square");
}

PlanOptions fp8_options() {
  PlanOptions options;
  options.gemm_precision = GemmPrecision::kFp8;
  return options;
}

// The expected values are sums of products of exact inputs; 1e-9 relative covers the
// different order of the floating-point operations.
constexpr double kFp8RoundingTolerance = 1e-9;

// The GEMM curve's inputs, written out so the expected values do not come from the code under
// test: dgx-h100's gemm_half_efficiency_dim (models/presets/clusters/dgx-h100.json; the test
// case below fails if the preset changes) and the outer-dimension weight w
// (compute_cost.cpp kOuterDimensionWeight).
constexpr double kDgxH100GemmHalfEfficiencyDim = 768.0;
constexpr double kGemmOuterDimensionWeight = 0.2;

// 1 / efficiency relative to e_max of a T x n GEMM reducing over k on dgx-h100:
// 1 + x_half (1/k + w (1/T + 1/n)).
double dgx_h100_gemm_slowdown(double T, double n, double k) {
  return 1.0 + kDgxH100GemmHalfEfficiencyDim *
                   (1.0 / k + kGemmOuterDimensionWeight * (1.0 / T + 1.0 / n));
}

// Seconds the FP8 GEMMs save per pass of one square-model layer at tp 1 on dgx-h100: the four
// forward linear GEMMs (T x n reducing over k; QKV 3h x h, output h x h, MLP in f x h, out
// h x f), each 2 T n k at bf16 989.4e12 x 0.61 against fp8 1978.9e12 x 0.60, on the curve above.
double square_model_fp8_gemm_saving_per_layer() {
  const double T = 2048, h = 4096, ffn = 16384;
  const auto saved = [&](double n, double k) {
    const double shape = dgx_h100_gemm_slowdown(T, n, k);
    return 2.0 * T * n * k * shape * (1.0 / (989.4e12 * 0.61) - 1.0 / (1978.9e12 * 0.60));
  };
  return saved(3 * h, h) + saved(h, h) + saved(ffn, h) + saved(h, ffn);
}

// The square model's 32 layers on one stage: fp8 saves saved_per_layer of GEMM time in each of
// the forward, input-gradient and weight-gradient passes, and pays its casts in the first two.
void check_linear_savings(const ChunkCost& bf16, const ChunkCost& fp8, double saved_per_layer,
                          double cast_forward, double cast_backward) {
  CHECK(bf16.forward_compute_seconds - fp8.forward_compute_seconds ==
        doctest::Approx(32.0 * (saved_per_layer - cast_forward))
            .epsilon(kFp8RoundingTolerance)
            .scale(0));
  CHECK(bf16.backward_input_compute_seconds - fp8.backward_input_compute_seconds ==
        doctest::Approx(32.0 * (saved_per_layer - cast_backward))
            .epsilon(kFp8RoundingTolerance)
            .scale(0));
  CHECK(bf16.backward_weight_compute_seconds - fp8.backward_weight_compute_seconds ==
        doctest::Approx(32.0 * saved_per_layer).epsilon(kFp8RoundingTolerance).scale(0));
}

TEST_CASE("H100 and H200 presets: FP8 dense peak 1,978.9 TFLOP/s (H100 whitepaper); A100 none") {
  for (const char* name : {"dgx-h100", "dgx-h200"}) {
    const models::ClusterConfig cluster = models::load_cluster(name);
    // 3,957.8 sparse / 2; twice the dense BF16 989.4 up to the whitepaper's rounding.
    CHECK(cluster.gpu.peak_fp8_flops_per_second == 1978.9e12);
    CHECK(cluster.efficiency.fp8_gemm_peak_efficiency == 0.60);
  }
  CHECK(models::load_cluster("dgx-a100-80gb").gpu.peak_fp8_flops_per_second == 0.0);
}

TEST_CASE("fp8: the closed-form GEMM curve's inputs are dgx-h100's and the code's") {
  CHECK(models::load_cluster("dgx-h100").efficiency.gemm_half_efficiency_dim ==
        kDgxH100GemmHalfEfficiencyDim);
  CHECK(gemm_inverse_size(1000.0, 4000.0, 2000.0) ==
        doctest::Approx(1.0 / 2000.0 + kGemmOuterDimensionWeight * (1.0 / 1000.0 + 1.0 / 4000.0))
            .scale(0));
}

TEST_CASE("fp8: the linear GEMMs run at the FP8 peak, plus Transformer Engine's casts") {
  // dgx-h100, tp 1, T = 2048 tokens: per layer the forward linear GEMMs (T x n, reducing over
  // k) are QKV (n 3h, k h), output (h, h), MLP in (f = 4h, h) and out (h, f), h = 4096. Each
  // takes 2 T n k / (peak e_max) x (1 + x_half (1/k + 0.2 (1/T + 1/n))) (compute_cost.cpp,
  // w = 0.2; dgx-h100: x_half 768), bf16 at 989.4e12 x 0.61, fp8 at 1978.9e12 x 0.60. The
  // backward has two GEMMs per linear (B and W), so it saves twice what the forward saves. 32
  // layers on the one stage.
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, fp8_options());
  const double T = 2048, h = 4096, ffn = 16384;
  const double saved_per_layer = square_model_fp8_gemm_saving_per_layer();
  // TE's casts (fp8_cast_cost.cpp), bytes at 3.35e12 x 0.8 B/s. Forward: QKV and MLP-in take
  // their input from the norm in FP8 (-1 byte per T h each); output and MLP-out cast and
  // transpose their input (4 bytes per T h and T f): T (2h + 4f). Backward: QKV and MLP-in
  // transpose their input (2 per T h each), every output gradient is cast and transposed (4
  // per T 3h, T h, T f, T h): T (24h + 4f).
  const double hbm_bytes_per_second = 3.35e12 * 0.8;
  const double cast_forward = T * (2 * h + 4 * ffn) / hbm_bytes_per_second;
  const double cast_backward = T * (24 * h + 4 * ffn) / hbm_bytes_per_second;
  const ChunkCost& b = bf16.stages[0].chunks[0];
  const ChunkCost& f = fp8.stages[0].chunks[0];
  check_linear_savings(b, f, saved_per_layer, cast_forward, cast_backward);
  // At tp 1 there is no tp traffic, and the data-parallel reduction stays in 16/32 bits
  // (Transformer Engine sends FP8 only in its sequence-parallel all-gathers, below).
  CHECK(f.forward_tp_comm_seconds == b.forward_tp_comm_seconds);
  CHECK(fp8.stages[0].dp_grad_sync_seconds == bf16.stages[0].dp_grad_sync_seconds);
  CHECK(fp8.step_time_s < bf16.step_time_s);
}

TEST_CASE("fp8: TE's casts under sequence parallelism and tp") {
  // tp 4 with sequence parallelism, T = 2048 tokens per micro-batch: the output projection and
  // MLP-out cast their tp-split input in the forward (3 bytes per T h/4 and T f/4) and transpose
  // it in the backward (2); the norms write T/4 x h in FP8 (-1 each, two norms); QKV and MLP-in
  // transpose their gathered input (2 per T h each); the column-parallel output gradients
  // (T 3h/4, T f/4) are cast and transposed (4), the row-parallel ones (output projection and
  // MLP-out, T h each) arrive sequence-sharded: cast on T/4 x h (3), gathered, transposed on
  // T x h (2) (TE base.py grad_output_preprocess). Forward: T (3h/4 + 3f/4 - 2h/4); backward:
  // T (2h/4 + 2f/4 + 4h + 4 (3h/4 + f/4) + 2 (3h/4 + 2h)).
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(4, 1, 2, 1, 8);
  layout.sequence_parallel = true;
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, fp8_options());
  const double T = 2048, h = 4096, ffn = 16384, t = 4;
  const double hbm_bytes_per_second = 3.35e12 * 0.8;
  const double cast_forward = T * (3 * h / t + 3 * ffn / t - 2 * h / t) / hbm_bytes_per_second;
  const double cast_backward =
      T * (2 * h / t + 2 * ffn / t + 4 * h + 4 * (3 * h / t + ffn / t) + 2 * (3 * h / t + 2 * h)) /
      hbm_bytes_per_second;
  const ChunkCost& b = bf16.stages[0].chunks[0];
  const ChunkCost& f = fp8.stages[0].chunks[0];
  // The GEMM saving is the same in the forward and in the input-gradient backward (one GEMM per
  // linear each), so the difference of the two savings is the difference of the casts.
  const double forward_saving = b.forward_compute_seconds - f.forward_compute_seconds;
  const double backward_saving =
      b.backward_input_compute_seconds - f.backward_input_compute_seconds;
  CHECK(forward_saving - backward_saving ==
        doctest::Approx(32.0 * (cast_backward - cast_forward)).epsilon(1e-6).scale(0));
  CHECK(b.backward_weight_compute_seconds - f.backward_weight_compute_seconds ==
        doctest::Approx(forward_saving + 32.0 * cast_forward).epsilon(1e-9).scale(0));
}

TEST_CASE("fp8: TE's sequence-parallel all-gathers move FP8 bytes, reduce-scatters 16-bit") {
  // tp 4 inside one dgx-h100 node, sequence parallel, T = 2048 tokens per micro-batch, h 4096,
  // overlap_tp_comm off. Per layer and direction two all-gather + reduce-scatter pairs of T x h:
  // forward the QKV and MLP-in inputs gathered, backward the output-projection and MLP-out
  // output gradients gathered (TE v1.8 layernorm_linear.py, base.py grad_output_preprocess), all
  // in FP8 (1 byte). A ring all-gather of B bytes over n = 4 NVLink ranks takes (n - 1)/n B /
  // (450e9 x 0.75) + (n - 1) x 2 us, as does a reduce-scatter; bf16 gathers 2 bytes, fp8 1, so
  // fp8 saves 2 x 3/4 x T h x 1 byte / (450e9 x 0.75) per layer and direction; 32 layers.
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(4, 1, 2, 1, 8);
  layout.sequence_parallel = true;
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, fp8_options());
  const double T = 2048, h = 4096;
  const double saved = 32.0 * 2.0 * 0.75 * T * h / (450e9 * 0.75);
  const ChunkCost& b = bf16.stages[0].chunks[0];
  const ChunkCost& f = fp8.stages[0].chunks[0];
  CHECK(b.forward_tp_comm_seconds - f.forward_tp_comm_seconds ==
        doctest::Approx(saved).epsilon(1e-9).scale(0));
  CHECK(b.backward_tp_comm_seconds - f.backward_tp_comm_seconds ==
        doctest::Approx(saved).epsilon(1e-9).scale(0));
  // The inventory lists the same bytes: T h x 1 per all-gather, T h x 2 per reduce-scatter.
  for (const char* what : {"tp: layer forward all-gathers (QKV in, MLP in)",
                           "tp: layer backward all-gathers (output grads, input re-gather)"}) {
    const CollectiveTraffic* gather = test::find_traffic(fp8.collectives, what);
    REQUIRE(gather != nullptr);
    CHECK(gather->message_bytes == 2048 * 4096);
    CHECK(test::find_traffic(bf16.collectives, what)->message_bytes == 2048 * 4096 * 2);
  }
  const CollectiveTraffic* scatter = test::find_traffic(
      fp8.collectives, "tp: layer forward reduce-scatters (attention out, MLP out)");
  REQUIRE(scatter != nullptr);
  CHECK(scatter->message_bytes == 2048 * 4096 * 2);
  // torchao's tensor-parallel styles (--framework fsdp) also gather what they have cast
  // (float8_tensor_parallel.py at eab345c); their reduce-scatters stay 16-bit.
  PlanOptions fsdp = fp8_options();
  fsdp.framework = Framework::kFsdp;
  const PlanEstimate torchao = estimate_plan(square_model(), cluster, layout, fsdp);
  CHECK(test::find_traffic(torchao.collectives, "tp: layer forward all-gathers (QKV in, MLP in)")
            ->message_bytes == 2048 * 4096);
  CHECK(test::find_traffic(torchao.collectives,
                           "tp: layer forward reduce-scatters (attention out, MLP out)")
            ->message_bytes == 2048 * 4096 * 2);
}

PlanOptions tensorwise_options() {
  PlanOptions options = fp8_options();
  options.fp8_recipe = Fp8Recipe::kTensorwise;
  return options;
}

TEST_CASE("fp8 tensorwise: an amax read before every cast, the norm output cast apart") {
  // Transformer Engine 2.x current scaling (fp8_cast_cost.cpp tensorwise_cast_bytes), tp 1,
  // T = 2048: the norms write 16 bits, so QKV and MLP-in cast and transpose their input (4 per
  // T h each) and need no backward transpose; output and MLP-out read their input for the amax
  // and cast-transpose it (2 + 4 per T h and T f). Forward: T (8h + 6h + 6f). Backward: every
  // output gradient read for the amax and cast-transposed (6 per T (3h + h + f + h)):
  // T (30h + 6f).
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, tensorwise_options());
  const double T = 2048, h = 4096, ffn = 16384;
  const double saved_per_layer = square_model_fp8_gemm_saving_per_layer();
  const double hbm_bytes_per_second = 3.35e12 * 0.8;
  const double cast_forward = T * (14 * h + 6 * ffn) / hbm_bytes_per_second;
  const double cast_backward = T * (30 * h + 6 * ffn) / hbm_bytes_per_second;
  check_linear_savings(bf16.stages[0].chunks[0], fp8.stages[0].chunks[0], saved_per_layer,
                       cast_forward, cast_backward);
  // No sequence parallelism: no amax all-reduce.
  CHECK(fp8.stages[0].chunks[0].forward_tp_comm_seconds ==
        bf16.stages[0].chunks[0].forward_tp_comm_seconds);
  // Current scaling keeps no amax history: 32 layers x 4 GEMMs x 5 tensors x 1023 fp32 entries
  // less than delayed scaling's 1024.
  const PlanEstimate delayed = estimate_plan(square_model(), cluster, layout, fp8_options());
  CHECK(delayed.stages[0].memory.weights_bytes - fp8.stages[0].memory.weights_bytes ==
        int64_t{32} * 4 * 5 * 1023 * 4);
  CHECK(fp8.step_time_s > delayed.step_time_s);
}

TEST_CASE("fp8 tensorwise under sequence parallelism: casts on the rank's rows, amax all-reduces") {
  // tp 4, sequence parallel, T = 2048: QKV and MLP-in cast the norm's T/4 rows (3 per T h/4
  // each), gather FP8 and transpose the gathered T rows in the backward (2 per T h each); output
  // and MLP-out read and cast-transpose their tp-split input in the forward (6 per T h/4 and
  // T f/4), nothing left for the backward; the column-parallel output gradients (T 3h/4, T f/4)
  // 6 each; the row-parallel ones (T h each) read and cast on T/4 rows (5), gathered, transposed
  // on T (2). Forward: T (6h/4 + 6h/4 + 6f/4); backward: T (4h + 6 (3h/4 + f/4) + 2 (5h/4 +
  // 2h)). Each gathered cast first all-reduces one float over the tp group: QKV and MLP-in
  // forward, output and MLP-out gradients backward, two per layer each way.
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(4, 1, 2, 1, 8);
  layout.sequence_parallel = true;
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, tensorwise_options());
  const double T = 2048, h = 4096, ffn = 16384, t = 4;
  const double hbm_bytes_per_second = 3.35e12 * 0.8;
  const double cast_forward = T * (6 * h / t + 6 * h / t + 6 * ffn / t) / hbm_bytes_per_second;
  const double cast_backward =
      T * (4 * h + 6 * (3 * h / t + ffn / t) + 2 * (5 * h / t + 2 * h)) / hbm_bytes_per_second;
  const ChunkCost& b = bf16.stages[0].chunks[0];
  const ChunkCost& f = fp8.stages[0].chunks[0];
  const double forward_saving = b.forward_compute_seconds - f.forward_compute_seconds;
  const double backward_saving =
      b.backward_input_compute_seconds - f.backward_input_compute_seconds;
  CHECK(forward_saving - backward_saving ==
        doctest::Approx(32.0 * (cast_backward - cast_forward)).epsilon(1e-6).scale(0));
  CHECK(b.backward_weight_compute_seconds - f.backward_weight_compute_seconds ==
        doctest::Approx(forward_saving + 32.0 * cast_forward).epsilon(1e-9).scale(0));
  const PlanEstimate delayed = estimate_plan(square_model(), cluster, layout, fp8_options());
  const ChunkCost& d = delayed.stages[0].chunks[0];
  const double one_float = collective_seconds(cluster, CollectiveKind::kAllReduce, 4, 4, 1);
  CHECK(f.forward_tp_comm_seconds - d.forward_tp_comm_seconds ==
        doctest::Approx(32.0 * 2.0 * one_float).epsilon(1e-9).scale(0));
  CHECK(f.backward_tp_comm_seconds - d.backward_tp_comm_seconds ==
        doctest::Approx(32.0 * 2.0 * one_float).epsilon(1e-9).scale(0));
}

TEST_CASE("fp8 tensorwise: Megatron-LM's only, with fp8; stored only when set") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  PlanOptions bf16_tensorwise;
  bf16_tensorwise.fp8_recipe = Fp8Recipe::kTensorwise;
  CHECK(input_error([&] { estimate_plan(square_model(), cluster, layout, bf16_tensorwise); }) ==
        "fp8_recipe: tensorwise: needs precision fp8 (the recipe scales Transformer Engine's FP8 "
        "casts)");
  PlanOptions fsdp = tensorwise_options();
  fsdp.framework = Framework::kFsdp;
  CHECK(input_error([&] { estimate_plan(square_model(), cluster, layout, fsdp); }) ==
        "fp8_recipe: tensorwise: framework fsdp: Transformer Engine's recipes are Megatron-LM's "
        "(--fp8-recipe); under fsdp torchao's float8 is its own tensorwise scaling");
  CHECK_FALSE(options_to_json(fp8_options()).contains("fp8_recipe"));
  const nlohmann::json written = options_to_json(tensorwise_options());
  CHECK(written.at("fp8_recipe") == "tensorwise");
  CHECK(options_from_json(written, "p.json").fp8_recipe == Fp8Recipe::kTensorwise);
  nlohmann::json bad = written;
  bad["fp8_recipe"] = "mxfp8";
  CHECK(input_error([&] { options_from_json(bad, "p.json"); }) ==
        "p.json: options: fp8_recipe: unsupported FP8 recipe (mxfp8); supported: delayed, "
        "tensorwise (Megatron-LM's mxfp8 and blockwise are not modelled)");
}

TEST_CASE("fp8 under fsdp: torchao's FP8 GEMMs at 0.834 of TE's e_max, and torchao's casts") {
  // The square model at tp 1 under --framework fsdp, bf16 against fp8 (torchao's Float8Linear).
  // Each forward GEMM saves 2 T n k (1 + x_half (1/k + 0.2 (1/T + 1/n))) x (1 / (989.4e12 x
  // 0.61) - 1 / (1978.9e12 x 0.60 x 0.834)). torchao's casts (torchao roofline_utils.py at
  // eab345c): 5 bytes per input element forward, 5 per output-gradient element backward, and 2
  // per weight element backward (the FP8 transpose of the gathered weight): forward T (5 x 3h + 5
  // f) over QKV, output, MLP in (k = h) and MLP out (k = f); backward T 5 (3h + h + f + h) + 2
  // (3h^2 + h^2 + f h + h f).
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  PlanOptions bf16_options;
  bf16_options.framework = Framework::kFsdp;
  PlanOptions fp8 = fp8_options();
  fp8.framework = Framework::kFsdp;
  const PlanEstimate bf16_plan = estimate_plan(square_model(), cluster, layout, bf16_options);
  const PlanEstimate fp8_plan = estimate_plan(square_model(), cluster, layout, fp8);
  const double T = 2048, h = 4096, ffn = 16384;
  const auto saved = [&](double n, double k) {
    const double shape = dgx_h100_gemm_slowdown(T, n, k);
    return 2.0 * T * n * k * shape * (1.0 / (989.4e12 * 0.61) - 1.0 / (1978.9e12 * 0.60 * 0.834));
  };
  const double saved_per_layer = saved(3 * h, h) + saved(h, h) + saved(ffn, h) + saved(h, ffn);
  const double hbm_bytes_per_second = 3.35e12 * 0.8;
  const double cast_forward = T * (5 * 3 * h + 5 * ffn) / hbm_bytes_per_second;
  const double cast_backward =
      (5 * T * (5 * h + ffn) + 2 * (4 * h * h + 2 * h * ffn)) / hbm_bytes_per_second;
  check_linear_savings(bf16_plan.stages[0].chunks[0], fp8_plan.stages[0].chunks[0], saved_per_layer,
                       cast_forward, cast_backward);
}

TEST_CASE("fp8 under fsdp: torchao leaves an MoE model's grouped experts in bf16") {
  // torchao converts nn.Linear only; torchtitan's grouped experts are not: their GEMMs stay bf16
  // and are not cast. So under fsdp the bf16 -> fp8 saving of the tiny-moe model does not depend
  // on the experts' width, while under megatron (Transformer Engine's grouped FP8 GEMMs) a
  // wider expert saves more.
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  const auto saving = [&](Framework framework, int64_t expert_ffn) {
    models::TransformerConfig model = test::tiny_moe();
    model.expert_ffn_hidden_size = expert_ffn;
    PlanOptions bf16;
    bf16.framework = framework;
    PlanOptions fp8 = bf16;
    fp8.gemm_precision = GemmPrecision::kFp8;
    return estimate_plan(model, cluster, layout, bf16).stages[0].chunks[0].forward_compute_seconds -
           estimate_plan(model, cluster, layout, fp8).stages[0].chunks[0].forward_compute_seconds;
  };
  const int64_t width = test::tiny_moe().expert_ffn_hidden_size;
  CHECK(saving(Framework::kFsdp, 2 * width) ==
        doctest::Approx(saving(Framework::kFsdp, width)).epsilon(1e-12).scale(0));
  CHECK(saving(Framework::kMegatron, 2 * width) > saving(Framework::kMegatron, width));
}

TEST_CASE("fp8 under fsdp: the 0.834 ratio reproduces torchao's README speed-up of 1.39x") {
  // torchao/float8/README.md at eab345c, Performance, example 2: a compiled Float8Linear forward
  // plus backward at M, K, N = 4096, 8192, 16384 ran 1.39x the bf16 linear. The same linear on
  // grand-teton-h100 (bf16 912.45e12 x 0.61, fp8 1824.7e12 x 0.60 x 0.834, x_half 768): its
  // three GEMMs (output M x N over K, input gradient M x K over N, weight gradient K x N over
  // M), and torchao's casts with the weight cast each call: 5 M K + 7 K N + 5 M N bytes at
  // 2.4e12 x 0.8 B/s. The ratio was chosen to three digits, so 1.39 holds to 0.005.
  const models::ClusterConfig cluster = models::load_cluster("grand-teton-h100");
  const double M = 4096, K = 8192, N = 16384;
  const auto gemms = [&](GemmPrecision precision, double scale) {
    return (gemm_seconds(cluster, M, N, K, precision) + gemm_seconds(cluster, M, K, N, precision) +
            gemm_seconds(cluster, K, N, M, precision)) /
           scale;
  };
  const double bf16_seconds = gemms(GemmPrecision::kBf16, 1.0);
  const double casts = (5 * M * K + 7 * K * N + 5 * M * N) / (2.4e12 * 0.8);
  const double fp8_seconds = gemms(GemmPrecision::kFp8, kTorchaoFp8GemmEfficiencyRatio) + casts;
  CHECK(bf16_seconds / fp8_seconds == doctest::Approx(1.39).epsilon(0.005 / 1.39).scale(0));
}

TEST_CASE("fp8: Transformer Engine's weight caches and amax history in memory") {
  // Per layer on a tp-1 rank: an FP8 copy and an FP8 transpose of the 4 h^2 + 2 h f =
  // 201,326,592 linear weights, 2 bytes each = 402,653,184, plus amax histories of 1024 fp32
  // entries for 4 GEMMs x (3 forward + 2 backward) tensors = 81,920 bytes: 402,735,104 bytes,
  // times 32 layers = 12,887,523,328. Gradients and optimizer do not change. Activations: TE
  // saves the QKV and MLP inputs (2 T h) and the MLP-out input (T f) in 1 byte instead of 2 and
  // adds a 1-byte copy of the attention output (T h) that flash attention keeps in bf16:
  // -(h + f) T = -(4096 + 16384) x 2048 = -41,943,040 bytes a layer, -1,342,177,280 in all.
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  const PlanEstimate bf16 = estimate_plan(square_model(), cluster, layout);
  const PlanEstimate fp8 = estimate_plan(square_model(), cluster, layout, fp8_options());
  const MemoryBreakdown& b = bf16.stages[0].memory;
  const MemoryBreakdown& f = fp8.stages[0].memory;
  CHECK(f.weights_bytes - b.weights_bytes == 12'887'523'328);
  CHECK(f.gradients_bytes == b.gradients_bytes);
  CHECK(f.optimizer_bytes == b.optimizer_bytes);
  CHECK(f.activations_bytes - b.activations_bytes == -1'342'177'280);
  // tp 4 divides the cached weights, not the amax histories: 32 (402,653,184 / 4 + 81,920).
  const Layout tp4 = make_layout(4, 1, 2, 1, 8);
  const int64_t cache_tp4 =
      estimate_plan(square_model(), cluster, tp4, fp8_options()).stages[0].memory.weights_bytes -
      estimate_plan(square_model(), cluster, tp4).stages[0].memory.weights_bytes;
  CHECK(cache_tp4 == int64_t{32} * (402'653'184 / 4 + 81'920));
}

TEST_CASE("fp8: refused by name on a GPU without FP8 and on an fp32 cluster") {
  const Layout layout = make_layout(1, 1, 8, 1, 8);
  CHECK(input_error([&] {
          estimate_plan(square_model(), models::load_cluster("dgx-a100-80gb"), layout,
                        fp8_options());
        }) ==
        "dgx-a100-80gb: precision: fp8: A100-SXM4-80GB has no FP8 tensor cores (no "
        "gpu.peak_fp8_flops_per_second)");
  models::ClusterConfig fp32 = models::load_cluster("dgx-h100");
  fp32.precision = models::Precision::kFp32;
  CHECK(input_error([&] { estimate_plan(square_model(), fp32, layout, fp8_options()); }) ==
        "dgx-h100: precision: fp8 needs bf16 mixed-precision training (fp32)");
  CHECK(input_error([] { parse_gemm_precision("fp16", "--precision"); }) ==
        "--precision: unsupported precision (fp16); supported: bf16, fp8");
}

TEST_CASE("plan file: options.precision written only for fp8, read back, checked") {
  CHECK_FALSE(options_to_json(PlanOptions{}).contains("precision"));
  const nlohmann::json written = options_to_json(fp8_options());
  CHECK(written.at("precision") == "fp8");
  CHECK(options_from_json(written, "p.json").gemm_precision == GemmPrecision::kFp8);
  nlohmann::json bf16 = options_to_json(PlanOptions{});
  CHECK(options_from_json(bf16, "p.json").gemm_precision == GemmPrecision::kBf16);
  bf16["precision"] = "int8";
  CHECK(input_error([&] { options_from_json(bf16, "p.json"); }) ==
        "p.json: options: precision: unsupported precision (int8); supported: bf16, fp8");
}

}  // namespace
}  // namespace meshplan::planner
