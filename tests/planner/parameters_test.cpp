// stage_parameter_count and padded_vocab_size (planner/parameters.cpp) against hand counts.
//
// Megatron-LM tensor parallelism (Shoeybi et al. 2019, Sec. 3) splits every weight matrix,
// the QKV bias and the first MLP bias over the tp ranks; norms, the row-parallel biases
// (attention output, second MLP projection) and the learned position table are whole on every
// rank. So summed over the tp ranks of one stage, a sharded tensor counts once and a replicated
// one tp times: sum_ranks = tp * per_rank - (tp - 1) * replicated. Summed over stages that is
// models::count_parameters, plus the padded vocabulary rows, plus the pipeline-tied LM head copy.

#include <doctest/doctest.h>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// The hand counts below are of the vocabulary as published, padded to a multiple of tp only
// (divisor 1); Megatron's divisor is checked on its own.
const PlanOptions kUnpadded = test::unpadded_vocab_options();

int64_t sum_over_stages(const models::TransformerConfig& model, const Layout& layout) {
  int64_t sum = 0;
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    sum += stage_parameter_count(model, layout, stage, kUnpadded);
  }
  return sum;
}

// A GPT-2-style model with every bias, learned positions and an untied head, V divisible by 4.
models::TransformerConfig untied_gpt_like() {
  models::TransformerConfig model;
  model.name = "untied-gpt-like";
  model.num_layers = 8;
  model.hidden_size = 1024;
  model.num_attention_heads = 16;
  model.num_kv_heads = 16;
  model.head_dim = 64;
  model.ffn_hidden_size = 4096;
  model.vocab_size = 50304;  // 50257 rounded up to a multiple of 128, as Megatron-LM pads GPT-2
  model.seq_length = 1024;
  model.max_position_embeddings = 1024;
  model.activation = models::Activation::kGelu;
  model.norm = models::Norm::kLayerNorm;
  model.positions = models::Positions::kLearned;
  model.tied_embeddings = false;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = true;
  return model;
}

TEST_CASE("padded_vocab_size: a multiple of d tp, d the framework's divisor") {
  models::TransformerConfig gpt2;
  gpt2.vocab_size = 50257;
  models::TransformerConfig llama;
  llama.vocab_size = 32000;
  // Divisor 1 (fsdp, meshplan, or --make-vocab-size-divisible-by 1): the smallest multiple of tp.
  const PlanOptions fsdp = test::options_for(Framework::kFsdp);
  CHECK(vocab_size_divisible_by(fsdp) == 1);
  CHECK(padded_vocab_size(gpt2, 8, fsdp) == 50264);   // 50257 = 8 * 6282 + 1 -> 8 * 6283
  CHECK(padded_vocab_size(gpt2, 1, fsdp) == 50257);   // tp 1: no padding
  CHECK(padded_vocab_size(gpt2, 3, fsdp) == 50259);   // 50257 = 3 * 16752 + 1 -> 3 * 16753
  CHECK(padded_vocab_size(llama, 8, fsdp) == 32000);  // 32000 = 8 * 4000: already a multiple
  // Megatron-LM's default divisor 128: the padded sizes its own functional tests log
  // ("padded vocab (size: 50257) with ... dummy tokens", validation/memory_cases.json
  // padded_vocab_size: GPT-2's vocabulary at tp 1, 2 and 4, and 131,073 at tp 1 and 4).
  const PlanOptions megatron;
  CHECK(vocab_size_divisible_by(megatron) == 128);
  CHECK(padded_vocab_size(gpt2, 1, megatron) == 50304);
  CHECK(padded_vocab_size(gpt2, 2, megatron) == 50432);
  CHECK(padded_vocab_size(gpt2, 4, megatron) == 50688);
  models::TransformerConfig tekken;
  tekken.vocab_size = 131073;
  CHECK(padded_vocab_size(tekken, 1, megatron) == 131200);
  CHECK(padded_vocab_size(tekken, 4, megatron) == 131584);
  // GPT-3's 51,200 rows at tp 8 (Narayanan et al. 2021 count V = 51,200); Llama-2 at tp 8 pads.
  CHECK(padded_vocab_size(gpt2, 8, megatron) == 51200);
  CHECK(padded_vocab_size(llama, 8, megatron) == 32768);
  // DeepSpeed's Megatron-derived model code pads alike; a stated divisor wins (Megatron-Bridge
  // sets 1280 for DeepSeek-V3, whose 129,280 it divides).
  CHECK(vocab_size_divisible_by(test::options_for(Framework::kDeepSpeed)) == 128);
  CHECK(vocab_size_divisible_by(test::options_for(Framework::kMeshplan)) == 1);
  PlanOptions bridge;
  bridge.make_vocab_size_divisible_by = 1280;
  models::TransformerConfig deepseek;
  deepseek.vocab_size = 129280;
  CHECK(padded_vocab_size(deepseek, 1, bridge) == 129280);
  CHECK(padded_vocab_size(deepseek, 2, bridge) == 130560);  // 2,560 x 51
}

