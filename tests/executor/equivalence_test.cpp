// The central test: every layout trains exactly like the single process. Runs under real mpirun
// (test suites mpi2, mpi4, mpi8 need that many ranks; see CMakeLists.txt). World rank 0 also
// trains the single-process reference on MPI_COMM_SELF; all assertions are on rank 0, after the
// collective parts, so a failed check never leaves another rank waiting.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "meshplan/cost_model.h"
#include "meshplan/pipeline_layout.h"
#include "shard_dims.h"
#include "tiny_plan.h"
#include "trainer.h"

namespace meshplan::executor {
namespace {

using planner::CollectiveKind;
using planner::CommGroup;
using planner::Recompute;
using planner::ScheduleKind;
using testing::make_layout;

constexpr int kSteps = 5;  // the issue asks for at least 5 optimizer steps

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> parameters;  // on world rank 0
};

int world_rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

RunResult train(const planner::Plan& plan, MPI_Comm comm) {
  validate_plan_for_executor(plan, plan.model.name);
  AdamWConfig adamw;
  // eps 1e-6 instead of 1e-8: Adam normalises every gradient to a step of about lr, so an
  // element whose gradient cancels to ~1e-9 moves in a direction set by fp32 summation order.
  // Measured on tp2 (lr 1e-3, 5 steps): largest parameter difference 1.1e-5 with eps 1e-8,
  // 5.0e-7 with eps 1e-6; a real bug moves parameters by ~lr = 1e-3 either way.
  adamw.epsilon = 1e-6;
  Trainer trainer(plan, make_synthetic_source(plan.model.vocab_size), adamw, comm);
  RunResult result;
  for (int step = 0; step < kSteps; step++) {
    result.losses.push_back(trainer.train_step().loss);
  }
  result.parameters = trainer.gather_full_parameters(0);
  return result;
}

// The single-process run of `model`, once per model, micro-batch size, load-balancing loss
// coefficient (the one option that changes the model's loss) and vocabulary rows built.
// `vocab_rows` is the sharded run's padded vocabulary (0: V, unpadded): at tp 1 a divisor of
// vocab_rows pads V (<= vocab_rows) to exactly that many rows, so both runs train the same logits.
const RunResult& reference(const models::TransformerConfig& model, int64_t micro_batch,
                           double aux_loss_coeff, int64_t vocab_rows = 0) {
  if (vocab_rows == 0) {
    vocab_rows = model.vocab_size;
  }
  static std::map<std::tuple<std::string, int64_t, double, int64_t>, RunResult> cache;
  const auto key = std::make_tuple(model.name, micro_batch, aux_loss_coeff, vocab_rows);
  auto it = cache.find(key);
  if (it == cache.end()) {
    planner::Plan plan = testing::make_plan(model, make_layout(1, 1, 1, micro_batch));
    plan.options.moe_aux_loss_coeff = aux_loss_coeff;
    plan.options.make_vocab_size_divisible_by = vocab_rows;
    REQUIRE(planner::padded_vocab_size(model, 1, plan.options) == vocab_rows);
    it = cache.emplace(key, train(plan, MPI_COMM_SELF)).first;
  }
  return it->second;
}

void check_equivalent(const models::TransformerConfig& model, const planner::Layout& layout,
                      const planner::PlanOptions& options = {}) {
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  REQUIRE(world_size == layout.num_gpus());
  const bool root = world_rank_of(MPI_COMM_WORLD) == 0;
  planner::Plan plan = testing::make_plan(model, layout);
  plan.options = options;
  if (!options.make_vocab_size_divisible_by) {
    plan.options.make_vocab_size_divisible_by = 1;  // make_plan's: no padding beyond tp
  }
  const int64_t vocab_rows = planner::padded_vocab_size(model, layout.tp, plan.options);
  const RunResult* expected =
      root ? &reference(model, layout.micro_batch, options.moe_aux_loss_coeff, vocab_rows)
           : nullptr;
  const RunResult actual = train(plan, MPI_COMM_WORLD);
  if (!root) {
    return;
  }
  CAPTURE(planner::describe(layout));
  double worst_loss = 0;
  for (int step = 0; step < kSteps; step++) {
    CAPTURE(step + 1);
    worst_loss = std::max(worst_loss, std::abs(actual.losses[step] / expected->losses[step] - 1));
    // 1e-5 relative (the bound): sharded sums differ from the single process only in
    // fp32 summation order, ~1e-7 relative per reduction.
    CHECK(actual.losses[step] == doctest::Approx(expected->losses[step]).epsilon(1e-5).scale(0));
  }
  MESSAGE("largest relative loss difference " << worst_loss);
  REQUIRE(actual.parameters.size() == expected->parameters.size());
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, tensor] : expected->parameters) {
    const std::vector<float>& got = actual.parameters.at(name);
    REQUIRE(got.size() == tensor.size());
    for (size_t i = 0; i < tensor.size(); i++) {
      const double difference = std::abs(static_cast<double>(got[i]) - tensor[i]) /
                                std::max(1.0, std::abs(static_cast<double>(tensor[i])));
      if (difference > worst) {
        worst = difference;
        worst_name = name;
      }
    }
  }
  CAPTURE(worst_name);
  // 1e-5 (the bound), relative for parameters above 1 in magnitude, else absolute.
  MESSAGE("largest parameter difference " << worst << " (" << worst_name << ")");
  CHECK(worst <= 1e-5);
}

planner::Layout with(planner::Layout layout, ScheduleKind schedule, int64_t vpp = 1) {
  layout.schedule = schedule;
  layout.vpp = vpp;
  return layout;
}

const models::TransformerConfig& tiny() {
  static const models::TransformerConfig model = models::load_model("tiny");
  return model;
}

// A GPT-2-style variant of tiny: GELU, LayerNorm, learned positions, tied embeddings, biases;
// exercises the embedding group, the replicated biases and the position table.
const models::TransformerConfig& tiny_gpt2() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-gpt2";
    m.num_kv_heads = 4;
    m.ffn_hidden_size = 256;
    m.max_position_embeddings = 32;
    m.activation = models::Activation::kGelu;
    m.norm = models::Norm::kLayerNorm;
    m.positions = models::Positions::kLearned;
    m.tied_embeddings = true;
    m.qkv_bias = true;
    m.attention_output_bias = true;
    m.mlp_bias = true;
    return m;
  }();
  return model;
}

// tiny with 6 layers, so pp 4 can hold an uneven 1/2/2/1 split.
const models::TransformerConfig& tiny_six_layers() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-6-layers";
    m.num_layers = 6;
    return m;
  }();
  return model;
}

// `model` with another vocabulary size (the synthetic data draws tokens below it).
models::TransformerConfig with_vocab(models::TransformerConfig model, int64_t vocab_size) {
  model.name += fmt::format("-vocab-{}", vocab_size);
  model.vocab_size = vocab_size;
  return model;
}

planner::PlanOptions vocab_divisor(int64_t divisor) {
  planner::PlanOptions options;
  options.make_vocab_size_divisible_by = divisor;
  return options;
}

planner::Layout split(planner::Layout layout, std::vector<int64_t> stage_layers) {
  layout.stage_layers = std::move(stage_layers);
  return layout;
}

planner::Layout with_cp(planner::Layout layout, int64_t cp) {
  layout.cp = cp;
  return layout;
}

