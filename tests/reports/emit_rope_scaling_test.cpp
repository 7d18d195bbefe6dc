// --emit and the model's rotary frequency scaling (models.h RopeScaling): Megatron-LM's flags,
// Megatron-Bridge's GPTModelProvider fields, and the refusals where a target cannot turn the
// model's frequencies.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

#include "emit_test_support.h"
#include "meshplan/emit.h"

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

planner::Layout dp8(int64_t zero) {
  planner::Layout layout;
  layout.dp = 8;
  layout.global_batch = 16;
  layout.zero = zero;
  return layout;
}

TEST_CASE("--emit megatron: Llama 3.1's bands and linear interpolation as Megatron-LM's flags") {
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", dp8(1));
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--use-rope-scaling").empty());
  CHECK(flags.at("--rope-scaling-factor") == "8");
  CHECK(flags.count("--rotary-seq-len-interpolation-factor") == 0);
  // Llama 3.2's factor 32 on the same bands.
  plan.model.rope_scaling.factor = 32.0;
  CHECK(megatron_flags(emit_megatron(plan)).at("--rope-scaling-factor") == "32");
  // Unscaled: neither flag.
  plan.model.rope_scaling = {};
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--use-rope-scaling") == 0);
  CHECK(flags.count("--rope-scaling-factor") == 0);
  // Linear: positions over the factor, an integer flag.
  plan.model.rope_scaling = {models::RopeScalingType::kLinear, 4.0, 1.0, 4.0, 8192};
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--rotary-seq-len-interpolation-factor") == "4");
  CHECK(flags.count("--use-rope-scaling") == 0);
  const std::string bridge = emit_megatron_bridge(plan);
  CHECK(bridge.find("  model.seq_len_interpolation_factor=4 \\\n") != std::string::npos);
  CHECK(bridge.find("model.rope_scaling=") == std::string::npos);
  plan.model.rope_scaling.factor = 2.5;
  for (const EmitTarget target : {EmitTarget::kMegatron, EmitTarget::kMegatronBridge}) {
    CAPTURE(to_string(target));
    CHECK(error_of(plan, target) ==
          fmt::format("--emit {}: model.rope_scaling_factor: --rotary-seq-len-interpolation-factor "
                      "is an integer flag (arguments.py type=int) (linear x2.5)",
                      to_string(target)));
  }
}

