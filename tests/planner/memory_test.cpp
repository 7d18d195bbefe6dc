// Memory per rank (planner/memory.cpp), read through estimate_plan's per-stage breakdown:
// model states against the ZeRO paper's worked example, activations against Korthikanti et
// al. 2022's closed forms, and the in-flight multiplier against the schedule's op list.

#include "memory.h"

#include <doctest/doctest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/models.h"
#include "meshplan/schedule.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// ---------------------------------------------------------------------------------------------
// Model states: Rajbhandari et al. 2020 (ZeRO), Sec. 1 and Fig. 1. A 7.5B-parameter model on
// 64 GPUs with mixed-precision Adam (K = 12) needs per GPU (2 + 2 + K) psi = 120 GB without
// ZeRO, 2 psi + 2 psi + K psi / 64 = 31.4 GB with stage 1 (P_os), 2 psi + (2 + K) psi / 64 =
// 16.6 GB with stage 2 (P_os+g) and (2 + 2 + K) psi / 64 = 1.9 GB with stage 3 (P_os+g+p).
// ---------------------------------------------------------------------------------------------

// Model-state bytes per parameter, scaled to the paper's psi = 7.5e9, in GB (1e9 bytes) and
// rounded the way Fig. 1 prints them (whole GB at 120, one decimal below).
double paper_gigabytes(double bytes, double psi, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(bytes / psi * 7.5 * scale) / scale;
}