TEST_SUITE("mpi2") {
  TEST_CASE("cp2 (causal load-balanced ring attention) equals one process") {
    check_equivalent(tiny(), with_cp(make_layout(1, 1, 1), 2));
  }
  TEST_CASE("cp2 with block recompute of 2 of 4 layers equals one process") {
    planner::Layout layout = with_cp(make_layout(1, 1, 1), 2);
    layout.recompute = Recompute::kFull;
    layout.recompute_layers = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("cp2 with selective recompute and ZeRO-1 over dp x cp equals one process") {
    planner::Layout layout = with_cp(make_layout(1, 1, 1), 2);
    layout.recompute = Recompute::kSelective;
    layout.zero = 1;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 equals one process") {
    check_equivalent(tiny(), make_layout(2, 1, 1));
  }
  TEST_CASE("tp2 with sequence parallel equals one process") {
    planner::Layout layout = make_layout(2, 1, 1);
    layout.sequence_parallel = true;
    check_equivalent(tiny(), layout);
  }
  // Vocabulary padding (planner::padded_vocab_size): the sharded run builds the padded rows,
  // which are never a token or a target but enter the softmax, and the reference builds the same
  // rows on one process. Megatron's divisor 64 at tp 2 pads 250 to 256 (128 rows a rank);
  // meshplan's divisor 1 pads 255 to 256 at tp 2 (which the executor refused until session 48).
  TEST_CASE("tp2 on a vocabulary padded to a multiple of 64 x tp equals one process") {
    check_equivalent(with_vocab(tiny(), 250), make_layout(2, 1, 1), vocab_divisor(64));
  }
  TEST_CASE("tp2 on a vocabulary padded to a multiple of tp equals one process") {
    check_equivalent(with_vocab(tiny(), 255), make_layout(2, 1, 1));
  }
  TEST_CASE("pp2 with tied embeddings on a padded vocabulary equals one process") {
    check_equivalent(with_vocab(tiny_gpt2(), 250), make_layout(1, 2, 1), vocab_divisor(128));
  }
  TEST_CASE("pp2 gpipe equals one process") {
    check_equivalent(tiny(), with(make_layout(1, 2, 1), ScheduleKind::kGpipe));
  }
  TEST_CASE("pp2 with a 3/1 layer split equals one process") {
    check_equivalent(tiny(), split(make_layout(1, 2, 1), {3, 1}));
  }
  TEST_CASE("pp2 zb-h1 with a 1/3 layer split, GPT-2 style (tied) equals one process") {
    check_equivalent(tiny_gpt2(), split(with(make_layout(1, 2, 1), ScheduleKind::kZbH1), {1, 3}));
  }
  TEST_CASE("pp2 1f1b equals one process") {
    check_equivalent(tiny(), with(make_layout(1, 2, 1), ScheduleKind::kOneFOneB));
  }
  TEST_CASE("pp2 zb-h1 equals one process") {
    check_equivalent(tiny(), with(make_layout(1, 2, 1), ScheduleKind::kZbH1));
  }
  TEST_CASE("pp2 interleaved vpp2 equals one process") {
    check_equivalent(tiny(), with(make_layout(1, 2, 1), ScheduleKind::kInterleaved, 2));
  }
  TEST_CASE("pp2 interleaved vpp2 in micro-batch groups of 3 (N != pp) equals one process") {
    // Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage 3 on m = 8: groups of
    // micro-batches 0-2, 3-5 and 6-7 (the last group takes the rest, 8 % 3 = 2 >= pp).
    planner::Layout layout = with(make_layout(1, 2, 1), ScheduleKind::kInterleaved, 2);
    layout.microbatch_group = 3;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("pp2 interleaved vpp3 on an embedding/loss-accounted 2/2 split equals one process") {
    // Megatron-Core's --account-for-embedding/loss-in-pipeline-split: 4 layers + 2 slots over
    // pp 2 x vpp 3 one-slot chunks, virtual stages E, 0, 1, 2, 3, L: the first chunk of stage 0
    // holds the embedding alone, the last chunk of stage 1 the LM head and loss alone.
    check_equivalent(tiny(),
                     split(with(make_layout(1, 2, 1), ScheduleKind::kInterleaved, 3), {2, 2}));
  }
  TEST_CASE("pp2 interleaved vpp2 on a 3/1 pipeline-layout split equals one process") {
    // Neither divisible by vpp nor accounted: Megatron-Core's --pipeline-model-parallel-layout
    // "Et||tt|tL" (planner::stage_layer_range): each stage's layers over its chunks as
    // evenly as they go, longer chunks last: virtual stages s0c0, s1c0, s0c1, s1c1 hold layers
    // 0 | none | 1-2 | 3, so stage 1's first chunk passes its input through.
    check_equivalent(tiny(),
                     split(with(make_layout(1, 2, 1), ScheduleKind::kInterleaved, 2), {3, 1}));
  }
  TEST_CASE("pp2 interleaved vpp2 on the pipeline layout \"E|tt|t|tL\" equals one process") {
    // A layout string no stage list states (--pipeline-layout): stage sums 1/3, but stage 1's
    // first chunk holds two layers and its second one (the stage rule would give 1 and 2):
    // virtual stages s0c0, s1c0, s0c1, s1c1 hold none (the embedding alone) | 0-1 | 2 | 3.
    const planner::PipelineLayoutSplit layers =
        planner::pipeline_layout_split(tiny(), 2, "E|tt|t|tL", "test");
    REQUIRE(layers.virtual_stage_layers == std::vector<int64_t>{0, 2, 1, 1});
    planner::Layout layout =
        split(with(make_layout(1, 2, 1), ScheduleKind::kInterleaved, 2), layers.stage_layers);
    layout.virtual_stage_layers = layers.virtual_stage_layers;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("dp2 equals one process") {
    check_equivalent(tiny(), make_layout(1, 1, 2));
  }
  TEST_CASE("dp2 with ZeRO-1 (overlapped reduce-scatter and gather) equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 1;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("dp2 with ZeRO-1, nothing overlapped, equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 1;
    planner::PlanOptions options;
    options.overlap_grad_reduce = false;
    options.overlap_param_gather = false;
    check_equivalent(tiny(), layout, options);
  }
  TEST_CASE("dp2 with ZeRO-2 (overlapped reduce-scatter every micro-batch) equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("dp2 with ZeRO-2, nothing overlapped, equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 2;
    planner::PlanOptions options;
    options.overlap_grad_reduce = false;
    options.overlap_param_gather = false;
    check_equivalent(tiny(), layout, options);
  }
  TEST_CASE("dp2 with DeepSpeed's ZeRO-1 and ZeRO-2 bucket all-reduce equals one process") {
    // A deepspeed plan all-reduces each bucket and keeps this rank's block (gradient_sync.h):
    // rank 1's block is read from the middle of the bucket, not its start.
    planner::PlanOptions options;
    options.framework = planner::Framework::kDeepSpeed;
    for (int zero : {1, 2}) {
      CAPTURE(zero);
      planner::Layout layout = make_layout(1, 1, 2);
      layout.zero = zero;
      check_equivalent(tiny(), layout, options);
    }
  }
  TEST_CASE("dp2 with ZeRO-3 (prefetched gathers before every F and B) equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 3;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("dp2 with ZeRO-3 and block recompute of 2 of 4 layers equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 3;
    layout.recompute = Recompute::kFull;
    layout.recompute_layers = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("dp2 with ZeRO-3 and full recompute, nothing overlapped, equals one process") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 3;
    layout.recompute = Recompute::kFull;
    planner::PlanOptions options;
    options.overlap_grad_reduce = false;
    options.overlap_param_gather = false;
    check_equivalent(tiny(), layout, options);
  }
  TEST_CASE("tp2 with full recompute equals one process") {
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = Recompute::kFull;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 with full recompute and distributed saved activations equals one process") {
    // Megatron-LM --distribute-saved-activations: each block keeps half of its input and
    // all-gathers it over tp before its recompute (executor/model_chunk.cpp).
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = Recompute::kFull;
    planner::PlanOptions options;
    options.distribute_saved_activations = true;
    check_equivalent(tiny(), layout, options);
  }
  TEST_CASE("pp2 with Megatron's block recompute (1 of each stage's 2 layers) equals one process") {
    planner::Layout layout = make_layout(1, 2, 1);
    layout.recompute = Recompute::kFull;
    layout.recompute_layers = 1;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 with block recompute of 3 of 4 layers, saved inputs distributed, equals one") {
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = Recompute::kFull;
    layout.recompute_layers = 3;
    planner::PlanOptions options;
    options.distribute_saved_activations = true;
    check_equivalent(tiny_gpt2(), layout, options);
  }
  TEST_CASE("pp2 with Megatron's uniform recompute in groups of 2 layers equals one process") {
    planner::Layout layout = make_layout(1, 2, 1);
    layout.recompute = Recompute::kFull;
    layout.recompute_group_layers = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 with recompute in groups of 3 of 4 layers, saved inputs distributed, equals one") {
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = Recompute::kFull;
    layout.recompute_group_layers = 3;
    planner::PlanOptions options;
    options.distribute_saved_activations = true;
    check_equivalent(tiny_gpt2(), layout, options);
  }
  TEST_CASE("pp2 with selective recompute equals one process") {
    planner::Layout layout = make_layout(1, 2, 1);
    layout.recompute = Recompute::kSelective;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("GPT-2 style, tied across pp2 (embedding group) equals one process") {
    check_equivalent(tiny_gpt2(), make_layout(1, 2, 1));
  }
  TEST_CASE("GPT-2 style, tp2 with sequence parallel and full recompute equals one process") {
    planner::Layout layout = make_layout(2, 1, 1);
    layout.sequence_parallel = true;
    layout.recompute = Recompute::kFull;
    check_equivalent(tiny_gpt2(), layout);
  }
}

// tiny-moe: 4 layers (1 dense, 3 MoE of 4 SwiGLU experts, top-2), with the load-balancing
// loss on at Mixtral's Hugging Face coefficient (router_aux_loss_coef 0.02), so its gradient
// through the router is part of what must match.
const models::TransformerConfig& tiny_moe() {
  static const models::TransformerConfig model = models::load_model("tiny-moe");
  return model;
}

// tiny-moe with one shared expert of 96 (DeepSeek-V3's and Qwen2-MoE's always-active expert).
const models::TransformerConfig& tiny_moe_shared() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny-moe");
    m.name = "tiny-moe-shared";
    m.num_shared_experts = 1;
    m.shared_expert_ffn_hidden_size = 96;
    return m;
  }();
  return model;
}

// tiny-moe with MoE every other layer (moe_layers 1, 0, 1, 0: GShard's and Switch's pattern),
// the dense layers between them.
const models::TransformerConfig& tiny_moe_alternate() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny-moe");
    m.name = "tiny-moe-alternate";
    m.first_dense_layers = 0;
    m.moe_layers = {1, 0, 1, 0};
    return m;
  }();
  return model;
}