TEST_CASE("--emit megatron and megatron-bridge: bands or attention Megatron-Core cannot scale") {
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", dp8(1));
  plan.model.rope_scaling.original_max_positions = 4096;
  for (const EmitTarget target : {EmitTarget::kMegatron, EmitTarget::kMegatronBridge}) {
    CAPTURE(to_string(target));
    CHECK(error_of(plan, target) ==
          fmt::format("--emit {}: model.rope_scaling: Megatron-Core's _apply_scaling fixes Llama "
                      "3.1's bands (low_freq_factor 1, high_freq_factor 4, original 8192); no "
                      "flag sets others (low 1, high 4, original 4096)",
                      to_string(target)));
  }
  // MultiLatentAttention's RotaryEmbedding takes no scaling.
  planner::Layout layout;
  layout.dp = 2;
  layout.global_batch = 4;
  layout.zero = 1;
  planner::Plan mla = make_plan("tiny-mla", "dgx-h100", layout);
  mla.model.rope_scaling = {models::RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  CHECK(error_of(mla, EmitTarget::kMegatron) ==
        "--emit megatron: model.rope_scaling: Megatron-Core's MultiLatentAttention turns its "
        "rotary part unscaled or by YaRN (no --use-rope-scaling there) (llama3 x8)");
}

TEST_CASE("--emit megatron: YaRN as --position-embedding-type yarn, and MLA's --rope-type yarn") {
  // gpt-oss-120b: YaRN factor 32 over 4096, unrounded ramp (Megatron-Bridge gpt_oss_bridge.py).
  planner::Plan oss = make_plan("gpt-oss-120b", "dgx-h100", dp8(1));
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(oss));
  CHECK(flags.at("--position-embedding-type") == "yarn");
  CHECK(flags.at("--rotary-base") == "150000");
  CHECK(flags.at("--rotary-scaling-factor") == "32");
  CHECK(flags.at("--yarn-original-max-position-embeddings") == "4096");
  CHECK(flags.at("--yarn-beta-fast") == "32");
  CHECK(flags.at("--yarn-beta-slow") == "1");
  CHECK(flags.at("--no-yarn-correction-range-round-to-int").empty());
  CHECK(flags.count("--yarn-correction-range-round-to-int") == 0);
  CHECK(flags.at("--mscale") == "1");
  CHECK(flags.at("--mscale-all-dim") == "0");
  CHECK(flags.count("--rope-type") == 0);
  CHECK(flags.count("--use-rope-scaling") == 0);
  // Megatron-Bridge: GPTModelProvider's yarn_* fields (on Llama 3 8B's shape: Bridge's
  // overrides cannot give gpt-oss's window).
  planner::Plan llama = make_plan("llama3-8b", "dgx-h100", dp8(1));
  llama.model.rope_scaling = oss.model.rope_scaling;
  const std::string bridge = emit_megatron_bridge(llama);
  for (const char* line :
       {"  model.position_embedding_type=yarn \\\n", "  model.yarn_rotary_scaling_factor=32 \\\n",
        "  model.yarn_original_max_position_embeddings=4096 \\\n", "  model.yarn_beta_fast=32 \\\n",
        "  model.yarn_beta_slow=1 \\\n", "  model.yarn_mscale=1 \\\n",
        "  model.yarn_mscale_all_dim=0 \\\n",
        "  model.yarn_correction_range_round_to_int=false \\\n"}) {
    CAPTURE(line);
    CHECK(bridge.find(line) != std::string::npos);
  }
  // YarnRotaryEmbedding turns whole heads.
  llama.model.rotary_percent = 0.5;
  for (const EmitTarget target : {EmitTarget::kMegatron, EmitTarget::kMegatronBridge}) {
    CAPTURE(to_string(target));
    CHECK(error_of(llama, target) ==
          fmt::format("--emit {}: model.rotary_percent: Megatron-Core's YarnRotaryEmbedding turns "
                      "every kv channel; YaRN over part of a head has no flag (0.5)",
                      to_string(target)));
  }

  // DeepSeek-V3: MLA's own YaRN, as Megatron-LM's DeepSeek-V3 scripts pass it.
  planner::Layout layout;
  layout.dp = 64;
  layout.ep = 64;
  layout.global_batch = 128;
  layout.zero = 1;
  planner::Plan deepseek = make_plan("deepseek-v3", "dgx-h100", layout);
  flags = megatron_flags(emit_megatron(deepseek));
  CHECK(flags.at("--position-embedding-type") == "rope");
  CHECK(flags.at("--rope-type") == "yarn");
  CHECK(flags.at("--rotary-scaling-factor") == "40");
  CHECK(flags.at("--mscale") == "1");
  CHECK(flags.at("--mscale-all-dim") == "1");
  CHECK(flags.count("--yarn-original-max-position-embeddings") == 0);
  CHECK(flags.count("--yarn-beta-fast") == 0);
  // MLATransformerConfig's original context, betas and rounding have no flag.
  deepseek.model.rope_scaling.original_max_positions = 8192;
  CHECK(
      error_of(deepseek, EmitTarget::kMegatron) ==
      "--emit megatron: model.rope_scaling: Megatron-Core's MLA YaRN takes MLATransformerConfig's "
      "original context 4096, beta 32 / 1 and rounded ramp; no flag sets others (original "
      "8192, beta 32 / 1, truncate true)");
  // Megatron-DeepSpeed has no YaRN.
  planner::Plan llama2 = make_plan("llama2-7b", "dgx-h100", dp8(1));
  llama2.model.rope_scaling = oss.model.rope_scaling;
  CHECK(error_of(llama2, EmitTarget::kMegatronDeepSpeed) ==
        "--emit megatron-deepspeed: model.rope_scaling: Megatron-DeepSpeed turns rotary positions "
        "unscaled (no flag in arguments.py) (yarn x32)");
}

TEST_CASE("--emit megatron-bridge: GPTModelProvider's rope_scaling and rope_scaling_factor") {
  const std::string script = emit_megatron_bridge(make_plan("llama3-8b", "dgx-h100", dp8(1)));
  CHECK(script.find("  model.rope_scaling=true \\\n") != std::string::npos);
  CHECK(script.find("  model.rope_scaling_factor=8 \\\n") != std::string::npos);
}

TEST_CASE("--emit megatron-deepspeed and torchtitan refuse frequencies they do not turn") {
  // Megatron-DeepSpeed's RotaryEmbedding is unscaled; Llama 2 7B with Llama 3.1's bands.
  planner::Plan llama2 = make_plan("llama2-7b", "dgx-h100", dp8(1));
  llama2.model.rope_scaling = {models::RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  CHECK(error_of(llama2, EmitTarget::kMegatronDeepSpeed) ==
        "--emit megatron-deepspeed: model.rope_scaling: Megatron-DeepSpeed turns rotary positions "
        "unscaled (no flag in arguments.py) (llama3 x8)");
  // torchtitan's llama3 flavors scale as Llama 3.1: the 8B shape unscaled is not its 8B.
  planner::Plan titan = make_plan("llama3-8b", "dgx-h100", dp8(3));
  CHECK(error_of(titan, EmitTarget::kTorchtitan) == "(no error)");
  titan.model.rope_scaling = {};
  CHECK(error_of(titan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.rope_scaling: torchtitan's llama3 8B flavor turns by Llama "
        "3.1's scaled frequencies (RoPEScalingArgs: llama3 x8) (none x1)");
  titan.model.rope_scaling = {models::RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
  CHECK(error_of(titan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.rope_scaling: torchtitan's llama3 8B flavor turns by Llama "
        "3.1's scaled frequencies (RoPEScalingArgs: llama3 x8) (linear x8)");
}

}  // namespace
}  // namespace meshplan::reports