TEST_CASE("vocab_padding_error: divisors the framework cannot build") {
  PlanOptions options;
  options.make_vocab_size_divisible_by = 0;
  CHECK(vocab_padding_error(options, "--make-vocab-size-divisible-by") ==
        "--make-vocab-size-divisible-by: must be between 1 and 1048576 (0)");
  options.make_vocab_size_divisible_by = (int64_t{1} << 20) + 1;
  CHECK_FALSE(vocab_padding_error(options, "f").empty());
  options.make_vocab_size_divisible_by = 64;
  CHECK(vocab_padding_error(options, "f").empty());  // megatron pads as told
  options.framework = Framework::kFsdp;
  CHECK(vocab_padding_error(options, "f").find("torchtitan") != std::string::npos);
  options.framework = Framework::kMeshplan;  // its executor builds the padded rows
  CHECK(vocab_padding_error(options, "f").empty());
  options.make_vocab_size_divisible_by = 1;
  CHECK(vocab_padding_error(options, "f").empty());
}

TEST_CASE("stage_layer_range, even split: l / (pp * vpp) per chunk") {
  const models::TransformerConfig gpt3 = models::load_model("gpt3-175b");
  Layout layout = make_layout(8, 8, 1, 1, 8);
  CHECK(stage_layer_range(gpt3, layout, 2, 0).count() == 12);  // 96 / 8
  CHECK(stage_layer_range(gpt3, layout, 2, 0).first == 24);    // stages 0, 1 hold 0-23
  layout.vpp = 3;
  CHECK(stage_layer_range(gpt3, layout, 2, 1).count() == 4);  // 96 / (8 * 3)
  CHECK(stage_layer_range(gpt3, layout, 2, 1).first == 40);   // virtual stage 1 * 8 + 2 = 10
  CHECK(stage_layer_count(gpt3, layout, 2) == 12);            // 3 chunks of 4
}