planner::PlanOptions moe_options() {
  planner::PlanOptions options;
  options.moe_aux_loss_coeff = 0.02;
  return options;
}

planner::Layout with_ep(planner::Layout layout, int64_t ep) {
  layout.ep = ep;
  return layout;
}

TEST_SUITE("mpi2") {
  TEST_CASE("ep2 (tiny-moe, all-to-all dispatch, load-balancing loss) equals one process") {
    check_equivalent(tiny_moe(), with_ep(make_layout(1, 1, 2), 2), moe_options());
  }
  TEST_CASE(
      "tiny-moe: ep2 without the loss, ep2 with full recompute, pp2 zb-h1 equal one process") {
    check_equivalent(tiny_moe(), with_ep(make_layout(1, 1, 2), 2));
    planner::Layout recompute = with_ep(make_layout(1, 1, 2), 2);
    recompute.recompute = Recompute::kFull;
    check_equivalent(tiny_moe(), recompute, moe_options());
    check_equivalent(tiny_moe(), with(make_layout(1, 2, 1), ScheduleKind::kZbH1), moe_options());
  }
  TEST_CASE("MoE every other layer (moe_layers): ep2, pp2 equal one process") {
    check_equivalent(tiny_moe_alternate(), with_ep(make_layout(1, 1, 2), 2), moe_options());
    check_equivalent(tiny_moe_alternate(), make_layout(1, 2, 1), moe_options());
  }
  TEST_CASE("tiny-moe ep2 with block recompute of 2 of 4 layers equals one process") {
    planner::Layout layout = with_ep(make_layout(1, 1, 2), 2);
    layout.recompute = Recompute::kFull;
    layout.recompute_layers = 2;
    check_equivalent(tiny_moe(), layout, moe_options());
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("ep2 x dp2 (expert data parallel 2) equals one process, and with a shared expert") {
    check_equivalent(tiny_moe(), with_ep(make_layout(1, 1, 4), 2), moe_options());
    check_equivalent(tiny_moe_shared(), with_ep(make_layout(1, 1, 4), 2), moe_options());
  }
  TEST_CASE("ep2 x pp2 (1f1b, and interleaved vpp2) equals one process") {
    check_equivalent(tiny_moe(), with_ep(make_layout(1, 2, 2), 2), moe_options());
    check_equivalent(tiny_moe(),
                     with_ep(with(make_layout(1, 2, 2), ScheduleKind::kInterleaved, 2), 2),
                     moe_options());
  }
}

// tiny (s 32) with every layer's attention windowed to 8 keys (Mistral-style sliding window).
const models::TransformerConfig& tiny_window() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-window-8";
    m.sliding_window = 8;
    return m;
  }();
  return model;
}

// tiny-mla with the same window: the latent attention's core runs the same masked softmax.
const models::TransformerConfig& tiny_mla_window() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny-mla");
    m.name = "tiny-mla-window-8";
    m.sliding_window = 8;
    return m;
  }();
  return model;
}

// tiny's window of 8 on some layers only (window_attn_skip_freq N: layer number n = index + 1
// windowed unless n % N == 0). N 2: layers 0 and 2 windowed, 1 and 3 full (Gemma 2's
// alternation); N 3: layers 0, 1 and 3 windowed, 2 full, so pp 2's stages differ (W W | F W)
// and a layer reading its window by its index within the stage would get stage 1 wrong.
const models::TransformerConfig& tiny_window_skip(int64_t skip_freq) {
  static std::map<int64_t, models::TransformerConfig> cache;
  auto it = cache.find(skip_freq);
  if (it == cache.end()) {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-window-8-skip-" + std::to_string(skip_freq);
    m.sliding_window = 8;
    m.window_attn_skip_freq = skip_freq;
    it = cache.emplace(skip_freq, m).first;
  }
  return it->second;
}

TEST_SUITE("mpi2") {
  TEST_CASE("window on some layers (window_attn_skip_freq): pp2, tp2 sp equal one process") {
    check_equivalent(tiny_window_skip(2), make_layout(1, 2, 1));
    check_equivalent(tiny_window_skip(3), make_layout(1, 2, 1));
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    sp.recompute = Recompute::kSelective;  // each layer's probabilities rebuilt in B
    check_equivalent(tiny_window_skip(2), sp);
  }
  TEST_CASE("the pattern is applied: its losses differ from full attention's and all layers'") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& pattern = reference(tiny_window_skip(2), 1, 0.0);
    const RunResult& every_layer = reference(tiny_window(), 1, 0.0);
    const RunResult& full = reference(tiny(), 1, 0.0);
    // Step 1 starts from the same weights and data: only the masks of layers 1 and 3 (against
    // every layer's window) or of layers 0 and 2 (against full attention) differ. Measured
    // relative differences at step 1: 2.1e-5 and 3.4e-4, growing to 7e-4 and more from step 2
    // on; fp32 summation order moves a loss by ~1e-7.
    CHECK(std::abs(pattern.losses[0] / every_layer.losses[0] - 1) > 1e-5);
    CHECK(std::abs(pattern.losses[0] / full.losses[0] - 1) > 1e-4);
    for (int step = 1; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(pattern.losses[step] / every_layer.losses[step] - 1) > 1e-4);
      CHECK(std::abs(pattern.losses[step] / full.losses[step] - 1) > 1e-4);
    }
  }
  TEST_CASE("sliding window 8 of 32: tp2 sp, pp2 1f1b, dp2 ZeRO-1 equal one process") {
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    sp.recompute = Recompute::kSelective;  // the windowed probabilities rebuilt in B
    check_equivalent(tiny_window(), sp);
    check_equivalent(tiny_window(), make_layout(1, 2, 1));
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_equivalent(tiny_window(), zero1);
    check_equivalent(tiny_mla_window(), make_layout(2, 1, 1));
  }
  TEST_CASE("the window is applied: its single-process losses differ from full attention's") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& windowed = reference(tiny_window(), 1, 0.0);
    const RunResult& full = reference(tiny(), 1, 0.0);
    // Step 1 starts from the same weights and data: only attention's mask differs. Past
    // 1e-4 relative, far above fp32 summation order (~1e-7).
    CHECK(std::abs(windowed.losses[0] / full.losses[0] - 1) > 1e-4);
    for (int step = 1; step < kSteps; step++) {
      CHECK(windowed.losses[step] != full.losses[step]);
    }
  }
}

// tiny with Gemma's gated GELU MLP (GeGLU): fc1's [gate | up] rows split over tp as SwiGLU's.
const models::TransformerConfig& tiny_geglu() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-geglu";
    m.activation = models::Activation::kGeglu;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("GeGLU: tp2 sp, pp2 1f1b, dp2 ZeRO-1 equal one process") {
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    check_equivalent(tiny_geglu(), sp);
    check_equivalent(tiny_geglu(), make_layout(1, 2, 1));
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_equivalent(tiny_geglu(), zero1);
  }
  TEST_CASE("GeGLU is applied: its single-process losses differ from SwiGLU's") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& geglu = reference(tiny_geglu(), 1, 0.0);
    const RunResult& swiglu = reference(tiny(), 1, 0.0);
    // Same weights and data, only the gate's function differs; fp32 summation order moves a
    // loss by ~1e-7 relative.
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(geglu.losses[step] / swiglu.losses[step] - 1) > 1e-6);
    }
  }
}