TEST_CASE("ZeRO Fig. 1: 7.5B parameters on 64 GPUs, stages 0-3") {
  // Narayanan et al. 2021's 7.5B GPT (36 layers, h 4096, V 51200), whole on each rank (tp 1,
  // pp 1), dp 64. Its exact count: 36 (12 h^2 + 13 h) = 7,249,674,240 layer parameters, V h =
  // 209,715,200 tied embedding, 2048 h = 8,388,608 positions, 2h = 8,192 final LayerNorm:
  // psi = 7,467,786,240 (the paper's "7.5B").
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const int64_t psi = 7'467'786'240;
  Layout layout = make_layout(1, 1, 64, 1, 64);
  REQUIRE(stage_parameter_count(model, layout, 0, PlanOptions{}) == psi);

  struct Expected {
    int zero;
    int64_t weights, gradients, optimizer;  // bytes
    double paper_gb;
    int decimals;
  };
  // psi / 64 = 116,684,160 exactly, so every term below is an exact integer.
  const Expected cases[] = {
      {0, 2 * psi, 2 * psi, 12 * psi, 120.0, 0},             // 16 psi = 119.48e9 B -> 120 GB
      {1, 2 * psi, 2 * psi, 1'400'209'920, 31.4, 1},         // 12 psi / 64; 4 + 12/64 -> 31.4
      {2, 2 * psi, 233'368'320, 1'400'209'920, 16.6, 1},     // 2 psi / 64; 2 + 14/64 -> 16.6
      {3, 233'368'320, 233'368'320, 1'400'209'920, 1.9, 1},  // 16 psi / 64 -> 1.875 -> 1.9
  };
  // Fig. 1's model states (16-bit gradients) are meshplan's own executor's, which also keeps a
  // working set (below); the frameworks differ (next test case).
  PlanOptions options;
  options.framework = Framework::kMeshplan;
  for (const Expected& expected : cases) {
    CAPTURE(expected.zero);
    layout.zero = expected.zero;
    const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
    REQUIRE(estimate.stages.size() == 1);
    const MemoryBreakdown& memory = estimate.stages[0].memory;
    int64_t weights = memory.weights_bytes;
    int64_t gradients = memory.gradients_bytes;
    if (expected.zero >= 2) {
      // memory.cpp adds the executor's working set, which Fig. 1 leaves out: its full-size
      // gradient buffer (ZeRO 2 and 3) and, under ZeRO 3, the whole stage gathered around each
      // op (executor/gradient_sync.h, parameter_gather.h): 2 psi bytes each.
      CHECK(gradients - expected.gradients == 2 * psi);
      gradients -= 2 * psi;
    }
    if (expected.zero == 3) {
      CHECK(weights - expected.weights == 2 * psi);
      weights -= 2 * psi;
    }
    CHECK(weights == expected.weights);
    CHECK(gradients == expected.gradients);
    CHECK(memory.optimizer_bytes == expected.optimizer);
    const double states = static_cast<double>(weights + gradients + memory.optimizer_bytes);
    CHECK(paper_gigabytes(states, static_cast<double>(psi), expected.decimals) ==
          expected.paper_gb);
    // The per-GPU reserve: the cluster's fixed 3 GiB (dgx-a100-80gb) plus 2.4% of the
    // allocated bytes for fragmentation (compressed-tensors#587: 1.83 / 75.31 GiB).
    const int64_t allocated = memory.total_bytes() - memory.reserved_bytes;
    CHECK(memory.reserved_bytes ==
          3'221'225'472 + static_cast<int64_t>(0.024 * static_cast<double>(allocated)));
  }
}

TEST_CASE("model states per framework: the same 7.5B on 64 GPUs") {
  // Bytes per parameter from each framework's source (docs/research/framework-memory.md):
  // Megatron-LM dist_optimizer.md: 18 without and 6 + 12/d with the distributed optimizer
  // (fp32 main_grad, not sharded); DeepSpeed ZeRO-1: 2 + 2 + 12/d (bf16 gradients); FSDP2 /
  // torchtitan: 16/d (fp32 sharded parameters, gradients and Adam).
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const int64_t psi = 7'467'786'240;
  const int64_t shard = 116'684'160;  // psi / 64, exact
  struct Expected {
    Framework framework;
    int zero;
    int64_t weights, gradients, optimizer;
  };
  const Expected cases[] = {
      {Framework::kMegatron, 0, 2 * psi, 4 * psi, 12 * psi},     // 18 psi
      {Framework::kMegatron, 1, 2 * psi, 4 * psi, 12 * shard},   // (6 + 12/64) psi
      {Framework::kDeepSpeed, 1, 2 * psi, 2 * psi, 12 * shard},  // (4 + 12/64) psi
      {Framework::kFsdp, 3, 4 * shard, 4 * shard, 8 * shard},    // 16/64 psi, before gathers
  };
  for (const Expected& expected : cases) {
    CAPTURE(to_string(expected.framework));
    PlanOptions options;
    options.framework = expected.framework;
    Layout layout = make_layout(1, 1, 64, 1, 64);
    layout.zero = expected.zero;
    const MemoryBreakdown memory = estimate_plan(model, cluster, layout, options).stages[0].memory;
    CHECK(memory.optimizer_bytes == expected.optimizer);
    if (expected.framework != Framework::kFsdp) {
      CHECK(memory.weights_bytes == expected.weights);
      // DeepSpeed ZeRO-1's fp32 gradient partition at the step (4 psi / 64 = 0.47 GB) is far
      // below the activations it replaces, so it adds nothing.
      CHECK(memory.gradients_bytes == expected.gradients);
      continue;
    }
    // FSDP2 at pp 1: the largest unit (tied embedding, V h = 51,200 * 4096 = 209,715,200) and
    // the next layer (201,355,264 + 6h replicated 24,576 = 201,379,840) gathered in bf16;
    // the largest unit's fp32 reduce-scatter input and bf16 gradient: 6 * 209,715,200.
    CHECK(memory.weights_bytes == expected.weights + 2 * (209'715'200 + 201'379'840));
    CHECK(memory.gradients_bytes == expected.gradients + 6 * 209'715'200);
  }
}

TEST_CASE("Megatron's main_grad buffer takes the gradient reduce dtype") {
  // param_and_grad_buffer.py: grad_dtype = fp32 if grad_reduce_in_fp32 else the param dtype.
  // The 7.5B on 64 GPUs under Megatron, zero 0 and 1: 4 psi of fp32 main_grad by default (the
  // table above), 2 psi with --grad-reduce-in-bf16 (2021's fp16 runs alike), the rest unchanged.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const int64_t psi = 7'467'786'240;
  for (int zero : {0, 1}) {
    CAPTURE(zero);
    Layout layout = make_layout(1, 1, 64, 1, 64);
    layout.zero = zero;
    PlanOptions options;
    options.grad_reduce_dtype = GradReduceDtype::kFp32;
    const MemoryBreakdown fp32 = estimate_plan(model, cluster, layout, options).stages[0].memory;
    options.grad_reduce_dtype = GradReduceDtype::kBf16;
    const MemoryBreakdown bf16 = estimate_plan(model, cluster, layout, options).stages[0].memory;
    CHECK(fp32.gradients_bytes == 4 * psi);
    CHECK(bf16.gradients_bytes == 2 * psi);
    CHECK(bf16.weights_bytes == fp32.weights_bytes);
    CHECK(bf16.optimizer_bytes == fp32.optimizer_bytes);
  }
}

TEST_CASE("torchao float8 under FSDP2: 1-byte gathered linear weights, no FP8 state") {
  // megatron-7.5b (36 layers, h 4096, a = g = 32, f = 4h, GELU) on H100, --framework fsdp.
  // A layer's linear weights at tp 1: QKV 3h^2 + output h^2 + MLP 2 h f = 12 h^2 =
  // 201,326,592; WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather gathers them in 1 byte
  // instead of 2, so each gathered layer holds 201,326,592 bytes fewer. torchao keeps no
  // amax history or fp8 weight cache (tensorwise dynamic scaling) and its matmul saves nothing
  // the bf16 block does not (Float8Linear's mm output is bf16), so nothing else changes.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  constexpr int64_t kLayerLinearBytesSaved = 12LL * 4096 * 4096;  // 201,326,592
  const auto memory_of = [&](GemmPrecision precision, int64_t pp, int64_t dp) {
    PlanOptions options;
    options.framework = Framework::kFsdp;
    options.gemm_precision = precision;
    Layout layout = make_layout(1, pp, dp, 1, dp);
    layout.zero = 3;
    return estimate_plan(model, cluster, layout, options).stages[0].memory;
  };
  // pp 1: the largest unit (tied embedding, 209,715,200 parameters) stays bf16 (not a
  // Float8Linear) and one layer is gathered beside it: one layer's saving.
  const MemoryBreakdown bf16 = memory_of(GemmPrecision::kBf16, 1, 64);
  const MemoryBreakdown fp8 = memory_of(GemmPrecision::kFp8, 1, 64);
  CHECK(bf16.weights_bytes - fp8.weights_bytes == kLayerLinearBytesSaved);
  CHECK(fp8.gradients_bytes == bf16.gradients_bytes);
  CHECK(fp8.optimizer_bytes == bf16.optimizer_bytes);
  CHECK(fp8.activations_bytes == bf16.activations_bytes);
  // pp 2: torchtitan keeps the whole stage gathered from forward to backward; stage 0 holds
  // 36 / 2 = 18 layers, each gathered in fp8: 18 * 201,326,592 = 3,623,878,656 bytes fewer.
  const MemoryBreakdown bf16_pp = memory_of(GemmPrecision::kBf16, 2, 32);
  const MemoryBreakdown fp8_pp = memory_of(GemmPrecision::kFp8, 2, 32);
  CHECK(bf16_pp.weights_bytes - fp8_pp.weights_bytes == 18 * kLayerLinearBytesSaved);
  CHECK(fp8_pp.activations_bytes == bf16_pp.activations_bytes);
}

TEST_CASE("FSDP2 under pipeline parallelism: the stage's unsharded fp32 gradients") {
  // torch.distributed.pipelining runs each micro-batch's backward without gradient sync and
  // reduce-scatters in the last; FSDP2 accumulates the unsharded gradients in reduce_dtype fp32
  // (FSDPParam.to_accumulated_grad_if_needed): 4 bytes per stage parameter on top of the pp 1
  // terms. megatron-7.5b, pp 2, dp 32, stage 0: 18 layers of 201,379,840 + the word embedding
  // 51,200 * 4096 = 209,715,200 + learned positions 2048 * 4096 = 8,388,608 = 3,842,940,928
  // parameters, n / 32 = 120,091,904 exactly.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const int64_t n = 3'842'940'928;
  const int64_t largest_unit = 209'715'200;  // the embedding, above a layer's 201,379,840
  PlanOptions options;
  options.framework = Framework::kFsdp;
  Layout layout = make_layout(1, 2, 32, 1, 32);
  layout.zero = 3;
  const MemoryBreakdown bf16 =
      estimate_plan(model, models::load_cluster("dgx-h100"), layout, options).stages[0].memory;
  // Sharded fp32 gradient 4 n / 32, the largest unit's fp32 reduce-scatter input and bf16
  // gradient 6 * 209,715,200, the accumulated unsharded fp32 gradients 4 n.
  CHECK(bf16.gradients_bytes == 4 * n / 32 + 6 * largest_unit + 4 * n);
  // ZeRO 0 under fsdp is DDP: its whole fp32 gradient 4 n is the accumulation buffer already.
  layout.zero = 0;
  const MemoryBreakdown ddp =
      estimate_plan(model, models::load_cluster("dgx-h100"), layout, options).stages[0].memory;
  CHECK(ddp.gradients_bytes == 4 * n + 6 * largest_unit);
  // pp 1 keeps no accumulated gradients (torchtitan 9dec370 accumulates only under PP).
  Layout flat = make_layout(1, 1, 64, 1, 64);
  flat.zero = 3;
  const MemoryBreakdown pp1 =
      estimate_plan(model, models::load_cluster("dgx-h100"), flat, options).stages[0].memory;
  const int64_t psi = 7'467'786'240;
  CHECK(pp1.gradients_bytes == 4 * psi / 64 + 6 * largest_unit);
}

TEST_CASE("Megatron --fp8-param-gather: 1-byte linear weights and no separate fp8 cast") {
  // megatron-7.5b (36 layers, h 4096, f = 4h) on H100, tp 2, pp 2, dp 16, the distributed
  // optimizer. One rank's linear weights per layer: 12 h^2 / 2 = 100,663,296. With
  // --precision fp8 alone each is kept in bf16 (2 bytes) plus TE's fp8 cast and its transpose
  // (1 + 1); with --fp8-param-gather the weight is the 1-byte Float8Tensor and only the
  // transpose is added: 2 bytes fewer per weight, 18 layers on stage 0.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  constexpr int64_t kRankLayerLinear = 12LL * 4096 * 4096 / 2;  // 100,663,296
  Layout layout = make_layout(2, 2, 16, 1, 64);
  layout.zero = 1;
  const auto memory_of = [&](GemmPrecision precision, bool gather) {
    PlanOptions options;
    options.gemm_precision = precision;
    options.fp8_param_gather = gather;
    return estimate_plan(model, cluster, layout, options).stages[0].memory;
  };
  const MemoryBreakdown bf16 = memory_of(GemmPrecision::kBf16, false);
  const MemoryBreakdown fp8 = memory_of(GemmPrecision::kFp8, false);
  const MemoryBreakdown gathered = memory_of(GemmPrecision::kFp8, true);
  CHECK(fp8.weights_bytes - gathered.weights_bytes == 18 * 2 * kRankLayerLinear);
  // Against bf16: 1 (fp8 weight) + 1 (transpose) = 2 bytes, as the bf16 weight, so only TE's
  // delayed-scaling amax history remains: 1024 entries x 4 bytes x 20 scaled tensors a layer.
  CHECK(gathered.weights_bytes - bf16.weights_bytes == 18 * 1024 * 4 * 20);
  // The fp32 main grads and the distributed optimizer's fp32 main params and moments stay.
  CHECK(gathered.gradients_bytes == fp8.gradients_bytes);
  CHECK(gathered.optimizer_bytes == fp8.optimizer_bytes);
  CHECK(gathered.activations_bytes == fp8.activations_bytes);
}

TEST_CASE("--fp8-param-gather: what it needs, refused by name") {
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(2, 2, 16, 1, 64);
  layout.zero = 1;
  PlanOptions options;
  options.fp8_param_gather = true;
  // bf16 GEMMs: no fp8 weights to keep.
  CHECK_THROWS_WITH_AS(estimate_plan(model, cluster, layout, options),
                       doctest::Contains("fp8_param_gather: needs precision fp8"), InputError);
  options.gemm_precision = GemmPrecision::kFp8;
  for (const Framework framework :
       {Framework::kFsdp, Framework::kDeepSpeed, Framework::kMeshplan}) {
    options.framework = framework;
    const std::string expected = "fp8_param_gather: framework " + to_string(framework);
    CHECK_THROWS_WITH_AS(estimate_plan(model, cluster, layout, options),
                         doctest::Contains(expected.c_str()), InputError);
  }
  // Megatron without the distributed optimizer (DDP, zero 0): arguments.py refuses it.
  options.framework = Framework::kMegatron;
  layout.zero = 0;
  const PlanEstimate ddp = estimate_plan(model, cluster, layout, options);
  CHECK_FALSE(ddp.feasible);
  CHECK(ddp.rejection_code == "framework");
  CHECK(ddp.rejection_reason.find("--fp8-param-gather") != std::string::npos);
}

TEST_CASE("ZeRO-2/3 working sets: Megatron-FSDP and DeepSpeed, the same 7.5B on 64 GPUs") {
  // Units at tp 1: a layer 12 h^2 + 13 h = 201,379,840 parameters; the vocab-parallel embedding
  // (V = 51,200, already a multiple of tp) 51,200 * 4096 = 209,715,200, the largest unit.
  // psi / 64 = 116,684,160.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const int64_t shard = 116'684'160;
  const int64_t layer = 201'379'840;
  const int64_t vocab = 209'715'200;
  const auto memory_of = [&](Framework framework, int zero) {
    PlanOptions options;
    options.framework = framework;
    Layout layout = make_layout(1, 1, 64, 1, 64);
    layout.zero = zero;
    return estimate_plan(model, cluster, layout, options).stages[0].memory;
  };
  // Megatron-FSDP optim_grads_params (megatron_fsdp.md lines 381-382): 16/d states with bf16
  // main grads, plus two units of unsharded bf16 weights and two of gradients, the largest
  // unit and a layer: 2 * (209,715,200 + 201,379,840) = 822,190,080 bytes each.
  const MemoryBreakdown megatron = memory_of(Framework::kMegatron, 3);
  CHECK(megatron.weights_bytes == 2 * shard + 2 * (vocab + layer));  // + 822,190,080
  CHECK(megatron.gradients_bytes == 2 * shard + 2 * (vocab + layer));
  CHECK(megatron.optimizer_bytes == 12 * shard);
  // DeepSpeed ZeRO-3 (config.py defaults): the coordinator's peak of gathered elements
  // (deepspeed_zero3_trace, tested in dp_buckets_test.cpp) in bf16; gradients: the 2/d
  // partition, one 5e8-element bf16 reduce bucket (1e9 bytes) and the largest module's
  // unsharded bf16 gradient, the tied embedding's. The step's fp32 partition copy,
  // 4 * 116,684,160 = 466,736,640, is below the activations.
  const MemoryBreakdown zero3 = memory_of(Framework::kDeepSpeed, 3);
  Layout zero3_layout = make_layout(1, 1, 64, 1, 64);
  zero3_layout.zero = 3;
  const DeepSpeedZero3Trace trace = deepspeed_zero3_trace(model, zero3_layout, 0, PlanOptions{});
  CHECK(trace.largest_gradient_elements == vocab);
  CHECK(zero3.weights_bytes == 2 * shard + 2 * trace.peak_gathered_elements);
  CHECK(zero3.gradients_bytes == 2 * shard + 1'000'000'000 + 2 * vocab);
  CHECK(zero3.optimizer_bytes == 12 * shard);
  // DeepSpeed ZeRO-2: weights whole, 2/d gradients plus the reduce bucket.
  const MemoryBreakdown zero2 = memory_of(Framework::kDeepSpeed, 2);
  CHECK(zero2.weights_bytes == 2 * 7'467'786'240);
  CHECK(zero2.gradients_bytes == 2 * shard + 1'000'000'000);
  CHECK(zero2.activations_bytes > 4 * shard);  // so the step transient adds nothing
}

TEST_CASE("fp32 training keeps no master copy: (4 + 4 + 8) psi") {
  // local-cpu trains in fp32: weights 4 psi, gradients 4 psi, Adam m and v 8 psi (Kingma & Ba
  // 2015); the tiny preset whole on one rank.
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  const Layout layout = make_layout(1, 1, 1, 1, 1);
  // tiny: per layer Q, O 2 * 64 * 64 = 8,192, K, V 2 * 2 * 16 * 64 = 4,096, MLP 3 * 64 * 176 =
  // 33,792, two RMSNorms 128: 46,208; 4 layers 184,832; embedding and untied head 2 * 256 * 64 =
  // 32,768; final norm 64: psi = 217,664.
  const int64_t psi = 217'664;
  REQUIRE(stage_parameter_count(model, layout, 0, PlanOptions{}) == psi);
  const MemoryBreakdown memory = estimate_plan(model, cluster, layout).stages.at(0).memory;
  CHECK(memory.weights_bytes == 4 * psi);
  CHECK(memory.gradients_bytes == 4 * psi);
  CHECK(memory.optimizer_bytes == 8 * psi);
}

// ---------------------------------------------------------------------------------------------
// Activations: Korthikanti et al. 2022, Sec. 4. Per layer, 16-bit activations, b sequences of s
// tokens, h hidden, a heads, t tensor-parallel ranks (their eqs. for GPT: gelu, ffn 4h, a kv
// heads, no flash attention):
//   no parallelism            s b h (34 + 5 a s / h)
//   tensor parallel           s b h (10 + 24 / t + 5 a s / (h t))
//   tensor + sequence par.    s b h (34 / t + 5 a s / (h t))
//   selective recompute       the same without the 5 a s / h term (Sec. 5)
//   full recompute            2 s b h (the layer input), / t with sequence parallelism
// The case: h 1024, a 16, s 2048, b 1, t 4, so s b h = 2,097,152 and 5 a s / h = 160.
// The per-layer figure is read from estimate_plan as the difference between a 2-layer and a
// 1-layer model on one pipeline stage: everything outside the layers (embedding dropout mask,
// LM-head inputs, logits, full recompute's one rebuilt layer) is the same in both and cancels.
// A second case checks those non-layer parts in absolute terms.
// ---------------------------------------------------------------------------------------------

constexpr int64_t kSbh = 2048 * 1 * 1024;  // s b h = 2,097,152

// GEMM workspaces counted once in every stage's activations (memory.cpp gemm_workspace_bytes):
// PyTorch's cuBLAS workspace (CublasHandlePool.cpp: ":4096:2:16:8" = 8,519,680 bytes before
// Hopper, 32 MiB on it) and, under --framework megatron, Transformer Engine's (module/base.py
// get_cublas_workspace_size_bytes: 4 MiB before Hopper, 32 MiB on it).
constexpr int64_t kWorkspaceA100Megatron = 8'519'680 + 4'194'304;  // 12,713,984
constexpr int64_t kWorkspaceH100Megatron = 2 * 33'554'432;         // 67,108,864
constexpr int64_t kWorkspaceH100Torch = 33'554'432;                // fsdp: PyTorch's only

models::TransformerConfig korthikanti_gpt(int64_t num_layers) {
  models::TransformerConfig model;
  model.name = "korthikanti-case";
  model.num_layers = num_layers;
  model.hidden_size = 1024;
  model.num_attention_heads = 16;
  model.num_kv_heads = 16;
  model.head_dim = 64;
  model.ffn_hidden_size = 4096;
  model.vocab_size = 51200;
  model.seq_length = 2048;
  model.max_position_embeddings = 2048;
  model.activation = models::Activation::kGelu;
  model.norm = models::Norm::kLayerNorm;
  model.positions = models::Positions::kLearned;
  model.tied_embeddings = true;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = true;
  return model;
}

int64_t stage0_activations(int64_t num_layers, int64_t tp, bool sequence_parallel,
                           Recompute recompute, bool flash_attention) {
  Layout layout = make_layout(tp, 1, 1, 1, 1);
  layout.sequence_parallel = sequence_parallel;
  layout.recompute = recompute;
  PlanOptions options;
  options.flash_attention = flash_attention;
  const PlanEstimate estimate = estimate_plan(
      korthikanti_gpt(num_layers), models::load_cluster("dgx-a100-80gb"), layout, options);
  REQUIRE(estimate.stages.size() == 1);
  // pp 1: 1F1B on one stage holds one micro-batch at a time.
  REQUIRE(estimate.stages[0].peak_in_flight_micro_batches == 1);
  return estimate.stages[0].memory.activations_bytes;
}

int64_t per_layer(int64_t tp, bool sequence_parallel, Recompute recompute,
                  bool flash_attention = false) {
  return stage0_activations(2, tp, sequence_parallel, recompute, flash_attention) -
         stage0_activations(1, tp, sequence_parallel, recompute, flash_attention);
}

TEST_CASE("Korthikanti et al. 2022 eqs.: activations per layer, no recompute") {
  CHECK(per_layer(1, false, Recompute::kNone) == 194 * kSbh);    // 34 + 160 = 194
  CHECK(per_layer(4, false, Recompute::kNone) == 56 * kSbh);     // 10 + 24/4 + 160/4 = 56
  CHECK(2 * per_layer(4, true, Recompute::kNone) == 97 * kSbh);  // 34/4 + 160/4 = 48.5
}

TEST_CASE("Korthikanti et al. 2022 Sec. 5: selective recompute drops the 5as/h term") {
  CHECK(per_layer(1, false, Recompute::kSelective) == 34 * kSbh);     // 34
  CHECK(per_layer(4, false, Recompute::kSelective) == 16 * kSbh);     // 10 + 24/4 = 16
  CHECK(2 * per_layer(4, true, Recompute::kSelective) == 17 * kSbh);  // 34/4 = 8.5
}

TEST_CASE("Korthikanti et al. 2022 Sec. 4.3: full recompute keeps 2sbh, /t with SP") {
  CHECK(per_layer(1, false, Recompute::kFull) == 2 * kSbh);  // the layer input, 2 bytes
  CHECK(per_layer(4, false, Recompute::kFull) == 2 * kSbh);  // replicated over tp without SP
  CHECK(2 * per_layer(4, true, Recompute::kFull) == kSbh);   // 2 s b h / 4
}

TEST_CASE("flash attention: no s^2 scores, an fp32 log-sum-exp per query row and head") {
  // Dao 2022, Alg. 1: the forward keeps the softmax statistics (4 bytes per row of each head's
  // s x s scores) instead of the scores: 34 s b h + 4 s b a / t.
  CHECK(per_layer(1, false, Recompute::kNone, true) == 34 * kSbh + 4 * 2048 * 16);  // 71,434,240
  CHECK(per_layer(4, false, Recompute::kNone, true) == 16 * kSbh + 4 * 2048 * 16 / 4);
}

// One layer's activations of the Korthikanti case on H100 under `precision` and `framework`.
int64_t per_layer_on_h100(GemmPrecision precision, Framework framework, int64_t tp,
                          bool sequence_parallel, Recompute recompute) {
  const auto stage0 = [&](int64_t num_layers) {
    Layout layout = make_layout(tp, 1, 1, 1, 1);
    layout.sequence_parallel = sequence_parallel;
    layout.recompute = recompute;
    layout.zero = framework == Framework::kFsdp ? 3 : 1;
    PlanOptions options;
    options.framework = framework;
    options.gemm_precision = precision;
    return estimate_plan(korthikanti_gpt(num_layers), models::load_cluster("dgx-h100"), layout,
                         options)
        .stages[0]
        .memory.activations_bytes;
  };
  return stage0(2) - stage0(1);
}

TEST_CASE("Transformer Engine FP8: linear-layer inputs saved in 1 byte, flash keeps bf16 out") {
  // TE v1.8 LayerNormLinear saves its norm output in fp8 and Linear its input in fp8 (or the
  // fp8 transpose): QKV input (s b h), MLP input (s b h) and MLP-out input (s b f = 4 s b h)
  // save 1 byte each of their 2. The attention output (s b h) is kept in bf16 by flash
  // attention, so its fp8 copy adds 1 byte; under selective recompute it replaces it. Flash
  // attention is on (the default): 34 s b h + LSE in bf16.
  const auto delta = [](int64_t tp, bool sp, Recompute recompute) {
    return per_layer_on_h100(GemmPrecision::kFp8, Framework::kMegatron, tp, sp, recompute) -
           per_layer_on_h100(GemmPrecision::kBf16, Framework::kMegatron, tp, sp, recompute);
  };
  CHECK(delta(1, false, Recompute::kNone) == -(1 + 1 + 4 - 1) * kSbh);       // -5 s b h
  CHECK(delta(1, false, Recompute::kSelective) == -(1 + 1 + 4 + 1) * kSbh);  // -7 s b h
  // tp 4 with sequence parallelism: every term / 4.
  CHECK(4 * delta(4, true, Recompute::kNone) == -5 * kSbh);
  CHECK(4 * delta(4, true, Recompute::kSelective) == -7 * kSbh);
  // tp 4 without it: the QKV and MLP inputs are whole on each rank, the rest / 4.
  CHECK(4 * delta(4, false, Recompute::kNone) == -(2 * 4 + 4 - 1) * kSbh);
  // Full recompute keeps only the layer input (bf16); the rebuilt layer is outside the
  // per-layer difference.
  CHECK(delta(1, false, Recompute::kFull) == 0);
  // torchao's float8 under FSDP2 keeps bf16 activations (the op-level policy saves mm outputs).
  CHECK(per_layer_on_h100(GemmPrecision::kFp8, Framework::kFsdp, 1, false, Recompute::kNone) ==
        per_layer_on_h100(GemmPrecision::kBf16, Framework::kFsdp, 1, false, Recompute::kNone));
}

TEST_CASE("activations outside the layers, one stage, in absolute terms") {
  // Korthikanti et al. 2022, Sec. 4.4 (first and last pipeline stage): the embedding dropout
  // mask s b h (1 byte, / t only with SP), the final-norm and LM-head inputs 2 * 2 s b h (/ t
  // only with SP) and the fp32 logits 4 s b V / t = 4 * 2048 * 51200 / 4 = 104,857,600.
  // tp 4, no SP, no recompute, two layers: 2 * 56 sbh + sbh + 4 sbh + logits =
  // 117 * 2,097,152 + 104,857,600 = 350,224,384, plus the bf16 logits alive during their fp32
  // cast (Megatron-Core cross_entropy.py line 25): 2 s b V / t = 52,428,800: 402,653,184.
  CHECK(stage0_activations(2, 4, false, Recompute::kNone, false) ==
        402'653'184 + kWorkspaceA100Megatron);
  // tp 4, SP, full recompute, two layers: inputs 2 * 2 sbh / 4 = 2,097,152; the one layer the
  // backward rebuilds, stored in full (48.5 sbh = 101,711,872); mask sbh / 4 = 524,288; LM-head
  // inputs 4 sbh / 4 = 2,097,152; logits 104,857,600: 211,288,064. The bf16 logits copy
  // (52,428,800) exists in the forward, the rebuilt layer in the backward: only the larger
  // of the two counts.
  CHECK(stage0_activations(2, 4, true, Recompute::kFull, false) ==
        211'288'064 + kWorkspaceA100Megatron);
}

// A Llama-shaped block (GQA, SwiGLU, no dropout): h 1024, 16 heads of 64, 4 KV heads, f 2816.
models::TransformerConfig torchtitan_model(int64_t num_layers, int64_t vocab_size) {
  models::TransformerConfig model = korthikanti_gpt(num_layers);
  model.num_kv_heads = 4;
  model.ffn_hidden_size = 2816;
  model.vocab_size = vocab_size;
  model.activation = models::Activation::kSwiglu;
  model.norm = models::Norm::kRmsNorm;
  model.positions = models::Positions::kRope;
  model.tied_embeddings = false;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = false;
  model.dropout = false;
  return model;
}

// That block as torchtitan trains it: --framework fsdp, ZeRO 3 over dp 2, tp 1 (or `tp` with
// sequence parallelism, as torchtitan's apply_tp), one micro-batch of 2,048 tokens, flash
// attention, on dgx-h100.
PlanEstimate torchtitan_estimate(int64_t num_layers, int64_t vocab_size, Recompute recompute,
                                 int64_t tp) {
  const models::TransformerConfig model = torchtitan_model(num_layers, vocab_size);
  Layout layout = make_layout(tp, 1, 2, 1, 2);
  layout.zero = 3;
  layout.recompute = recompute;
  layout.sequence_parallel = tp > 1;
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.flash_attention = true;
  PlanEstimate estimate = estimate_plan(model, models::load_cluster("dgx-h100"), layout, options);
  REQUIRE(estimate.stages.size() == 1);
  return estimate;
}

int64_t torchtitan_activations(int64_t num_layers, int64_t vocab_size, Recompute recompute,
                               int64_t tp = 1) {
  return torchtitan_estimate(num_layers, vocab_size, recompute, tp)
      .stages[0]
      .memory.activations_bytes;
}

// The same block's reserve beyond the fixed part and 2.4% fragmentation: what the caching
// allocator keeps cached at the loss (memory.cpp fsdp_loss_cached_bytes).
int64_t torchtitan_cached_bytes(int64_t num_layers, int64_t vocab_size, Recompute recompute,
                                int64_t tp = 1) {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const MemoryBreakdown memory =
      torchtitan_estimate(num_layers, vocab_size, recompute, tp).stages[0].memory;
  const int64_t allocated = memory.total_bytes() - memory.reserved_bytes;
  return memory.reserved_bytes - cluster.reserved_bytes_per_gpu -
         static_cast<int64_t>(0.024 * static_cast<double>(allocated));
}

TEST_CASE("torchtitan's loss under the caching allocator: freed segments stay reserved") {
  // One block, T = 2048, h = 1024, f = 2816 (SwiGLU), a d = 1024, g d = 256, e = 2. The bf16
  // logits, deleted before the backward (train.py `del pred`), 2 T V / t, and the block's
  // rebuild when its widest tensor per token, e max(h, 2f / t, (a + 2g) d / t), is narrower
  // than the loss's fp32 4 V / t. Vocabulary 32,000, op-level SAC: 2 * 2048 * 32,000 =
  // 131,072,000 plus the rebuild 61,997,056 - 29,491,200 = 32,505,856 (2 * 5632 < 128,000).
  CHECK(torchtitan_cached_bytes(1, 32000, Recompute::kSelectiveOp) == 163'577'856);
  // Vocabulary 128: the loss's 4 V = 512 bytes per token is narrower than the block's 11,264,
  // so the block's segments can hold the loss's tensors: the bf16 logits only, 524,288.
  CHECK(torchtitan_cached_bytes(1, 128, Recompute::kSelectiveOp) == 524'288);
  // tp 2 with sequence parallelism, full checkpointing: logits 2 * 2048 * 16,000 = 65,536,000
  // plus the block rebuilt whole, 61,997,056 / 2 = 30,998,528 (2 * 2816 < 64,000): 96,534,528.
  CHECK(torchtitan_cached_bytes(1, 32000, Recompute::kFull, 2) == 96'534'528);
}

TEST_CASE("torch.distributed.pipelining under torchtitan: outputs and receive buffers") {
  // pp 2 (one block per stage), dp 2, micro-batch 1 of 2,048 tokens, full checkpointing, 1F1B:
  // stage 0 holds min(p, m) = 2 micro-batches and stage 1 one at any m >= 2, so their kept
  // outputs (fwd_cache, until each backward) do not change with m; what grows with m is torch
  // stage.py's receive buffers, one per micro-batch: stage 0's gradient buffers and stage 1's
  // activation buffers beyond the one in flight, T h e = 2048 * 1024 * 2 = 4,194,304 each.
  const models::TransformerConfig model = torchtitan_model(2, 32000);
  PlanOptions options;
  options.framework = Framework::kFsdp;
  const auto activations = [&](int64_t num_micro_batches, int64_t stage) {
    Layout layout = make_layout(1, 2, 2, 1, 2 * num_micro_batches);
    layout.zero = 3;
    layout.recompute = Recompute::kFull;
    const PlanEstimate estimate =
        estimate_plan(model, models::load_cluster("dgx-h100"), layout, options);
    return estimate.stages.at(static_cast<size_t>(stage)).memory.activations_bytes;
  };
  // From m = 2 to m = 4: two more buffers on each stage, 2 * 4,194,304.
  CHECK(activations(4, 0) - activations(2, 0) == 8'388'608);
  CHECK(activations(4, 1) - activations(2, 1) == 8'388'608);
  // Megatron receives into tensors allocated per transfer: nothing grows with m there.
  options.framework = Framework::kMegatron;
  CHECK(activations(4, 0) == activations(2, 0));
}

TEST_CASE("GEMM workspaces: Transformer Engine's cuBLAS workspace triples with --tp-comm-overlap") {
  // TE module/base.py: get_workspace is 32 MiB on Hopper (4 MiB before), and initialize_ub
  // replaces it by _NUM_MAX_UB_STREAMS = 3 copies: 2 x 32 MiB = 67,108,864 bytes more on H100,
  // 2 x 4 MiB = 8,388,608 on A100, on every stage; nothing else in memory changes.
  const models::TransformerConfig model = korthikanti_gpt(2);
  Layout layout = make_layout(2, 2, 1, 1, 4);
  layout.sequence_parallel = true;
  const auto extra = [&](const char* cluster_name, int64_t stage) {
    const models::ClusterConfig cluster = models::load_cluster(cluster_name);
    PlanOptions options;
    const int64_t off = estimate_plan(model, cluster, layout, options)
                            .stages.at(static_cast<size_t>(stage))
                            .memory.activations_bytes;
    options.overlap_tp_comm = true;
    return estimate_plan(model, cluster, layout, options)
               .stages.at(static_cast<size_t>(stage))
               .memory.activations_bytes -
           off;
  };
  CHECK(extra("dgx-h100", 0) == 67'108'864);
  CHECK(extra("dgx-h100", 1) == 67'108'864);
  CHECK(extra("dgx-a100-80gb", 0) == 8'388'608);
}

TEST_CASE("torchtitan's op-level selective checkpointing: what each block keeps") {
  // torchtitan parallelize_llama.py (_save_list, _custom_policy): the block input and the
  // outputs of the odd mms and of flash attention. T = 2048, e = 2, h = 1024, a d = 1024,
  // g d = 4 x 64 = 256, f = 2816: input T h e + wq T a d e + wv T g d e + attention output
  // T a d e + log-sum-exp 4 T a + w1 T f e + w2 T h e = 2048 * 2 * 7168 + 4 * 2048 * 16
  // = 29,491,200 bytes per layer.
  const int64_t per_layer = torchtitan_activations(2, 32000, Recompute::kSelectiveOp) -
                            torchtitan_activations(1, 32000, Recompute::kSelectiveOp);
  CHECK(per_layer == 29'491'200);
  // Without checkpointing the same block keeps Q, K, V, the attention output, the SwiGLU's two
  // inputs and its product, the four norm/projection inputs and the log-sum-exp:
  // 2048 * 2 * (1536 + 1024 + 3 * 2816 + 4096) + 131,072 = 61,997,056 bytes.
  const int64_t none_per_layer = torchtitan_activations(2, 32000, Recompute::kNone) -
                                 torchtitan_activations(1, 32000, Recompute::kNone);
  CHECK(none_per_layer == 61'997'056);
  // One layer, vocabulary 32,000: the layer's 29,491,200; final-norm and LM-head inputs
  // 2 T h e = 8,388,608; the saved fp32 log-softmax 4 T V = 262,144,000; and at its backward
  // two more fp32 tensors of that size (nll_loss's gradient and log_softmax's), 8 T V =
  // 524,288,000, larger than the block's rebuild: 824,311,808.
  CHECK(torchtitan_activations(1, 32000, Recompute::kSelectiveOp) ==
        824'311'808 + kWorkspaceH100Torch);
  // Vocabulary 128: the block's rebuild (61,997,056 - 29,491,200 = 32,505,856) is larger than
  // the loss's 8 T V = 2,097,152: 29,491,200 + 8,388,608 + 1,048,576 + 32,505,856.
  CHECK(torchtitan_activations(1, 128, Recompute::kSelectiveOp) ==
        71'434'240 + kWorkspaceH100Torch);
}

TEST_CASE("torchtitan's tensor-parallel LM head and loss_parallel cross-entropy") {
  // tp 2 with sequence parallelism, full checkpointing, one layer, vocabulary 32,000 (16,000
  // per rank), T = 2048, h = 1024, e = 2. The layer keeps its input T h e / 2 = 2,097,152;
  // the final-norm input T h e / 2 = 2,097,152 and the LM head's input, which
  // ColwiseParallel(input_layouts=Shard(1)) all-gathers before the linear saves it, T h e =
  // 4,194,304; the saved fp32 log-probabilities 4 T V / t = 131,072,000; and in
  // loss_parallel's backward `(zeros_like(x) + exp(x)) * grad` three more fp32 tensors of that
  // size at once, 12 T V / t = 393,216,000 (larger than the layer's rebuild): 532,676,608.
  CHECK(torchtitan_activations(1, 32000, Recompute::kFull, 2) == 532'676'608 + kWorkspaceH100Torch);
}

TEST_CASE("a model trained without dropout stores no masks") {
  // Korthikanti et al. 2022, Sec. 4.1, less the dropout tensors: the two s b h masks (attention
  // output, MLP output) and, in the scores, the mask (a s^2 b) and dropout output (2 a s^2 b):
  // 34 - 2 = 32 s b h + 2 a s^2 b = (32 + 2 a s / h) s b h = (32 + 64) sbh at t 1;
  // 10 - 2 + 24 / 4 = 14 sbh at t 4 with selective recompute.
  models::TransformerConfig model = korthikanti_gpt(2);
  model.dropout = false;
  models::TransformerConfig one_layer = korthikanti_gpt(1);
  one_layer.dropout = false;
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  PlanOptions options;
  options.flash_attention = false;
  const auto layer_bytes = [&](Layout layout) {
    return estimate_plan(model, cluster, layout, options).stages[0].memory.activations_bytes -
           estimate_plan(one_layer, cluster, layout, options).stages[0].memory.activations_bytes;
  };
  CHECK(layer_bytes(make_layout(1, 1, 1, 1, 1)) == 96 * kSbh);
  Layout selective = make_layout(4, 1, 1, 1, 1);
  selective.recompute = Recompute::kSelective;
  CHECK(layer_bytes(selective) == 14 * kSbh);
}

// One layer's stored activations (2 layers minus 1) of the Korthikanti-shaped GPT with
// `with_feature` applied, without flash attention, at tp `tp`.
template <typename Feature>
int64_t layer_activation_bytes_with(int64_t tp, bool sequence_parallel, Feature with_feature) {
  Layout layout = make_layout(tp, 1, 1, 1, 1);
  layout.sequence_parallel = sequence_parallel;
  PlanOptions options;
  options.flash_attention = false;
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  models::TransformerConfig two = korthikanti_gpt(2);
  models::TransformerConfig one = korthikanti_gpt(1);
  with_feature(two);
  with_feature(one);
  return estimate_plan(two, cluster, layout, options).stages[0].memory.activations_bytes -
         estimate_plan(one, cluster, layout, options).stages[0].memory.activations_bytes;
}

TEST_CASE("a parallel block keeps the layer input once for both norms") {
  // GPT-NeoX's gpt_j_residual: norm2 reads the layer input x, which norm1 already saved, instead
  // of x + attention: one 2 s b h tensor less than Korthikanti et al.'s 34 s b h, / t with SP.
  const auto parallel_per_layer = [](int64_t tp, bool sequence_parallel) {
    return layer_activation_bytes_with(tp, sequence_parallel, [](models::TransformerConfig& model) {
      model.parallel_residual = true;
    });
  };
  CHECK(parallel_per_layer(1, false) == 192 * kSbh);    // 194 - 2
  CHECK(parallel_per_layer(4, false) == 54 * kSbh);     // 56 - 2: replicated without SP
  CHECK(2 * parallel_per_layer(4, true) == 96 * kSbh);  // 97 - 2 / 4 x 2
}

TEST_CASE("sandwich norms keep the two branch outputs they normalise") {
  // Gemma 2/3's post-attention and post-MLP norms read the attention and MLP outputs before
  // their residual adds: two T h e = 2 s b h tensors more than Korthikanti et al.'s 34 s b h
  // (194 s b h per layer here without flash attention), / t with SP.
  const auto sandwich_per_layer = [](int64_t tp, bool sequence_parallel) {
    return layer_activation_bytes_with(tp, sequence_parallel, [](models::TransformerConfig& model) {
      model.sandwich_norm = true;
    });
  };
  CHECK(sandwich_per_layer(1, false) == 198 * kSbh);    // 194 + 4
  CHECK(sandwich_per_layer(4, false) == 60 * kSbh);     // 56 + 4: replicated without SP
  CHECK(2 * sandwich_per_layer(4, true) == 99 * kSbh);  // 97 + 4 / 4 x 2
}

TEST_CASE("Gemma 2's eager final soft-cap keeps tanh's output, one 16-bit logits copy") {
  // TanhBackward0 saves its output: e T V / t per last-chunk micro-batch in flight, here one
  // (pp 1), T = 2048 tokens, V = 51,200 (a multiple of 128 t, unpadded), e = 2:
  // 2 x 2048 x 51200 = 209,715,200 bytes at tp 1, a quarter at tp 4. Compiled (fsdp), none.
  const auto softcap_bytes = [](int64_t tp, PlanOptions options) {
    const Layout layout = make_layout(tp, 1, 1, 1, 1);
    const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
    const models::TransformerConfig plain = korthikanti_gpt(1);
    models::TransformerConfig capped = plain;
    capped.final_logit_softcapping = 30.0;
    return estimate_plan(capped, cluster, layout, options).stages[0].memory.activations_bytes -
           estimate_plan(plain, cluster, layout, options).stages[0].memory.activations_bytes;
  };
  CHECK(softcap_bytes(1, PlanOptions{}) == 209'715'200);
  CHECK(softcap_bytes(4, PlanOptions{}) == 52'428'800);
  PlanOptions compiled;
  compiled.framework = Framework::kFsdp;
  compiled.compile = true;
  CHECK(softcap_bytes(1, compiled) == 0);
}

TEST_CASE("Gemma 2's attention soft-cap: free under FlashAttention, one more score tensor eager") {
  // Unfused, TanhBackward0 keeps the capped scores: a s^2 b e = 16 x 2048^2 x 2 bytes per layer,
  // a s e / h = 16 x 2048 x 2 / 1024 = 64 s b h, / t; FlashAttention keeps no scores.
  const auto softcap_per_layer = [](int64_t tp, bool flash) {
    const Layout layout = make_layout(tp, 1, 1, 1, 1);
    PlanOptions options;
    options.flash_attention = flash;
    const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
    models::TransformerConfig two = korthikanti_gpt(2);
    models::TransformerConfig one = korthikanti_gpt(1);
    const int64_t plain =
        estimate_plan(two, cluster, layout, options).stages[0].memory.activations_bytes -
        estimate_plan(one, cluster, layout, options).stages[0].memory.activations_bytes;
    two.attn_logit_softcapping = one.attn_logit_softcapping = 50.0;
    return estimate_plan(two, cluster, layout, options).stages[0].memory.activations_bytes -
           estimate_plan(one, cluster, layout, options).stages[0].memory.activations_bytes - plain;
  };
  CHECK(softcap_per_layer(1, false) == 64 * kSbh);
  CHECK(softcap_per_layer(4, false) == 16 * kSbh);
  CHECK(softcap_per_layer(1, true) == 0);
}

TEST_CASE("q/k norms keep the projected queries and keys they normalise") {
  // Qwen3's and Gemma 3's per-head norms read Q and K before the norm: T (a + g) d e more, split
  // by t. Here a = g = 16 heads of 64: (a + g) d = 2 h, 4 s b h per layer in bf16.
  const auto qk_norm_per_layer = [](int64_t tp, bool sequence_parallel) {
    return layer_activation_bytes_with(
        tp, sequence_parallel, [](models::TransformerConfig& model) { model.qk_norm = true; });
  };
  CHECK(qk_norm_per_layer(1, false) == 198 * kSbh);    // 194 + 4
  CHECK(qk_norm_per_layer(4, false) == 57 * kSbh);     // 56 + 4 / 4
  CHECK(2 * qk_norm_per_layer(4, true) == 99 * kSbh);  // (97 + 4 / 4 x 2) / 2
  // Llama 4's L2 norm keeps the same inputs.
  CHECK(layer_activation_bytes_with(1, false, [](models::TransformerConfig& model) {
          model.qk_l2_norm = true;
        }) == 198 * kSbh);
}

// ---------------------------------------------------------------------------------------------
// In-flight micro-batches: the activation memory of a stage is its per-micro-batch activations
// times the peak in-flight count of that stage in the schedule's op list. 1F1B (Narayanan et
// al. 2021, Sec. 2.2.1) holds at most p - s micro-batches on stage s (its warm-up forwards plus
// one), GPipe all m.
// ---------------------------------------------------------------------------------------------

TEST_CASE("peak in-flight: 1F1B stage s holds min(p - s, m), GPipe m; memory follows") {
  const models::TransformerConfig model = korthikanti_gpt(8);  // 2 layers per stage at pp 4
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  PlanOptions options;
  options.flash_attention = false;
  const int64_t layer = 194 * kSbh;  // no recompute, t 1: 406,847,488 (case above)

  Layout layout = make_layout(1, 4, 1, 1, 8);  // m = 8 / (1 * 1) = 8
  layout.schedule = ScheduleKind::kOneFOneB;
  const PlanEstimate one_f_one_b = estimate_plan(model, cluster, layout, options);
  layout.schedule = ScheduleKind::kGpipe;
  const PlanEstimate gpipe = estimate_plan(model, cluster, layout, options);
  REQUIRE(one_f_one_b.stages.size() == 4);
  REQUIRE(gpipe.stages.size() == 4);

  for (int64_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(one_f_one_b.stages[s].peak_in_flight_micro_batches == 4 - s);  // p - s
    CHECK(gpipe.stages[s].peak_in_flight_micro_batches == 8);            // m
    // The same count as the op list itself.
    CHECK(one_f_one_b.stages[s].peak_in_flight_micro_batches ==
          peak_in_flight_micro_batches(generate_schedule(ScheduleKind::kOneFOneB, 4, 1, 8), s));
  }
  // Middle stages hold only layer activations: 2 layers * in-flight * 194 sbh.
  CHECK(one_f_one_b.stages[1].memory.activations_bytes ==
        3 * 2 * layer + kWorkspaceA100Megatron);  // 2,441,084,928
  CHECK(one_f_one_b.stages[2].memory.activations_bytes == 2 * 2 * layer + kWorkspaceA100Megatron);
  CHECK(gpipe.stages[1].memory.activations_bytes ==
        8 * 2 * layer + kWorkspaceA100Megatron);  // 6,509,559,808
  // Stage 0 also keeps one embedding dropout mask (s b h bytes) per micro-batch in flight.
  CHECK(one_f_one_b.stages[0].memory.activations_bytes ==
        4 * 2 * layer + 4 * kSbh + kWorkspaceA100Megatron);
  CHECK(gpipe.stages[0].memory.activations_bytes ==
        8 * 2 * layer + 8 * kSbh + kWorkspaceA100Megatron);

  // Fewer micro-batches than stages: 1F1B stage 0 holds only m = 2.
  layout = make_layout(1, 4, 1, 1, 2);
  const PlanEstimate short_pipeline = estimate_plan(model, cluster, layout, options);
  CHECK(short_pipeline.stages.at(0).peak_in_flight_micro_batches == 2);
  CHECK(short_pipeline.stages.at(0).memory.activations_bytes ==
        2 * 2 * layer + 2 * kSbh + kWorkspaceA100Megatron);
}

TEST_CASE("last stage under 1F1B: one micro-batch's LM-head inputs and logits") {
  // Korthikanti et al. 2022, Sec. 4.4, for the last stage of 1F1B (one micro-batch in flight):
  // layers 1 * 2 * 194 sbh, final-norm and LM-head inputs 2 * 2 sbh (no SP, t 1) and the fp32
  // logits 4 s b V = 4 * 2048 * 51200 = 419,430,400: 813,694,976 + 8,388,608 + 419,430,400,
  // plus the bf16 logits during the fp32 cast, 2 s b V = 209,715,200.
  PlanOptions options;
  options.flash_attention = false;
  const PlanEstimate estimate =
      estimate_plan(korthikanti_gpt(8), models::load_cluster("dgx-a100-80gb"),
                    make_layout(1, 4, 1, 1, 8), options);
  REQUIRE(estimate.stages.size() == 4);
  CHECK(estimate.stages[3].peak_in_flight_micro_batches == 1);
  CHECK(estimate.stages[3].memory.activations_bytes ==
        1'451'229'184 + kWorkspaceA100Megatron);  // + 209,715,200
}

// Fixed bug, kept as a regression test: memory.cpp adds the last stage's final-norm and LM-head
// inputs and fp32 logits once, as Korthikanti et al. 2022 Sec. 4.4 does for 1F1B, where the last
// stage holds one micro-batch. Under GPipe the last stage holds all m: every micro-batch's loss is
// computed in its forward and the cross-entropy backward needs its (fp32, s b V / t) softmax, so
// these are held m times. Here: 8 * (2 * 194 sbh + 4 sbh + 4 s b V) = 8 * 1,241,513,984 =
// 9,932,111,872 bytes; the code gives 8 * 2 * 194 sbh + 4 sbh + 4 s b V = 6,937,378,816 (3.0 GB,
// 30% short). The bf16 logits copy during the fp32 cast exists once (2 s b V = 209,715,200):
// 10,141,827,072.
TEST_CASE("GPipe last stage holds every micro-batch's LM-head inputs and logits") {
  PlanOptions options;
  options.flash_attention = false;
  Layout layout = make_layout(1, 4, 1, 1, 8);
  layout.schedule = ScheduleKind::kGpipe;
  const PlanEstimate estimate =
      estimate_plan(korthikanti_gpt(8), models::load_cluster("dgx-a100-80gb"), layout, options);
  REQUIRE(estimate.stages.size() == 4);
  REQUIRE(estimate.stages[3].peak_in_flight_micro_batches == 8);
  CHECK(estimate.stages[3].memory.activations_bytes == 10'141'827'072 + kWorkspaceA100Megatron);
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("ZB-H1 keeps B-to-W tensors of micro-batches waiting for their W") {
  // tiny (l 4, h 64, a 4, g 2, d 16, f 176 SwiGLU) on dgx-a100-80gb (bf16, e = 2), tp 1, pp 2,
  // dp 1, micro-batch 1, global batch 4: m = 4, T = 32 tokens, flash attention on (default).
  // Per layer and micro-batch, held activations (memory.cpp, Korthikanti et al. 2022 terms):
  //   Q, K, V 32 * 128 * 2 = 8,192; output-projection input 32 * 64 * 2 = 4,096; SwiGLU input
  //   2 * 32 * 176 * 2 = 22,528; second-projection input 32 * 176 * 2 = 11,264;
  //   4 T h e + 2 T h = 16,384 + 4,096 = 20,480; flash log-sum-exp 4 * 32 * 4 = 512:
  //   H = 67,072 bytes.
  // Waiting for W: linear inputs 2 T h + T a d + T f = 4,096 + 2,048 + 5,632 = 11,776 and
  //   output gradients T (a + 2g) d + 2 T h + 2 T f = 4,096 + 4,096 + 11,264 = 19,456 elements:
  //   W = 31,232 * 2 = 62,464 bytes.
  // The ZB-H1 op lists (pp 2, m 4), walked by hand as (held, waiting) after each op:
  //   stage 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3 -> peaks (2, 0) and (1, 1): max(2H, H + W) =
  //     2H, as 1F1B's stage 0 (holds p = 2): no difference.
  //   stage 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3 -> peaks (1, 1) and (0, 2):
  //     max(H + W, 2W) = H + W, against 1F1B's H: W more per layer, 2 layers: 124,928 bytes.
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout one_f_one_b = make_layout(1, 2, 1, 1, 4);
  Layout zero_bubble = one_f_one_b;
  zero_bubble.schedule = ScheduleKind::kZbH1;
  const PlanEstimate a = estimate_plan(model, cluster, one_f_one_b);
  const PlanEstimate b = estimate_plan(model, cluster, zero_bubble);
  REQUIRE(a.stages.size() == 2);
  REQUIRE(b.stages.size() == 2);
  CHECK(b.stages[0].memory.activations_bytes - a.stages[0].memory.activations_bytes == 0);
  CHECK(b.stages[1].memory.activations_bytes - a.stages[1].memory.activations_bytes == 124'928);
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

// Llama 3 405B as Dubey et al. 2024 ran it at 8K (Table 4): tp 8, pp 16, the paper's 7/8x14/7
// split interleaved with one layer per chunk (vpp 8; chunk 0 of stage 0 holds the embedding
// alone, the last chunk of stage 15 the LM head alone), sequence parallel, ZeRO 2.
Layout llama3_405b_interleaved(int64_t dp) {
  Layout layout = make_layout(8, 16, dp, 1, 2048);
  layout.vpp = 8;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.sequence_parallel = true;
  layout.zero = 2;
  layout.stage_layers = std::vector<int64_t>(16, 8);
  layout.stage_layers.front() = 7;
  layout.stage_layers.back() = 7;
  return layout;
}

TEST_CASE("interleaved in-flight activations count each chunk by its own layers") {
  // Every held (micro-batch, chunk) keeps its chunk's layers, so the embedding-only chunk 0 of
  // stage 0 keeps none (its output is freed once sent: Megatron-Core deallocate_output_tensor).
  // 16,384 GPUs (dp 128): m = 2048 / 128 = 16; the warm-up (16 - s - 1) * 2 + 7 * 16 >= m v = 128
  // on every stage, so each stage runs all 128 forwards first: stage 0 holds 16 x 7 = 112
  // layers, stage 1 16 x 8 = 128. 8,192 GPUs (dp 64): m = 32; stage 1 warms up 14 * 2 + 7 * 16
  // = 140 one-layer chunks and runs one more forward before its first backward: 141; stage 0
  // 30 + 112 = 142 plus one: 143 chunk-micro-batches, of which the 16 + 15 of chunk 0 hold no
  // layer (group 0's 16 micro-batches, then group 1's first 15): 112 layers.
  const models::TransformerConfig model = models::load_model("llama3-405b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanOptions options;
  struct Case {
    int64_t dp, stage0_layers, stage1_layers;
  };
  for (const Case& c : {Case{128, 112, 128}, Case{64, 112, 141}}) {
    // clang 14: no structured bindings inside CAPTURE's lambda.
    const int64_t dp = c.dp, stage0_layers = c.stage0_layers, stage1_layers = c.stage1_layers;
    CAPTURE(dp);
    const Layout layout = llama3_405b_interleaved(dp);
    const double layer = activation_bytes_per_layer(model, cluster, layout, options);
    const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
    REQUIRE(estimate.stages.size() == 16);
    CHECK(estimate.stages[0].memory.activations_bytes ==
          static_cast<int64_t>(static_cast<double>(stage0_layers) * layer) +
              kWorkspaceH100Megatron);
    CHECK(estimate.stages[1].memory.activations_bytes ==
          static_cast<int64_t>(static_cast<double>(stage1_layers) * layer) +
              kWorkspaceH100Megatron);
    CHECK(peak_in_flight_layers(layout.schedule, 16, 8, layout.num_micro_batches(), 0, 0,
                                {0, 1, 1, 1, 1, 1, 1, 1}) == stage0_layers);
  }
}

}  // namespace
}  // namespace meshplan::planner
