// plan --emit: what each framework needs beyond the plan's sizes, and what it cannot run. Each case
// is a defect an audit of the emitted configs against the frameworks' own source found
// (session 36): a flag Megatron-LM asserts on, a plan setting that went out without a word, a
// plan costed for another framework.
#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "emit_test_support.h"
#include "meshplan/emit.h"

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

// Llama-3 8B on 16 H100s at tp 2, dp 8.
planner::Layout tp2_dp8(int zero) {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 8;
  layout.global_batch = 64;
  layout.zero = zero;
  return layout;
}

TEST_CASE("--emit refuses a plan costed for another framework") {
  // The best plan under megatron is not the best under fsdp, nor costed like it: emitting it
  // for torchtitan would run a layout meshplan never chose there.
  const planner::Plan megatron = make_plan("llama3-8b", "dgx-h100", tp2_dp8(3));
  CHECK_THROWS_WITH_AS(emit_torchtitan(megatron),
                       "--emit torchtitan: options.framework: the plan was costed for megatron; "
                       "re-plan with --framework fsdp to emit it for torchtitan (megatron)",
                       InputError);
  CHECK_THROWS_WITH_AS(emit_deepspeed(megatron),
                       "--emit deepspeed: options.framework: the plan was costed for megatron; "
                       "re-plan with --framework deepspeed to emit it for deepspeed (megatron)",
                       InputError);
  CHECK_THROWS_WITH_AS(emit_megatron(costed_for(megatron, planner::Framework::kFsdp)),
                       "--emit megatron: options.framework: the plan was costed for fsdp; "
                       "re-plan with --framework megatron to emit it for megatron (fsdp)",
                       InputError);
  CHECK(target_framework(EmitTarget::kSlurm) == std::nullopt);
}

TEST_CASE("--emit: multi-token prediction goes out for Megatron-LM only, as --mtp-num-layers") {
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", tp2_dp8(1));
  plan.model.mtp_num_layers = 2;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--mtp-num-layers") == "2");
  CHECK(megatron_parser_flags().count("--mtp-num-layers") == 1);
  plan.model.mtp_num_layers = 0;
  CHECK(megatron_flags(emit_megatron(plan)).count("--mtp-num-layers") == 0);
  plan.model.mtp_num_layers = 1;
  for (const EmitTarget target :
       {EmitTarget::kTorchtitan, EmitTarget::kDeepSpeed, EmitTarget::kMegatronDeepSpeed}) {
    CAPTURE(to_string(target));
    CHECK(error_of(plan, target) ==
          std::string("--emit ") + to_string(target) +
              ": model.mtp_num_layers: the multi-token-prediction module is emitted for "
              "Megatron-LM only (--mtp-num-layers); " +
              to_string(target) + " has none (1)");
  }
}