// tiny as GemmaForCausalLM builds it: GeGLU, RMSNorm scaling by (1 + weight), the embedding
// times sqrt(h), the LM head tied to the unscaled table.
const models::TransformerConfig& tiny_gemma() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = tiny_geglu();
    m.name = "tiny-gemma";
    m.norm_unit_offset = true;
    m.scale_embeddings = true;
    m.tied_embeddings = true;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("Gemma (GeGLU, (1 + w) norms, x sqrt(h), tied): tp2 sp, pp2, dp2 ZeRO-1 equal one") {
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    check_equivalent(tiny_gemma(), sp);
    check_equivalent(tiny_gemma(), make_layout(1, 2, 1));  // the tied table on both stages
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_equivalent(tiny_gemma(), zero1);
  }
}

// tiny with Qwen3's per-head q/k RMSNorms (one gain of head_dim for the query heads, one for
// the key heads; each tp rank applies them to its own heads).
const models::TransformerConfig& tiny_qk_norm() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-qk-norm";
    m.qk_norm = true;
    return m;
  }();
  return model;
}

// tiny as Gemma3ForCausalLM builds it: tiny-gemma plus the q/k norms and the sandwich norms
// (post-attention and post-MLP), every norm scaling by (1 + weight).
const models::TransformerConfig& tiny_gemma3() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = tiny_gemma();
    m.name = "tiny-gemma3";
    m.qk_norm = true;
    m.sandwich_norm = true;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("q/k norms: tp2, tp2 sp, pp2, dp2 equal one process") {
    // tp2 without sequence parallelism: only the q/k-norm gains' tp all-reduce keeps them equal.
    check_equivalent(tiny_qk_norm(), make_layout(2, 1, 1));
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    check_equivalent(tiny_qk_norm(), sp);
    check_equivalent(tiny_qk_norm(), make_layout(1, 2, 1));
    check_equivalent(tiny_qk_norm(), make_layout(1, 1, 2));
  }
  TEST_CASE(
      "Gemma 3 (sandwich and q/k norms, GeGLU, (1 + w), x sqrt(h)): tp2, tp2 sp, pp2, dp2 "
      "ZeRO-1 equal one process") {
    check_equivalent(tiny_gemma3(), make_layout(2, 1, 1));
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    check_equivalent(tiny_gemma3(), sp);
    check_equivalent(tiny_gemma3(), make_layout(1, 2, 1));  // the tied table on both stages
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_equivalent(tiny_gemma3(), zero1);
  }
  TEST_CASE("q/k and sandwich norms are applied: losses differ from the models without them") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    // Same weights and data; fp32 summation order moves a loss by ~1e-7 relative.
    const RunResult& qk_norm = reference(tiny_qk_norm(), 2, 0.0);
    const RunResult& plain = reference(tiny(), 2, 0.0);
    models::TransformerConfig gemma3_without_sandwich = tiny_gemma3();
    gemma3_without_sandwich.name = "tiny-gemma3-no-sandwich";
    gemma3_without_sandwich.sandwich_norm = false;
    const RunResult& gemma3 = reference(tiny_gemma3(), 2, 0.0);
    const RunResult& without_sandwich = reference(gemma3_without_sandwich, 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(qk_norm.losses[step] / plain.losses[step] - 1) > 1e-6);
      CHECK(std::abs(gemma3.losses[step] / without_sandwich.losses[step] - 1) > 1e-6);
    }
  }
}

// tiny with GLM-4.5's partial rotary: rotary_percent 0.5 turns the first 8 of each head's 16
// channels and passes the other 8 through.
const models::TransformerConfig& tiny_partial_rotary() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-partial-rotary";
    m.rotary_percent = 0.5;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("partial rotary (rotary_percent 0.5): tp2, cp2, pp2 equal one process") {
    check_equivalent(tiny_partial_rotary(), make_layout(2, 1, 1));
    // cp2: the ring's rows turn at their own positions.
    check_equivalent(tiny_partial_rotary(), with_cp(make_layout(1, 1, 1), 2));
    check_equivalent(tiny_partial_rotary(), make_layout(1, 2, 1));
  }
  TEST_CASE("partial rotary is applied: its losses differ from full rotary's") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& partial = reference(tiny_partial_rotary(), 2, 0.0);
    const RunResult& full = reference(tiny(), 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(partial.losses[step] / full.losses[step] - 1) > 1e-6);
    }
  }
}

// tiny and tiny-mla at Llama 3's rotary base, 500000 (Dubey et al. 2024, Table 3).
models::TransformerConfig with_llama3_rope_base(const char* preset) {
  models::TransformerConfig m = models::load_model(preset);
  m.name = std::string(preset) + "-rope-500000";
  m.rope_theta = 500000.0;
  return m;
}
const models::TransformerConfig& tiny_rope_base() {
  static const models::TransformerConfig model = with_llama3_rope_base("tiny");
  return model;
}
const models::TransformerConfig& tiny_mla_rope_base() {
  static const models::TransformerConfig model = with_llama3_rope_base("tiny-mla");
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("rope_theta: cp2's rows turn at their positions by the model's base") {
    check_equivalent(tiny_rope_base(), with_cp(make_layout(1, 1, 1), 2));
  }
  TEST_CASE("rope_theta is applied: its losses differ from the base 10000's, MLA's too") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& base = reference(tiny_rope_base(), 2, 0.0);
    const RunResult& plain = reference(tiny(), 2, 0.0);
    const RunResult& mla_base = reference(tiny_mla_rope_base(), 2, 0.0);
    const RunResult& mla_plain = reference(models::load_model("tiny-mla"), 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(base.losses[step] / plain.losses[step] - 1) > 1e-6);
      // MLA rotates 8 of 24 query/key channels per head, so the base moves the loss less (by
      // 1e-7 to 1e-6 here); the runs are deterministic, so any difference is the base's.
      CHECK(mla_base.losses[step] != mla_plain.losses[step]);
    }
  }
}

// Gemma 3's two rotary bases (Gemma Team 2025, Sec. 2.2) on tiny's window pattern N 3: layers
// 0, 1 and 3 slide (window 8) and turn by the local base, layer 2 attends to all by the global
// one, so pp 2's stages differ (S S | F S) and a stage reading the base by its local index
// would turn layer 2 by the wrong one.
models::TransformerConfig tiny_two_bases(double global_theta, double local_theta) {
  models::TransformerConfig m = tiny_window_skip(3);
  m.name = fmt::format("tiny-window-skip-3-rope-{:g}-local-{:g}", global_theta, local_theta);
  m.rope_theta = global_theta;
  m.rope_local_theta = local_theta == global_theta ? 0.0 : local_theta;
  return m;
}

TEST_SUITE("mpi2") {
  TEST_CASE("rope_local_theta: pp2, tp2 and dp2 ZeRO-3 equal one process with two bases") {
    const models::TransformerConfig two_bases = tiny_two_bases(1e6, 1e4);
    check_equivalent(two_bases, make_layout(1, 2, 1));
    check_equivalent(two_bases, make_layout(2, 1, 1));
    // ZeRO-3 drops the blocks' bindings after each use and binds them again when it gathers.
    planner::Layout zero3 = make_layout(1, 1, 2);
    zero3.zero = 3;
    check_equivalent(two_bases, zero3);
  }
  TEST_CASE("rope_local_theta turns the sliding layers, rope_theta the others") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    // Every layer sliding (tiny-window-8): the local base is every layer's, bit for bit the
    // model whose one base it is.
    models::TransformerConfig all_sliding = tiny_window();
    all_sliding.name = "tiny-window-8-local-500000";
    all_sliding.rope_local_theta = 500000.0;
    models::TransformerConfig one_base = tiny_window();
    one_base.name = "tiny-window-8-rope-500000";
    one_base.rope_theta = 500000.0;
    const RunResult& local_everywhere = reference(all_sliding, 2, 0.0);
    const RunResult& global_everywhere = reference(one_base, 2, 0.0);
    const RunResult& window_plain = reference(tiny_window(), 2, 0.0);
    // On the pattern: two bases differ from either base alone, and from the swapped pair.
    const RunResult& two = reference(tiny_two_bases(1e6, 1e4), 2, 0.0);
    const RunResult& swapped = reference(tiny_two_bases(1e4, 1e6), 2, 0.0);
    const RunResult& only_global = reference(tiny_two_bases(1e6, 1e6), 2, 0.0);
    const RunResult& only_local = reference(tiny_two_bases(1e4, 1e4), 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(local_everywhere.losses[step] == global_everywhere.losses[step]);
      CHECK(local_everywhere.losses[step] != window_plain.losses[step]);
      CHECK(two.losses[step] != swapped.losses[step]);
      CHECK(two.losses[step] != only_global.losses[step]);
      CHECK(two.losses[step] != only_local.losses[step]);
    }
  }
}

