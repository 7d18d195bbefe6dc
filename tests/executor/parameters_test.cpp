#include "parameters.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "meshplan/cost_model.h"
#include "tiny_plan.h"

namespace meshplan::executor {
namespace {

using testing::make_layout;
using testing::make_plan;

// make_plan's vocabulary divisor, 1: padded to a multiple of tp only (framework meshplan's).
planner::PlanOptions executor_options() {
  planner::PlanOptions options;
  options.framework = planner::Framework::kMeshplan;
  return options;
}
const planner::PlanOptions kExecutorOptions = executor_options();
using testing::small_gpt2_model;

int64_t allocated(const planner::Plan& plan, int stage, int tp_rank) {
  std::vector<int> chunk_of;
  int64_t total = 0;
  for (const ParameterSpec& spec :
       stage_parameter_specs(make_shard_dims(plan, tp_rank), plan, stage, &chunk_of)) {
    total += spec.size;
  }
  return total;
}

TEST_CASE("each stage allocates planner::stage_parameter_count parameters") {
  const models::TransformerConfig tiny = models::load_model("tiny");
  models::TransformerConfig tied_gpt = small_gpt2_model();
  tied_gpt.num_layers = 4;
  models::TransformerConfig sinks = tiny;  // gpt-oss's sinks: a / tp per layer, with the heads
  sinks.name = "tiny-sinks";
  sinks.attention_sinks = true;
  models::TransformerConfig odd_vocab = tied_gpt;  // padded at every tp and divisor below
  odd_vocab.name = "small-gpt2-vocab-27";
  odd_vocab.vocab_size = 27;
  for (const auto& model : {tiny, tied_gpt, sinks, odd_vocab}) {
    for (int64_t tp : {1, 2}) {
      for (int64_t pp : {1, 2, 4}) {
        for (int64_t vpp : {1, 2}) {
          if (pp * vpp > model.num_layers || (vpp > 1 && pp < 2)) {
            continue;
          }
          planner::Layout layout = make_layout(tp, pp, 1);
          layout.vpp = vpp;
          // Divisor 1 (meshplan's) and Megatron-LM's 128: the padded rows are allocated.
          for (int64_t divisor : {1, 128}) {
            planner::Plan plan = make_plan(model, layout);
            plan.options.make_vocab_size_divisible_by = divisor;
            for (int stage = 0; stage < pp; stage++) {
              CAPTURE(model.name);
              CAPTURE(planner::describe(layout));
              CAPTURE(divisor);
              CAPTURE(stage);
              // The planner's count is independent of ours (planner/parameters.cpp).
              CHECK(allocated(plan, stage, 0) ==
                    planner::stage_parameter_count(model, layout, stage, plan.options));
              CHECK(allocated(plan, stage, static_cast<int>(tp) - 1) ==
                    planner::stage_parameter_count(model, layout, stage, plan.options));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("tiny-moe: each stage and ep rank allocates planner::stage_parameter_count") {
  const models::TransformerConfig tiny_moe = models::load_model("tiny-moe");
  // gpt-oss's MoE parts: the router's bias (replicated) and each expert's biases (its own).
  models::TransformerConfig oss = tiny_moe;
  oss.name = "tiny-oss-moe";
  oss.activation = models::Activation::kQuickGeglu;
  oss.attention_sinks = true;
  oss.router_bias = true;
  oss.mlp_bias = true;
  for (const auto& model : {tiny_moe, oss}) {
    CAPTURE(model.name);
    for (int64_t pp : {1, 2}) {
      for (int64_t ep : {1, 2, 4}) {
        planner::Layout layout = make_layout(1, pp, 4);
        layout.ep = ep;
        const planner::Plan plan = make_plan(model, layout);
        for (int stage = 0; stage < pp; stage++) {
          CAPTURE(planner::describe(layout));
          CAPTURE(stage);
          int64_t expert_elements = 0;  // over the ep ranks: every expert exactly once
          for (int ep_rank = 0; ep_rank < ep; ep_rank++) {
            std::vector<int> chunk_of;
            int64_t total = 0;
            for (const ParameterSpec& spec : stage_parameter_specs(
                     make_shard_dims(plan, 0, 0, ep_rank), plan, stage, &chunk_of)) {
              total += spec.size;
              expert_elements += spec.expert ? spec.size : 0;
            }
            CHECK(total == planner::stage_parameter_count(model, layout, stage, kExecutorOptions));
          }
          CHECK(expert_elements ==
                ep * planner::stage_expert_parameter_count(model, layout, stage, kExecutorOptions));
        }
      }
    }
  }
}

TEST_CASE("the single-rank tiny model has the preset's published parameter count") {
  // models::count_parameters counts the full model independently of the executor.
  const models::TransformerConfig tiny = models::load_model("tiny");
  CHECK(allocated(make_plan(tiny, make_layout(1, 1, 1)), 0, 0) ==
        models::count_parameters(tiny).total);
}

TEST_CASE(
    "tiny-mla: every tp rank and stage allocates the planner's count; the total is the "
    "closed form") {
  const models::TransformerConfig model = models::load_model("tiny-mla");
  // DeepSeek-V2 Sec. 2.1 / Megatron-Core MLASelfAttention, per layer, with h 64, a 4, r_q 32,
  // r_kv 16, d_n 16, d_r 8, d_v 16, f 176:
  //   ln1 h = 64; W_DQ h r_q = 2,048; q norm r_q = 32; W_UQ r_q a (d_n + d_r) = 3,072;
  //   W_DKV h (r_kv + d_r) = 1,536; kv norm r_kv = 16; W_UKV r_kv a (d_n + d_v) = 2,048;
  //   W_O a d_v h = 4,096; ln2 h = 64; SwiGLU MLP 3 h f = 33,792: 46,768 per layer.
  // 4 layers, embedding and LM head 256 x 64 each, final norm 64.
  const int64_t closed_form = 4 * 46'768 + 2 * 256 * 64 + 64;  // 219,904
  CHECK(models::count_parameters(model).total == closed_form);
  CHECK(allocated(make_plan(model, make_layout(1, 1, 1)), 0, 0) == closed_form);
  for (int64_t tp : {1, 2, 4}) {
    for (int64_t pp : {1, 2}) {
      const planner::Layout layout = make_layout(tp, pp, 1);
      const planner::Plan plan = make_plan(model, layout);
      int64_t across_ranks = 0;  // tp-sharded elements once, replicated ones once
      for (int stage = 0; stage < pp; stage++) {
        CAPTURE(planner::describe(layout));
        CAPTURE(stage);
        for (int r = 0; r < tp; r++) {
          CHECK(allocated(plan, stage, r) ==
                planner::stage_parameter_count(model, layout, stage, kExecutorOptions));
          std::vector<int> chunk_of;
          for (const ParameterSpec& spec :
               stage_parameter_specs(make_shard_dims(plan, r), plan, stage, &chunk_of)) {
            across_ranks += spec.tp_replicated && r > 0 ? 0 : spec.size;
          }
        }
      }
      CHECK(across_ranks == closed_form);
    }
  }
}

// The full tensors rebuilt from every tp rank's initialised shards, by name.
std::map<std::string, std::vector<float>> assembled_init(const planner::Plan& plan, int stage) {
  std::map<std::string, std::vector<float>> full;
  for (int r = 0; r < plan.layout.tp; r++) {
    std::vector<int> chunk_of;
    const auto specs = stage_parameter_specs(make_shard_dims(plan, r), plan, stage, &chunk_of);
    int64_t size = 0;
    for (const auto& spec : specs) {
      size += spec.size;
    }
    std::vector<float> flat(static_cast<size_t>(size));
    initialize_parameters(flat.data(), specs, kInitSeed);
    for (const auto& spec : specs) {
      std::vector<float>& tensor = full[spec.name];
      for (int64_t i = 0; i < spec.size; i++) {
        const auto index = static_cast<size_t>(spec.full_index(i));
        tensor.resize(std::max(tensor.size(), index + 1));
        tensor[index] = flat[static_cast<size_t>(spec.offset + i)];
      }
    }
  }
  return full;
}

TEST_CASE("tiny-mla: tp 2 shards put back together equal the single-rank weights") {
  const models::TransformerConfig model = models::load_model("tiny-mla");
  const auto reference = assembled_init(make_plan(model, make_layout(1, 1, 1)), 0);
  const auto rebuilt = assembled_init(make_plan(model, make_layout(2, 1, 1)), 0);
  CHECK(rebuilt.size() == reference.size());
  for (const auto& entry : reference) {
    const std::string& name = entry.first;
    CAPTURE(name);
    CHECK(rebuilt.at(name) == entry.second);
  }
}

TEST_CASE("initial weights do not depend on the layout") {
  // tp 2 x pp 2 shards, put back together, equal the single-rank model bit for bit.
  const models::TransformerConfig tiny = models::load_model("tiny");
  const auto reference = assembled_init(make_plan(tiny, make_layout(1, 1, 1)), 0);
  const planner::Plan sharded = make_plan(tiny, make_layout(2, 2, 1));
  std::map<std::string, std::vector<float>> rebuilt = assembled_init(sharded, 0);
  for (auto& [name, tensor] : assembled_init(sharded, 1)) {
    rebuilt[name] = tensor;
  }
  CHECK(rebuilt.size() == reference.size());
  for (const auto& entry : reference) {
    const std::string& name = entry.first;  // not a binding: CAPTURE takes it
    CAPTURE(name);
    CHECK(rebuilt.at(name) == entry.second);
  }
}

TEST_CASE("full_index places qkv shards as [query | key | value] heads of the full tensor") {
  // tiny: a = 4 heads, g = 2 kv heads, d = 16, h = 64; tp = 2, rank 1 holds query heads 2-3
  // (full rows 32..63), key head 1 (rows 64 + 16 = 80..95) and value head 1 (rows 112..127).
  const planner::Plan plan = make_plan(models::load_model("tiny"), make_layout(2, 1, 1));
  std::vector<int> chunk_of;
  const auto specs = stage_parameter_specs(make_shard_dims(plan, 1), plan, 0, &chunk_of);
  const auto qkv = std::find_if(specs.begin(), specs.end(),
                                [](const auto& s) { return s.name == "layers.0.qkv.weight"; });
  REQUIRE(qkv != specs.end());
  const int64_t h = 64;
  CHECK(qkv->full_index(0) == 32 * h);                // local row 0 -> full row 32
  CHECK(qkv->full_index(32 * h) == 80 * h);           // local row 32 (first key row) -> 80
  CHECK(qkv->full_index(48 * h + 5) == 112 * h + 5);  // local row 48 (first value row) -> 112
}

TEST_CASE("each block is marked windowed by its global layer (window_attn_skip_freq)") {
  // N 3 on tiny's 4 layers: numbers 1, 2 and 4 windowed, 3 full. On pp 2 x vpp 2 the chunks
  // hold one layer each: stage 0 layers 0 and 2, stage 1 layers 1 and 3. The windowed (sliding)
  // blocks rotate with the local base, the full one with rope_theta (Gemma 3's two bases).
  models::TransformerConfig model = models::load_model("tiny");
  model.sliding_window = 8;
  model.window_attn_skip_freq = 3;
  model.rope_theta = 1e6;
  model.rope_local_theta = 10000.0;
  // Gemma 3's linear factor 8 scales the global layers only.
  const models::RopeScaling linear8{models::RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
  model.rope_scaling = linear8;
  const auto scaling_of = [&](bool sliding) { return sliding ? models::RopeScaling{} : linear8; };
  planner::Layout layout = make_layout(1, 2, 1);
  layout.vpp = 2;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  const planner::Plan plan = make_plan(model, layout);
  const std::map<int, std::vector<bool>> expected = {{0, {true, false}}, {1, {true, true}}};
  for (const auto& entry : expected) {
    // Not a structured binding: clang refuses one inside CAPTURE's lambda.
    const int stage = entry.first;
    const std::vector<bool>& windowed = entry.second;
    CAPTURE(stage);
    std::vector<int> chunk_of;
    const std::vector<ParameterSpec> specs =
        stage_parameter_specs(make_shard_dims(plan, 0), plan, stage, &chunk_of);
    for (size_t i = 0; i < specs.size(); i++) {
      if (specs[i].local_layer >= 0) {
        CAPTURE(specs[i].name);
        CHECK(specs[i].windowed_layer == windowed[static_cast<size_t>(chunk_of[i])]);
        CHECK(specs[i].rope_base == (windowed[static_cast<size_t>(chunk_of[i])] ? 1e4 : 1e6));
        CHECK(specs[i].rope_scaling == scaling_of(windowed[static_cast<size_t>(chunk_of[i])]));
      }
    }
    // bind_weights hands the mark to each chunk's block.
    std::vector<ChunkWeights> weights(2);
    for (ChunkWeights& w : weights) {
      w.layers.resize(1);
    }
    std::vector<float> flat(static_cast<size_t>(specs.back().offset + specs.back().size));
    bind_weights(&weights, flat.data(), specs, chunk_of);
    CHECK(weights[0].layers[0].windowed == windowed[0]);
    CHECK(weights[1].layers[0].windowed == windowed[1]);
    CHECK(weights[0].layers[0].rope_base == (windowed[0] ? 1e4 : 1e6));
    CHECK(weights[1].layers[0].rope_base == (windowed[1] ? 1e4 : 1e6));
    CHECK(weights[0].layers[0].rope_scaling == scaling_of(windowed[0]));
    CHECK(weights[1].layers[0].rope_scaling == scaling_of(windowed[1]));
  }
}

}  // namespace
}  // namespace meshplan::executor