TEST_CASE("--emit: partial rotary as --rotary-percent for both Megatrons, refused by torchtitan") {
  // Megatron-LM d98e8a64 and Megatron-DeepSpeed f4157bea both rotate int(kv_channels x percent)
  // channels under --rotary-percent (GLM-4.5's 0.5, GPT-NeoX's 0.25).
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", tp2_dp8(1));
  CHECK(megatron_flags(emit_megatron(plan)).count("--rotary-percent") == 0);
  plan.model.rotary_percent = 0.5;
  CHECK(megatron_flags(emit_megatron(plan)).at("--rotary-percent") == "0.5");
  CHECK(megatron_parser_flags().count("--rotary-percent") == 1);
  CHECK(parser_flags("megatron_deepspeed_arguments_flags.txt").count("--rotary-percent") == 1);
  planner::Layout layout = tp2_dp8(1);
  layout.sequence_parallel = false;
  planner::Plan deepspeed =
      costed_for(make_plan("llama2-7b", "dgx-h100", layout), planner::Framework::kDeepSpeed);
  deepspeed.model.rotary_percent = 0.25;  // Llama 2 7B: multi-head attention, as it needs
  CHECK(megatron_flags(emit_megatron_deepspeed(deepspeed)).at("--rotary-percent") == "0.25");
  planner::Layout fsdp_layout = tp2_dp8(3);
  fsdp_layout.sequence_parallel = true;
  planner::Plan fsdp =
      costed_for(make_plan("llama3-8b", "dgx-h100", fsdp_layout), planner::Framework::kFsdp);
  fsdp.model.rotary_percent = 0.5;
  CHECK(error_of(fsdp, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.rotary_percent: torchtitan's llama3 model rotates every channel "
        "of a head (0.5)");
}

TEST_CASE("--emit: NoPE layers as --no-rope-freq, the q/k L2 norm as --qk-l2-norm where equal") {
  // Megatron-LM d98e8a64 arguments.py --no-rope-freq (an integer N or a list expression; 1 skips
  // rope, attention.py) and --qk-l2-norm (L2Norm on every layer).
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", tp2_dp8(1));  // 32 layers
  CHECK(megatron_parser_flags().count("--no-rope-freq") == 1);
  CHECK(megatron_parser_flags().count("--qk-l2-norm") == 1);
  plan.model.no_rope_freq.assign(32, 0);
  for (size_t layer = 3; layer < 32; layer += 4) {
    plan.model.no_rope_freq[layer] = 1;  // Llama 4's every fourth layer: Megatron's N = 4
  }
  CHECK(megatron_flags(emit_megatron(plan)).at("--no-rope-freq") == "4");
  plan.model.no_rope_freq[3] = 0;  // no longer periodic: the list
  const std::string list = megatron_flags(emit_megatron(plan)).at("--no-rope-freq");
  CHECK(list.starts_with("\"[0,0,0,0,0,0,0,1,"));
  CHECK(list.ends_with(",1]\""));
  // Megatron-LM normalises every layer; the model skips its NoPE layers: refused while any.
  plan.model.qk_l2_norm = true;
  CHECK(error_of(plan, EmitTarget::kMegatron) ==
        "--emit megatron: model.qk_l2_norm: Megatron-LM's --qk-l2-norm normalises every layer, the "
        "model only its rotary ones (no_rope_freq gives NoPE layers) (true)");
  plan.model.no_rope_freq.clear();
  CHECK(megatron_flags(emit_megatron(plan)).count("--qk-l2-norm") == 1);
  CHECK(megatron_flags(emit_megatron(plan)).count("--no-rope-freq") == 0);
  // Megatron-DeepSpeed and torchtitan have neither.
  planner::Layout layout = tp2_dp8(1);
  layout.sequence_parallel = false;
  planner::Plan deepspeed =
      costed_for(make_plan("llama2-7b", "dgx-h100", layout), planner::Framework::kDeepSpeed);
  deepspeed.model.qk_l2_norm = true;
  CHECK(error_of(deepspeed, EmitTarget::kMegatronDeepSpeed) ==
        "--emit megatron-deepspeed: model.qk_l2_norm: Megatron-DeepSpeed has no query/key "
        "normalization (no flag in arguments.py) (true)");
  deepspeed.model.qk_l2_norm = false;
  deepspeed.model.no_rope_freq.assign(32, 0);
  deepspeed.model.no_rope_freq[31] = 1;
  CHECK(error_of(deepspeed, EmitTarget::kMegatronDeepSpeed) ==
        "--emit megatron-deepspeed: model.no_rope_freq: Megatron-DeepSpeed applies rotary "
        "positions on every layer (no flag in arguments.py) (1 NoPE layers)");
  planner::Layout fsdp_layout = tp2_dp8(3);
  fsdp_layout.sequence_parallel = true;
  planner::Plan fsdp =
      costed_for(make_plan("llama3-8b", "dgx-h100", fsdp_layout), planner::Framework::kFsdp);
  fsdp.model.qk_l2_norm = true;
  CHECK(error_of(fsdp, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.qk_l2_norm: torchtitan's llama3 model has no query/key norm "
        "(true)");
}

TEST_CASE("--emit: Llama 4's router as a sigmoid score applied to the expert input") {
  // Megatron-LM d98e8a64: --moe-router-score-function sigmoid and --moe-apply-probs-on-input
  // (experts.py, top-1 only), as Llama4TextMoe routes.
  planner::Layout moe;
  moe.tp = 1;
  moe.dp = 16;
  moe.ep = 8;
  moe.global_batch = 64;
  planner::Plan plan = make_plan("mixtral-8x7b", "dgx-h100", moe);
  plan.model.experts_per_token = 1;
  CHECK(megatron_flags(emit_megatron(plan)).count("--moe-apply-probs-on-input") == 0);
  plan.model.router_probs_on_input = true;
  const auto flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--moe-router-score-function") == "sigmoid");
  CHECK(flags.count("--moe-apply-probs-on-input") == 1);
  CHECK(megatron_parser_flags().count("--moe-apply-probs-on-input") == 1);
}

TEST_CASE("--emit: the flex MoE dispatcher goes out for Megatron-LM only") {
  planner::Layout moe;
  moe.tp = 1;
  moe.dp = 16;
  moe.ep = 8;
  moe.global_batch = 64;
  planner::Plan plan = make_plan("mixtral-8x7b", "dgx-h100", moe);
  plan.options.moe_dispatcher = planner::MoeDispatcher::kFlex;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--moe-token-dispatcher-type") == "flex");
  CHECK(flags.at("--moe-flex-dispatcher-backend") == "deepep");
  const std::set<std::string> parser = megatron_parser_flags();
  CHECK(parser.count("--moe-flex-dispatcher-backend") == 1);
  plan.options.moe_dispatcher = planner::MoeDispatcher::kAllToAll;
  CHECK(megatron_flags(emit_megatron(plan)).count("--moe-flex-dispatcher-backend") == 0);
  // Refused by name before the framework for the other targets.
  plan.options.moe_dispatcher = planner::MoeDispatcher::kFlex;
  CHECK_THROWS_WITH_AS(emit_deepspeed(costed_for(plan, planner::Framework::kDeepSpeed)),
                       "--emit deepspeed: options.moe_dispatcher: Megatron-Core's flex token "
                       "dispatcher is emitted for Megatron-LM only; re-plan with "
                       "--moe-dispatcher alltoall to emit it for deepspeed (flex)",
                       InputError);
  CHECK_THROWS_WITH_AS(emit_torchtitan(plan),
                       "--emit torchtitan: options.moe_dispatcher: Megatron-Core's flex token "
                       "dispatcher is emitted for Megatron-LM only; re-plan with "
                       "--moe-dispatcher alltoall to emit it for torchtitan (flex)",
                       InputError);
  CHECK_THROWS_WITH_AS(emit_megatron_deepspeed(plan),
                       "--emit megatron-deepspeed: options.moe_dispatcher: Megatron-Core's flex "
                       "token dispatcher is emitted for Megatron-LM only; re-plan with "
                       "--moe-dispatcher alltoall to emit it for megatron-deepspeed (flex)",
                       InputError);
}

TEST_CASE("--emit megatron: what Megatron-LM's validate_args asserts") {
  // Megatron-FSDP (zero 3): arguments.py asserts ckpt_format fsdp_dtensor, and asserts that
  // CUDA_DEVICE_MAX_CONNECTIONS is not 1, so the script leaves it unset.
  const std::string fsdp = emit_megatron(make_plan("llama3-8b", "dgx-h100", tp2_dp8(3)));
  CHECK(megatron_flags(fsdp).at("--ckpt-format") == "fsdp_dtensor");
  CHECK(fsdp.find("CUDA_DEVICE_MAX_CONNECTIONS") == std::string::npos);
  // The distributed optimizer (zero 1) at tp 2: asserted to be 1 before Blackwell.
  const std::string zero1 = emit_megatron(make_plan("llama3-8b", "dgx-h100", tp2_dp8(1)));
  CHECK(megatron_flags(zero1).count("--ckpt-format") == 0);
  CHECK(zero1.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n") != std::string::npos);
  // tp 1 and cp 1: no requirement, nothing exported.
  planner::Layout dp16 = tp2_dp8(1);
  dp16.tp = 1;
  dp16.dp = 16;
  CHECK(emit_megatron(make_plan("llama3-8b", "dgx-h100", dp16)).find("CUDA_DEVICE") ==
        std::string::npos);
}

TEST_CASE("--emit megatron: placement, the MoE aux loss, pipeline scatter/gather") {
  planner::Layout layout = tp2_dp8(1);
  layout.pp = 2;
  layout.dp = 4;
  layout.placement = planner::Placement::kTpPpDp;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--use-tp-pp-dp-mapping") == 1);  // initialize.py: 'tp-cp-ep-pp-dp'
  CHECK(flags.count("--no-scatter-gather-tensors-in-pipeline") == 0);  // gone since 10e7b74597
  plan.layout.placement = planner::Placement::kTpDpPp;
  CHECK(megatron_flags(emit_megatron(plan)).count("--use-tp-pp-dp-mapping") == 0);
  // Megatron-LM 2021's split pipeline sends (tp > 1, no sequence parallelism): Megatron-Core
  // sends whole tensors, so the plan cannot be run as costed.
  plan.options.scatter_gather_pipeline = true;
  CHECK(error_of(plan, EmitTarget::kMegatron) ==
        "--emit megatron: options.scatter_gather_pipeline: Megatron-Core sends whole tensors "
        "between pipeline stages (Megatron-LM 2021's scatter/gather is gone) (true)");

  planner::Layout moe;
  moe.dp = 8;
  moe.ep = 8;
  moe.global_batch = 8;
  moe.zero = 1;
  planner::Plan mixtral = make_plan("mixtral-8x7b", "dgx-h100", moe);
  CHECK(megatron_flags(emit_megatron(mixtral)).count("--moe-aux-loss-coeff") == 0);
  mixtral.options.moe_aux_loss_coeff = 0.01;
  CHECK(megatron_flags(emit_megatron(mixtral)).at("--moe-aux-loss-coeff") == "0.01");
}

TEST_CASE("plan refuses Megatron's delayed FP8 scaling with layernorm or moe_act recompute") {
  // transformer_config.py __post_init__: "Delayed scaling does not support moe_act and
  // layernorm recompute for fp8".
  planner::PlanOptions options;
  options.gemm_precision = planner::GemmPrecision::kFp8;
  const models::TransformerConfig llama = models::load_model("llama3-8b");
  CHECK_THROWS_WITH_AS(
      planner::check_recompute_modules_request(
          llama, options, planner::kRecomputeCoreAttn | planner::kRecomputeLayernorm,
          "--recompute-modules"),
      "--recompute-modules: Megatron-Core's delayed FP8 scaling cannot recompute moe_act or "
      "layernorm (--precision fp8)",
      InputError);
  options.gemm_precision = planner::GemmPrecision::kBf16;
  CHECK_NOTHROW(planner::check_recompute_modules_request(
      llama, options, planner::kRecomputeCoreAttn | planner::kRecomputeLayernorm,
      "--recompute-modules"));
}

TEST_CASE("--emit torchtitan: float8, and what torchtitan cannot run as costed") {
  planner::Layout layout = tp2_dp8(3);
  layout.sequence_parallel = true;  // torchtitan's tp is always sequence-parallel
  planner::Plan plan =
      costed_for(make_plan("llama3-8b", "dgx-h100", layout), planner::Framework::kFsdp);
  std::map<std::string, std::string> toml = parse_toml(emit_torchtitan(plan));
  CHECK(toml.count("model.converters") == 0);
  plan.options.gemm_precision = planner::GemmPrecision::kFp8;
  toml = parse_toml(emit_torchtitan(plan));
  // torchao's Float8Linear, tensorwise (no recipe_name), weights gathered in fp8, the output
  // layer in bf16: what meshplan costs under --framework fsdp --precision fp8.
  CHECK(toml.at("model.converters") == "[\"quantize.linear.float8\"]");
  CHECK(toml.at("quantize.linear.float8.enable_fsdp_float8_all_gather") == "true");
  CHECK(toml.at("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp") == "true");
  CHECK(toml.at("quantize.linear.float8.filter_fqns") == "[\"output\"]");
  for (const auto& entry : toml) {
    CHECK_MESSAGE(kTorchtitanKeys.count(entry.first) == 1, entry.first);
  }
  plan.options.gemm_precision = planner::GemmPrecision::kBf16;

  planner::Plan bf16_reduce = plan;
  bf16_reduce.options.grad_reduce_dtype = planner::GradReduceDtype::kBf16;
  CHECK(error_of(bf16_reduce, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.grad_reduce_dtype: torchtitan reduces gradients in float32 "
        "only (training.mixed_precision_reduce) (bf16)");
  planner::Plan no_prefetch = plan;
  no_prefetch.options.overlap_param_gather = false;
  CHECK(error_of(no_prefetch, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.overlap_param_gather: FSDP2 always prefetches the next "
        "unit's all-gather (off)");
  // tp 8 alone: maybe_enable_amp turns mixed precision off without FSDP, so the model would
  // train in fp32.
  planner::Layout tp8;
  tp8.tp = 8;
  tp8.global_batch = 8;
  tp8.sequence_parallel = true;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", tp8), EmitTarget::kTorchtitan) ==
        "--emit torchtitan: layout.zero: torchtitan trains in bf16 with tp or pp only under "
        "FSDP (maybe_enable_amp); plan with --zero 3 and dp above 1 (zero 0, dp 1)");
}

TEST_CASE("--emit deepspeed refuses what neither DeepSpeed nor its config expresses") {
  planner::Layout layout = tp2_dp8(1);
  layout.sequence_parallel = false;
  layout.placement = planner::Placement::kTpPpDp;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", layout), EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.placement: DeepSpeed's PipeModelDataParallelTopology orders "
        "ranks pipe, data, model (tp-dp-pp) (tp-pp-dp)");
  // FP8 is refused by the planner itself under framework deepspeed.
  planner::PlanOptions options;
  options.framework = planner::Framework::kDeepSpeed;
  options.gemm_precision = planner::GemmPrecision::kFp8;
  CHECK_THROWS_WITH_AS(planner::check_precision(models::load_cluster("dgx-h100"), options),
                       "precision: fp8: framework deepspeed: neither DeepSpeed nor "
                       "Megatron-DeepSpeed runs FP8 GEMMs",
                       InputError);
}

TEST_CASE("--emit slurm: a GPU cluster's plan asks for the node's GPUs") {
  planner::Layout layout;
  layout.dp = 16;
  layout.global_batch = 16;
  planner::Plan plan = make_plan("tiny", "dgx-h100", layout);
  plan.cluster.precision = models::Precision::kFp32;  // what the GPU executor runs
  plan.options.framework = planner::Framework::kMeshplan;
  const std::string script = emit_launch_config(plan, EmitTarget::kSlurm, "p.json");
  // Each rank takes the GPU of its node-local rank (cudaSetDevice), so the job holds all eight.
  CHECK(script.find("#SBATCH --gpus-per-node=8\n") != std::string::npos);
  CHECK(script.find("#SBATCH --ntasks-per-node=8\n") != std::string::npos);
  planner::Layout cpu;
  cpu.dp = 4;
  cpu.global_batch = 4;
  CHECK(emit_launch_config(make_plan("tiny", "local-cpu", cpu), EmitTarget::kSlurm, "p.json")
            .find("--gpus-per-node") == std::string::npos);
}

}  // namespace
}  // namespace meshplan::reports