// Llama 3.1's frequency bands (models.h RopeScaling) shrunk to tiny's 32 positions: an original
// context of 64 keeps pair 0 of each 16-channel head (wavelength 2 pi < 64 / 4), blends pair 1
// (wavelength 2 pi sqrt(10) = 19.9) and divides the other six by 4, so every position turns the
// heads differently from the unscaled model. tiny-mla's 8 rotary channels likewise.
models::TransformerConfig with_tiny_llama3_bands(const models::TransformerConfig& base) {
  models::TransformerConfig m = base;
  m.name = base.name + "-llama3-bands-4";
  m.rope_scaling = {models::RopeScalingType::kLlama3, 4.0, 1.0, 4.0, 64};
  return m;
}
// Gemma 3's linear factor 8 on the global layers of tiny_two_bases.
models::TransformerConfig with_linear_8(const models::TransformerConfig& base) {
  models::TransformerConfig m = base;
  m.name = base.name + "-linear-8";
  m.rope_scaling = {models::RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
  return m;
}

// YaRN over an original context of 64, factor 4: tiny's 16-channel heads ramp from pair 0 (kept)
// to pair 3 (16 ln(64 / 2 pi) / (2 ln 10000) = 2.02, ceiled) and divide pairs 3-7 by 4; cos and
// sin carry 0.1 ln 4 + 1. On tiny-mla, mscale_all_dim 0.5 makes the amplitude
// (0.1 ln 4 + 1) / (0.05 ln 4 + 1) and multiplies the latent attention's softmax scale by
// (0.05 ln 4 + 1)^2.
models::TransformerConfig with_tiny_yarn(const models::TransformerConfig& base) {
  models::TransformerConfig m = base;
  m.name = base.name + "-yarn-4";
  m.rope_scaling.type = models::RopeScalingType::kYarn;
  m.rope_scaling.factor = 4.0;
  m.rope_scaling.original_max_positions = 64;
  if (m.is_mla()) {
    m.rope_scaling.mscale_all_dim = 0.5;
  }
  return m;
}

TEST_SUITE("mpi2") {
  TEST_CASE("YaRN: tp2, pp2 and cp2 equal one process, MLA's softmax scale included") {
    const models::TransformerConfig yarn = with_tiny_yarn(tiny());
    check_equivalent(yarn, make_layout(1, 2, 1));
    check_equivalent(yarn, make_layout(2, 1, 1));
    check_equivalent(yarn, with_cp(make_layout(1, 1, 1), 2));
    // The ring attention of cp2 takes MLA's YaRN softmax scale as the one-process kernel does.
    const models::TransformerConfig mla_yarn = with_tiny_yarn(models::load_model("tiny-mla"));
    check_equivalent(mla_yarn, make_layout(1, 2, 1));
    check_equivalent(mla_yarn, with_cp(make_layout(1, 1, 1), 2));
  }
  TEST_CASE("YaRN changes the loss, and MLA's mscale_all_dim changes it further") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& yarn = reference(with_tiny_yarn(tiny()), 2, 0.0);
    const RunResult& plain = reference(tiny(), 2, 0.0);
    const models::TransformerConfig mla = models::load_model("tiny-mla");
    const RunResult& mla_yarn = reference(with_tiny_yarn(mla), 2, 0.0);
    const RunResult& mla_plain = reference(mla, 2, 0.0);
    // mscale = mscale_all_dim: amplitude 1 both ways, so only the softmax scale differs, x1 at 0
    // and x(0.05 ln 4 + 1)^2 at 0.5.
    const auto with_mscales = [&](double mscale) {
      models::TransformerConfig m = with_tiny_yarn(mla);
      m.name += fmt::format("-mscales-{:g}", mscale);
      m.rope_scaling.mscale = mscale;
      m.rope_scaling.mscale_all_dim = mscale;
      return m;
    };
    const RunResult& softmax_scaled = reference(with_mscales(0.5), 2, 0.0);
    const RunResult& softmax_plain = reference(with_mscales(0.0), 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(yarn.losses[step] / plain.losses[step] - 1) > 1e-6);
      CHECK(mla_yarn.losses[step] != mla_plain.losses[step]);
      // tiny-mla's initial scores are small, so the scale moves the loss little (1e-7 at step 1)
      // but not nothing: the same model without it gives the same loss bit for bit.
      CHECK(softmax_scaled.losses[step] != softmax_plain.losses[step]);
    }
  }
  TEST_CASE("rope_scaling: pp2, tp2 and cp2 equal one process with scaled frequencies") {
    const models::TransformerConfig banded = with_tiny_llama3_bands(tiny());
    check_equivalent(banded, make_layout(1, 2, 1));
    check_equivalent(banded, make_layout(2, 1, 1));
    // cp2's rows sit at two chunks' positions: the scaled angle must follow the position.
    check_equivalent(banded, with_cp(make_layout(1, 1, 1), 2));
    // Gemma 3's layout: layer 2 (global, on stage 1) scaled, the sliding ones not.
    check_equivalent(with_linear_8(tiny_two_bases(1e6, 1e4)), make_layout(1, 2, 1));
  }
  TEST_CASE("rope_scaling is applied on the layers that turn by rope_theta only") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    const RunResult& banded = reference(with_tiny_llama3_bands(tiny()), 2, 0.0);
    const RunResult& plain = reference(tiny(), 2, 0.0);
    const models::TransformerConfig mla = models::load_model("tiny-mla");
    const RunResult& mla_banded = reference(with_tiny_llama3_bands(mla), 2, 0.0);
    const RunResult& mla_plain = reference(mla, 2, 0.0);
    // Every layer sliding with a local base: the scaling applies to no layer, bit for bit.
    models::TransformerConfig all_sliding = tiny_window();
    all_sliding.name = "tiny-window-8-local-500000";
    all_sliding.rope_local_theta = 500000.0;
    const RunResult& sliding_scaled = reference(with_linear_8(all_sliding), 2, 0.0);
    const RunResult& sliding_plain = reference(all_sliding, 2, 0.0);
    // Gemma 3's layout: the global layer's scaling changes the loss.
    const RunResult& two_scaled = reference(with_linear_8(tiny_two_bases(1e6, 1e4)), 2, 0.0);
    const RunResult& two_plain = reference(tiny_two_bases(1e6, 1e4), 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(banded.losses[step] / plain.losses[step] - 1) > 1e-6);
      CHECK(mla_banded.losses[step] != mla_plain.losses[step]);
      CHECK(sliding_scaled.losses[step] == sliding_plain.losses[step]);
      CHECK(two_scaled.losses[step] != two_plain.losses[step]);
    }
  }
}

// tiny as Llama 4 builds its attention: layers 1 and 3 NoPE (no_rope_freq 2: one per stage at
// pp2), the gainless q/k L2 norm on the rotary layers 0 and 2, and chunks of the whole sequence
// (32 tokens, where chunked attention is full causal attention).
const models::TransformerConfig& tiny_llama4_attention() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny");
    m.name = "tiny-llama4-attention";
    m.no_rope_freq = {0, 1, 0, 1};
    m.qk_l2_norm = true;
    m.attention_chunk_size = m.seq_length;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("Llama 4's NoPE layers and q/k L2 norm: tp2, cp2, pp2 equal one process") {
    check_equivalent(tiny_llama4_attention(), make_layout(2, 1, 1));
    check_equivalent(tiny_llama4_attention(), with_cp(make_layout(1, 1, 1), 2));
    check_equivalent(tiny_llama4_attention(), make_layout(1, 2, 1));
  }
  TEST_CASE("NoPE layers and the L2 norm are applied: each changes the losses") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    models::TransformerConfig nope_only = tiny_llama4_attention();
    nope_only.name = "tiny-nope";
    nope_only.qk_l2_norm = false;
    models::TransformerConfig norm_only = tiny_llama4_attention();
    norm_only.name = "tiny-qk-l2-norm";
    norm_only.no_rope_freq.clear();
    const RunResult& full = reference(tiny(), 2, 0.0);
    const RunResult& nope = reference(nope_only, 2, 0.0);
    const RunResult& norm = reference(norm_only, 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(nope.losses[step] / full.losses[step] - 1) > 1e-6);
      CHECK(std::abs(norm.losses[step] / full.losses[step] - 1) > 1e-6);
    }
  }
}