TEST_CASE("Llama-2 7B, tp 8, pp 4: per-stage counts and the sum over ranks") {
  const models::TransformerConfig model = models::load_model("llama2-7b");
  const Layout layout = make_layout(8, 4, 1, 1, 1);
  // Per layer: sharded Q, K, V, O 4 h^2 = 67,108,864 and MLP 3 h f = 3 * 4096 * 11008 =
  // 135,266,304, together 202,375,168 / 8 = 25,296,896 per rank; replicated two RMSNorm gains
  // 2 * 4096 = 8,192. One rank: 25,305,088 per layer, 8 layers per stage = 202,440,704.
  CHECK(stage_parameter_count(model, layout, 1, kUnpadded) == 202'440'704);
  CHECK(stage_parameter_count(model, layout, 2, kUnpadded) == 202'440'704);
  // First stage adds the vocab-parallel embedding V/t h = 4000 * 4096 = 16,384,000.
  CHECK(stage_parameter_count(model, layout, 0, kUnpadded) == 218'824'704);
  // Last stage adds the final RMSNorm 4,096 and the untied LM head shard 16,384,000.
  CHECK(stage_parameter_count(model, layout, 3, kUnpadded) == 218'828'800);
  // Replicated on every tp rank: 32 layers * 8,192 + final norm 4,096 = 266,240.
  const int64_t replicated = 266'240;
  const int64_t over_ranks = 8 * sum_over_stages(model, layout) - 7 * replicated;
  CHECK(over_ranks == models::count_parameters(model).total);
  CHECK(over_ranks == 6'738'415'616);  // published count, meta-llama/Llama-2-7b-hf
}

TEST_CASE("untied GPT-like model with biases and learned positions: sum over ranks") {
  const models::TransformerConfig model = untied_gpt_like();
  // count_parameters by hand: per layer attention 4 h^2 + 3h + h, MLP 2 h f + f + h, two
  // LayerNorms 4h: 4,194,304 + 4,096 + 8,388,608 + 5,120 + 4,096 = 12,596,224 (= 12 h^2 + 13 h);
  // 8 layers 100,769,792;
  // embedding V h 51,511,296, positions P h 1,048,576, final LayerNorm 2,048, LM head 51,511,296.
  const int64_t total = 204'843'008;
  REQUIRE(models::count_parameters(model).total == total);
  // Replicated per tp rank: per layer two LayerNorms 4h, attention output bias h, second MLP bias
  // h (6h = 6,144, times 8 layers 49,152), the position table P h = 1,048,576 and the final
  // LayerNorm 2h = 2,048: 1,099,776.
  const int64_t replicated = 1'099'776;
  for (const auto& tp_and_pp : {std::pair<int64_t, int64_t>{1, 1}, {2, 2}, {4, 2}, {4, 8}}) {
    const int64_t tp = tp_and_pp.first, pp = tp_and_pp.second;  // not bindings: for CAPTURE
    CAPTURE(tp);
    CAPTURE(pp);
    const Layout layout = make_layout(tp, pp, 1, 1, 1);
    CHECK(tp * sum_over_stages(model, layout) - (tp - 1) * replicated == total);
  }
}

TEST_CASE("tied GPT-3 175B: padding rows and one extra LM-head copy with pp > 1") {
  const models::TransformerConfig model = models::load_model("gpt3-175b");
  const int64_t h = 12288;
  // Whole model on one rank (tp 1, pp 1): the published shape's exact count, 96 layers of
  // 12 h^2 + 13 h = 1,812,099,072, embedding 50257 h = 617,558,016, positions 2048 h =
  // 25,165,824, final LayerNorm 2h = 24,576: 174,604,259,328 (Brown et al. 2020: "175.0B").
  CHECK(stage_parameter_count(model, make_layout(1, 1, 1, 1, 1), 0, kUnpadded) == 174'604'259'328);

  // tp 8: the vocabulary pads to 50264, 7 more rows of h. Replicated per rank: 96 layers * 6h =
  // 7,077,888, positions 25,165,824, final LayerNorm 24,576: 32,268,288.
  const int64_t replicated = 32'268'288;
  const Layout tp8 = make_layout(8, 1, 1, 1, 1);
  CHECK(8 * stage_parameter_count(model, tp8, 0, kUnpadded) - 7 * replicated ==
        174'604'259'328 + 7 * h);  // = 174,604,345,344

  // tp 8, pp 8: the last stage keeps its own copy of the tied embedding shard (Megatron-LM's
  // embedding group): exactly 50264 / 8 * h = 6283 * 12288 = 77,205,504 more than pp 1.
  const Layout tp8_pp8 = make_layout(8, 8, 1, 1, 1);
  CHECK(sum_over_stages(model, tp8_pp8) - stage_parameter_count(model, tp8, 0, kUnpadded) ==
        77'205'504);
  // Stage 0 of tp 8, pp 8: 12 layers of (12 h^2 + 7 h) / 8 sharded (matrices, QKV and first MLP
  // biases) + 6h replicated = 226,503,168 + 73,728 = 226,576,896 each, 2,718,922,752; plus the
  // embedding shard 77,205,504 and the position table 25,165,824.
  CHECK(stage_parameter_count(model, tp8_pp8, 0, kUnpadded) == 2'821'294'080);
  // Last stage: the same 12 layers, the final LayerNorm 2h and the tied head copy 77,205,504.
  CHECK(stage_parameter_count(model, tp8_pp8, 7, kUnpadded) == 2'796'152'832);
  // Megatron-LM pads to a multiple of 128 x 8 = 1,024: 51,200 rows, 936 more than 50,264, so
  // each of the two stages holding a shard has 936 / 8 h = 1,437,696 parameters more.
  CHECK(stage_parameter_count(model, tp8_pp8, 0, PlanOptions{}) == 2'821'294'080 + 1'437'696);
  CHECK(stage_parameter_count(model, tp8_pp8, 7, PlanOptions{}) == 2'796'152'832 + 1'437'696);
  CHECK(stage_parameter_count(model, tp8_pp8, 3, PlanOptions{}) ==
        stage_parameter_count(model, tp8_pp8, 3, kUnpadded));
}

}  // namespace
}  // namespace meshplan::planner