// tiny-moe with Llama 4's router: top-1, the sigmoid of the chosen logit scaling the expert's
// input (router_probs_on_input), beside a shared expert of 96.
const models::TransformerConfig& tiny_llama4_moe() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny-moe");
    m.name = "tiny-llama4-moe";
    m.experts_per_token = 1;
    m.router_probs_on_input = true;
    m.num_shared_experts = 1;
    m.shared_expert_ffn_hidden_size = 96;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("Llama 4's router: ep2, ep2 with full recompute, pp2 equal one process") {
    check_equivalent(tiny_llama4_moe(), with_ep(make_layout(1, 1, 2), 2));
    check_equivalent(tiny_llama4_moe(), with_ep(make_layout(1, 1, 2), 2), moe_options());
    planner::Layout recompute = with_ep(make_layout(1, 1, 2), 2);
    recompute.recompute = Recompute::kFull;
    check_equivalent(tiny_llama4_moe(), recompute);
    check_equivalent(tiny_llama4_moe(), make_layout(1, 2, 1));
  }
  TEST_CASE("Llama 4's router is applied: its losses differ from a softmax top-1 router's") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    models::TransformerConfig softmax = tiny_llama4_moe();
    softmax.name = "tiny-llama4-moe-softmax";
    softmax.router_probs_on_input = false;  // top-1 softmax: each token's weight is 1
    const RunResult& sigmoid_run = reference(tiny_llama4_moe(), 2, 0.0);
    const RunResult& softmax_run = reference(softmax, 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(sigmoid_run.losses[step] / softmax_run.losses[step] - 1) > 1e-6);
    }
  }
}

// tiny as Gemma2ForCausalLM builds it: tiny-gemma plus the sandwich norms (no q/k norms), the
// attention scale 1/sqrt(4) instead of 1/sqrt(head_dim 16), and the two soft-caps. At
// initialisation (weights of std 0.02, normed rows ~1 per channel, h 64) a query or key channel
// is ~0.02 x sqrt(64) = 0.16, a score a sum of 16 products, ~sqrt(16) x 0.16^2 x 0.5 = 0.05, and a
// logit ~0.02 x sqrt(64) = 0.16: caps of 0.1 put x / c at ~0.5 and ~1.6 (Gemma 2's 50 and 30
// would leave tanh the identity at these scales), so the equivalence covers the caps' backward
// and the loss check below sees them.
const models::TransformerConfig& tiny_gemma2() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = tiny_gemma();
    m.name = "tiny-gemma2";
    m.sandwich_norm = true;
    m.query_pre_attn_scalar = 4.0;
    m.attn_logit_softcapping = 0.1;
    m.final_logit_softcapping = 0.1;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE(
      "Gemma 2 (soft-caps, query_pre_attn_scalar, sandwich norms): tp2, tp2 sp, pp2, dp2 equal "
      "one process") {
    // tp2: each rank caps its vocabulary shard of the logits and its heads' scores.
    check_equivalent(tiny_gemma2(), make_layout(2, 1, 1));
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    check_equivalent(tiny_gemma2(), sp);
    check_equivalent(tiny_gemma2(), make_layout(1, 2, 1));  // the tied table on both stages
    check_equivalent(tiny_gemma2(), make_layout(1, 1, 2));
  }
  TEST_CASE("Gemma 2's caps and scale are applied: losses differ from the model without each") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    // Same weights and data; fp32 summation order moves a loss by ~1e-7 relative.
    const RunResult& gemma2 = reference(tiny_gemma2(), 2, 0.0);
    models::TransformerConfig no_attn_cap = tiny_gemma2();
    no_attn_cap.name = "tiny-gemma2-no-attn-cap";
    no_attn_cap.attn_logit_softcapping = 0.0;
    models::TransformerConfig no_final_cap = tiny_gemma2();
    no_final_cap.name = "tiny-gemma2-no-final-cap";
    no_final_cap.final_logit_softcapping = 0.0;
    models::TransformerConfig head_dim_scale = tiny_gemma2();
    head_dim_scale.name = "tiny-gemma2-head-dim-scale";
    head_dim_scale.query_pre_attn_scalar = 0.0;
    const RunResult& without_attn_cap = reference(no_attn_cap, 2, 0.0);
    const RunResult& without_final_cap = reference(no_final_cap, 2, 0.0);
    const RunResult& with_head_dim_scale = reference(head_dim_scale, 2, 0.0);
    for (int step = 0; step < kSteps; step++) {
      CAPTURE(step + 1);
      CHECK(std::abs(gemma2.losses[step] / without_attn_cap.losses[step] - 1) > 1e-6);
      CHECK(std::abs(gemma2.losses[step] / without_final_cap.losses[step] - 1) > 1e-6);
      CHECK(std::abs(gemma2.losses[step] / with_head_dim_scale.losses[step] - 1) > 1e-6);
    }
  }
}

// gpt-oss's parts (GptOssForCausalLM) on tiny: quick GeGLU with the offset 1 on up and a clamp,
// one learned sink logit per head, attention biases, a window of 8 on every other layer (layers
// 0 and 2, as gpt-oss's sliding_attention on even layers). At initialisation fc1's outputs are
// ~0.02 x sqrt(64) = 0.16 per channel: a clamp of 0.4 (gpt-oss's 7.0 would never bind at these
// scales) binds on 1.2% of the up entries and 0.6% of the gates over the single-process run of
// the dense model, so the equivalence covers the clamps' zero gradients and the loss checks
// below see them. The clamp's gradient jumps at its bound, so fp32 summation order can move an
// entry across it, as it can move a token across a routing boundary: with 0.2 and 0.25 (21% and
// 12% of the up entries clamped) tp2 sp clamped 1 and 2 more of the run's 1.8 million up
// entries than one process and its fc1 weights came 2.6e-5 and 5.6e-5 apart, past the 1e-5
// bound; with 0.4 tp2 sp clamps exactly the entries one process clamps.
models::TransformerConfig with_gpt_oss_parts(models::TransformerConfig m, const std::string& name) {
  m.name = name;
  m.activation = models::Activation::kQuickGeglu;
  m.glu_linear_offset = 1.0;
  m.activation_clamp_value = 0.4;
  m.attention_sinks = true;
  m.qkv_bias = true;
  m.attention_output_bias = true;
  m.sliding_window = 8;
  m.window_attn_skip_freq = 2;
  return m;
}

const models::TransformerConfig& tiny_oss_dense() {
  static const models::TransformerConfig model =
      with_gpt_oss_parts(models::load_model("tiny"), "tiny-oss-dense");
  return model;
}

// tiny-moe (layer 0 dense, layers 1-3 of 4 experts, top-2) as GptOssForCausalLM's MoE: the
// router's bias and each expert's fc1 and fc2 biases besides the parts above (mlp_bias also
// biases the dense layer 0's MLP).
const models::TransformerConfig& tiny_oss_moe() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m =
        with_gpt_oss_parts(models::load_model("tiny-moe"), "tiny-oss-moe");
    m.router_bias = true;
    m.mlp_bias = true;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE(
      "gpt-oss dense parts (sinks, quick GeGLU, offset, clamp): tp2, tp2 sp, pp2, dp2 ZeRO-1") {
    // tp2: each rank holds its 2 heads' sinks, whose gradients need no reduction.
    check_equivalent(tiny_oss_dense(), make_layout(2, 1, 1));
    planner::Layout sp = make_layout(2, 1, 1);
    sp.sequence_parallel = true;
    sp.recompute = Recompute::kSelective;  // the probabilities rebuilt in B, sinks included
    check_equivalent(tiny_oss_dense(), sp);
    check_equivalent(tiny_oss_dense(), make_layout(1, 2, 1));
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_equivalent(tiny_oss_dense(), zero1);
  }
  TEST_CASE("gpt-oss MoE (router and expert biases, sinks, quick GeGLU): ep2, pp2, dp2 equal one") {
    check_equivalent(tiny_oss_moe(), with_ep(make_layout(1, 1, 2), 2), moe_options());
    check_equivalent(tiny_oss_moe(), make_layout(1, 2, 1), moe_options());
    check_equivalent(tiny_oss_moe(), make_layout(1, 1, 2), moe_options());
  }
  TEST_CASE("gpt-oss's parts are applied: losses differ from the models without each") {
    if (world_rank_of(MPI_COMM_WORLD) != 0) {
      return;
    }
    // Same weights and data; fp32 summation order moves a loss by ~1e-7 relative. The biases
    // start at 0, so they change the losses from step 2 on; the other parts from step 1.
    // Measured: 7.6e-6 (the router's bias at step 3) to 6.5e-3 (the offset), the clamp 1.7e-5
    // at step 1.
    const auto without = [](const models::TransformerConfig& base, const std::string& part,
                            auto&& change) {
      models::TransformerConfig m = base;
      m.name = base.name + "-without-" + part;
      change(m);
      return m;
    };
    const auto check_differs = [](const RunResult& with_part, const RunResult& without_part,
                                  int first_step) {
      for (int step = first_step; step < kSteps; step++) {
        CAPTURE(step + 1);
        CHECK(std::abs(with_part.losses[step] / without_part.losses[step] - 1) > 1e-6);
      }
    };
    const RunResult& dense = reference(tiny_oss_dense(), 2, 0.0);
    const models::TransformerConfig& d = tiny_oss_dense();
    check_differs(
        dense, reference(without(d, "sinks", [](auto& m) { m.attention_sinks = false; }), 2, 0.0),
        0);
    check_differs(
        dense,
        reference(without(d, "clamp", [](auto& m) { m.activation_clamp_value = 0; }), 2, 0.0), 0);
    check_differs(dense,
                  reference(without(d, "offset", [](auto& m) { m.glu_linear_offset = 0; }), 2, 0.0),
                  0);
    check_differs(dense,
                  reference(without(d, "quick-geglu",
                                    [](auto& m) { m.activation = models::Activation::kSwiglu; }),
                            2, 0.0),
                  0);
    const RunResult& moe = reference(tiny_oss_moe(), 2, 0.02);
    const models::TransformerConfig& e = tiny_oss_moe();
    check_differs(
        moe, reference(without(e, "sinks", [](auto& m) { m.attention_sinks = false; }), 2, 0.02),
        0);
    check_differs(
        moe, reference(without(e, "router-bias", [](auto& m) { m.router_bias = false; }), 2, 0.02),
        1);
    check_differs(
        moe, reference(without(e, "mlp-bias", [](auto& m) { m.mlp_bias = false; }), 2, 0.02), 1);
    check_differs(
        moe, reference(without(e, "clamp", [](auto& m) { m.activation_clamp_value = 0; }), 2, 0.02),
        0);
  }
}

TEST_SUITE("mpi8") {
  TEST_CASE("cp2 x ep2 x pp2 (ep over the cp ranks) equals one process") {
    check_equivalent(tiny_moe(), with_ep(with_cp(make_layout(1, 2, 2), 2), 2), moe_options());
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("cp2 x tp2 equals one process") {
    check_equivalent(tiny(), with_cp(make_layout(2, 1, 1), 2));
  }
  TEST_CASE("cp2 x dp2 with ZeRO-2 equals one process") {
    planner::Layout layout = with_cp(make_layout(1, 1, 2), 2);
    layout.zero = 2;
    check_equivalent(tiny(), layout);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("tp2 x pp2 interleaved with sequence parallel equals one process") {
    planner::Layout layout = with(make_layout(2, 2, 1), ScheduleKind::kInterleaved, 2);
    layout.sequence_parallel = true;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("GPT-2 style, pp2 zb-h1 x dp2 with ZeRO-1 equals one process") {
    planner::Layout layout = with(make_layout(1, 2, 2), ScheduleKind::kZbH1);
    layout.zero = 1;
    check_equivalent(tiny_gpt2(), layout);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("pp2 interleaved x dp2 with ZeRO-1 equals one process") {
    planner::Layout layout = with(make_layout(1, 2, 2), ScheduleKind::kInterleaved, 2);
    layout.zero = 1;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE(
      "GPT-2 style, pp2 zb-h1 x dp2 with ZeRO-2 (tied embedding deferred) equals one process") {
    planner::Layout layout = with(make_layout(1, 2, 2), ScheduleKind::kZbH1);
    layout.zero = 2;
    check_equivalent(tiny_gpt2(), layout);
  }
  TEST_CASE("GPT-2 style, pp2 zb-h1 x dp2 with ZeRO-3 equals one process") {
    planner::Layout layout = with(make_layout(1, 2, 2), ScheduleKind::kZbH1);
    layout.zero = 3;
    check_equivalent(tiny_gpt2(), layout);
  }
  TEST_CASE("pp2 interleaved x dp2 with ZeRO-2 (a bucket spans both chunks) equals one process") {
    planner::Layout layout = with(make_layout(1, 2, 2), ScheduleKind::kInterleaved, 2);
    layout.zero = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 x pp2 with pipeline scatter/gather equals one process") {
    planner::PlanOptions options;
    options.scatter_gather_pipeline = true;
    check_equivalent(tiny(), make_layout(2, 2, 1), options);
  }
  TEST_CASE("pp2 x dp2 with a 1/3 layer split and ZeRO-3 (per-layer gathers) equals one process") {
    planner::Layout layout = split(make_layout(1, 2, 2), {1, 3});
    layout.zero = 3;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("pp4 with a 1/2/2/1 layer split (6 layers) equals one process") {
    check_equivalent(tiny_six_layers(), split(make_layout(1, 4, 1), {1, 2, 2, 1}));
  }
  TEST_CASE("pp2 x dp2 with placement tp-pp-dp equals one process") {
    planner::Layout layout = make_layout(1, 2, 2);
    layout.placement = planner::Placement::kTpPpDp;
    check_equivalent(tiny(), layout);
  }
}

TEST_SUITE("mpi8") {
  TEST_CASE("tp2 x pp2 x dp2 equals one process") {
    check_equivalent(tiny(), make_layout(2, 2, 2));
  }
  // The layout `meshplan plan --model tiny --cluster local-cpu --gpus 8 --tp 2 --pp 2` picks.
  TEST_CASE("tp2 x pp2 x dp2, zb-h1, sequence parallel, ZeRO-2 equals one process") {
    planner::Layout layout = with(make_layout(2, 2, 2), ScheduleKind::kZbH1);
    layout.sequence_parallel = true;
    layout.zero = 2;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 x pp2 x dp2, zb-h1, sequence parallel, ZeRO-3 equals one process") {
    planner::Layout layout = with(make_layout(2, 2, 2), ScheduleKind::kZbH1);
    layout.sequence_parallel = true;
    layout.zero = 3;
    check_equivalent(tiny(), layout);
  }
  TEST_CASE("tp2 x pp2 x dp2, 1f1b, ZeRO-2 equals one process") {
    planner::Layout layout = with(make_layout(2, 2, 2), ScheduleKind::kOneFOneB);
    layout.zero = 2;
    check_equivalent(tiny(), layout);
  }
}

// tiny-gpt2 as GPT-NeoX's parallel block (gpt_j_residual): both branches read the layer input
// and share one tp reduction.
const models::TransformerConfig& tiny_parallel_block() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = tiny_gpt2();
    m.name = "tiny-parallel";
    m.parallel_residual = true;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi2") {
  TEST_CASE("parallel block: tp2, tp2 with sequence parallel, pp2 zb-h1 equal one process") {
    check_equivalent(tiny_parallel_block(), make_layout(2, 1, 1));
    planner::Layout layout = make_layout(2, 1, 1);
    layout.sequence_parallel = true;
    layout.recompute = Recompute::kFull;
    check_equivalent(tiny_parallel_block(), layout);
    check_equivalent(tiny_parallel_block(), with(make_layout(1, 2, 1), ScheduleKind::kZbH1));
  }
}

// tiny-mla: tiny with DeepSeek-V3's multi-head latent attention (q_lora_rank 32, kv_lora_rank
// 16, qk_nope 16, qk_rope 8, v_head 16). Its duplicated down projections and latent norms are
// reduced over tp under sequence parallelism; without it the latents' and the shared rotary
// key's input gradients are (mla_attention.h).
const models::TransformerConfig& tiny_mla() {
  static const models::TransformerConfig model = models::load_model("tiny-mla");
  return model;
}

planner::Layout sequence_parallel(planner::Layout layout) {
  layout.sequence_parallel = true;
  return layout;
}

TEST_SUITE("mpi2") {
  TEST_CASE("tiny-mla: dp2, and dp2 with ZeRO-1 and ZeRO-3, equal one process") {
    check_equivalent(tiny_mla(), make_layout(1, 1, 2));
    for (const int64_t zero : {1, 3}) {
      planner::Layout sharded = make_layout(1, 1, 2);
      sharded.zero = zero;
      check_equivalent(tiny_mla(), sharded);
    }
  }
  TEST_CASE("tiny-mla: pp2 1f1b, and zb-h1 with a 3/1 layer split, equal one process") {
    check_equivalent(tiny_mla(), make_layout(1, 2, 1));
    check_equivalent(tiny_mla(), split(with(make_layout(1, 2, 1), ScheduleKind::kZbH1), {3, 1}));
  }
  TEST_CASE("tiny-mla: tp2 (heads split, down projections duplicated) equals one process") {
    check_equivalent(tiny_mla(), make_layout(2, 1, 1));
  }
  TEST_CASE(
      "tiny-mla: tp2 with sequence parallel, and with selective recompute, equals one "
      "process") {
    check_equivalent(tiny_mla(), sequence_parallel(make_layout(2, 1, 1)));
    planner::Layout selective = sequence_parallel(make_layout(2, 1, 1));
    selective.recompute = Recompute::kSelective;
    check_equivalent(tiny_mla(), selective);
  }
  TEST_CASE("tiny-mla: tp2 with sequence parallel and block recompute of 1 of 4 equals one") {
    planner::Layout block = sequence_parallel(make_layout(2, 1, 1));
    block.recompute = Recompute::kFull;
    block.recompute_layers = 1;
    check_equivalent(tiny_mla(), block);
  }
}

// Megatron-Core's --recompute-modules (transformer_layer.h drop_module_activations): what a
// module drops after the forward is rebuilt before B, bit for bit.
using testing::with_modules;

TEST_SUITE("mpi2") {
  TEST_CASE("recompute modules: tiny tp2 sp with core_attn,mlp, pp2 zb-h1 with mlp, equal one") {
    check_equivalent(tiny(), with_modules(sequence_parallel(make_layout(2, 1, 1)),
                                          planner::kRecomputeCoreAttn | planner::kRecomputeMlp));
    // mlp alone keeps the probabilities (no flash attention), and W runs after the rebuilt MLP.
    planner::PlanOptions unfused;
    unfused.flash_attention = false;
    check_equivalent(
        tiny(),
        with_modules(with(make_layout(1, 2, 1), ScheduleKind::kZbH1), planner::kRecomputeMlp),
        unfused);
  }
  TEST_CASE("recompute modules: tiny-moe ep2 with core_attn,moe_act,layernorm equals one") {
    check_equivalent(tiny_moe(),
                     with_modules(with_ep(make_layout(1, 1, 2), 2),
                                  planner::kRecomputeCoreAttn | planner::kRecomputeMoeAct |
                                      planner::kRecomputeLayernorm),
                     moe_options());
  }
  TEST_CASE("recompute modules: tiny-moe ep2 with moe (the whole MoE block) equals one") {
    check_equivalent(tiny_moe(),
                     with_modules(with_ep(make_layout(1, 1, 2), 2), planner::kRecomputeMoe),
                     moe_options());
    check_equivalent(tiny_moe_shared(),
                     with_modules(with_ep(make_layout(1, 1, 2), 2),
                                  planner::kRecomputeCoreAttn | planner::kRecomputeMoe |
                                      planner::kRecomputeLayernorm),
                     moe_options());
    // Beside moe, moe_act and shared_experts rebuild inside the rebuilt block once more.
    check_equivalent(tiny_moe_shared(),
                     with_modules(with_ep(make_layout(1, 1, 2), 2),
                                  planner::kRecomputeMoe | planner::kRecomputeMoeAct |
                                      planner::kRecomputeSharedExperts),
                     moe_options());
  }
  TEST_CASE(
      "recompute modules: tiny-moe with a shared expert, ep2 with shared_experts equals one") {
    check_equivalent(tiny_moe_shared(),
                     with_modules(with_ep(make_layout(1, 1, 2), 2),
                                  planner::kRecomputeSharedExperts | planner::kRecomputeLayernorm),
                     moe_options());
  }
  TEST_CASE("recompute modules: tiny-mla tp2 sp with every module, and without a query latent") {
    const uint32_t all = planner::kRecomputeCoreAttn | planner::kRecomputeLayernorm |
                         planner::kRecomputeMlaUpProj | planner::kRecomputeMlp;
    check_equivalent(tiny_mla(), with_modules(sequence_parallel(make_layout(2, 1, 1)), all));
    models::TransformerConfig uncompressed = tiny_mla();  // W_Q reads the hidden state
    uncompressed.name = "tiny-mla-no-query-latent";
    uncompressed.q_lora_rank = 0;
    check_equivalent(uncompressed,
                     with_modules(make_layout(2, 1, 1),
                                  planner::kRecomputeMlaUpProj | planner::kRecomputeLayernorm));
  }
}

// DeepSeek-V3's block shape in small: tiny-mla's attention with tiny-moe's MLPs (layer 0
// dense, then 4 experts of 96, top-2).
const models::TransformerConfig& tiny_mla_moe() {
  static const models::TransformerConfig model = [] {
    models::TransformerConfig m = models::load_model("tiny-mla");
    const models::TransformerConfig moe = models::load_model("tiny-moe");
    m.name = "tiny-mla-moe";
    m.num_experts = moe.num_experts;
    m.experts_per_token = moe.experts_per_token;
    m.expert_ffn_hidden_size = moe.expert_ffn_hidden_size;
    m.first_dense_layers = moe.first_dense_layers;
    return m;
  }();
  return model;
}

TEST_SUITE("mpi4") {
  TEST_CASE("tiny-mla with experts: ep2 x pp2 with the load-balancing loss equals one process") {
    check_equivalent(tiny_mla_moe(), with_ep(make_layout(1, 2, 2), 2), moe_options());
  }
  TEST_CASE("tiny-mla with experts: ep2 x pp2 with moe_act, layernorm, mla_up_proj equals one") {
    planner::Layout layout = with_ep(make_layout(1, 2, 2), 2);
    layout.recompute = Recompute::kSelective;
    layout.recompute_modules = planner::kRecomputeCoreAttn | planner::kRecomputeMoeAct |
                               planner::kRecomputeLayernorm | planner::kRecomputeMlaUpProj;
    check_equivalent(tiny_mla_moe(), layout, moe_options());
  }
  TEST_CASE(
      "tiny-mla: tp2 x pp2 interleaved with sequence parallel, full recompute, equals one "
      "process") {
    planner::Layout layout =
        sequence_parallel(with(make_layout(2, 2, 1), ScheduleKind::kInterleaved, 2));
    layout.recompute = Recompute::kFull;
    check_equivalent(tiny_mla(), layout);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("tiny-mla: cp2 (ring attention, value heads sent unpadded) equals one process") {
    check_equivalent(tiny_mla(), with_cp(make_layout(1, 1, 1), 2));
    planner::Layout selective = with_cp(make_layout(1, 1, 1), 2);
    selective.recompute = Recompute::kSelective;
    check_equivalent(tiny_mla(), selective);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("tiny-mla: cp2 x tp2 with sequence parallel equals one process") {
    check_equivalent(tiny_mla(), sequence_parallel(with_cp(make_layout(2, 1, 1), 2)));
  }
}

TEST_SUITE("mpi8") {
  TEST_CASE("tiny-mla with experts: cp2 x ep2 x pp2 equals one process") {
    check_equivalent(tiny_mla_moe(), with_ep(with_cp(make_layout(1, 2, 2), 2), 2), moe_options());
  }
  TEST_CASE("tiny-mla: tp2 x pp2 x dp2, zb-h1, sequence parallel, ZeRO-2 equals one process") {
    planner::Layout layout = sequence_parallel(with(make_layout(2, 2, 2), ScheduleKind::kZbH1));
    layout.zero = 2;
    check_equivalent(tiny_mla(), layout);
  }
}

}  // namespace
}  // namespace meshplan::executor
