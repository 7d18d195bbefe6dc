// plan --emit megatron-deepspeed: the script's pretrain_gpt.py flags parsed back into a map and
// checked value by value against the plan (values worked out here, from the plan's fields and the
// presets' published shapes), its embedded DeepSpeed config against --emit deepspeed's, its
// launcher line, and every refusal's message. Flag names are checked against
// tests/data/emit/megatron_deepspeed_arguments_flags.txt, the names microsoft/Megatron-DeepSpeed
// megatron/arguments.py defines at f4157bea (and deepspeed.add_config_arguments, DeepSpeed
// 38327e07 deepspeed/__init__.py); the launcher's against DeepSpeed 38327e07
// deepspeed/launcher/runner.py parse_args.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "emit_test_support.h"
#include "meshplan/emit.h"

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

constexpr EmitTarget kTarget = EmitTarget::kMegatronDeepSpeed;

// A plan costed for deepspeed. ZeRO-1/2 plans state the parameter all-gather unoverlapped, as
// DeepSpeed runs it (the refusal of the overlapped one has its own case).
planner::Plan deepspeed_plan(const std::string& model, const std::string& cluster,
                             const planner::Layout& layout) {
  planner::Plan plan =
      costed_for(make_plan(model, cluster, layout), planner::Framework::kDeepSpeed);
  plan.options.overlap_param_gather = false;
  return plan;
}

// Llama 2 7B (MHA: 32 heads, 32 kv heads) on 16 H100s: tp 2, pp 4, dp 2, ZeRO 1, full recompute.
planner::Plan tp2_pp4_full_recompute_plan() {
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 4;
  layout.dp = 2;
  layout.micro_batch = 1;
  layout.global_batch = 32;
  layout.zero = 1;
  layout.recompute = planner::Recompute::kFull;
  return deepspeed_plan("llama2-7b", "dgx-h100", layout);
}

// Llama 2 7B on 8 H100s: dp 8 under ZeRO 3, no recompute.
planner::Plan zero3_dp8_plan() {
  planner::Layout layout;
  layout.dp = 8;
  layout.micro_batch = 2;
  layout.global_batch = 64;
  layout.zero = 3;
  return deepspeed_plan("llama2-7b", "dgx-h100", layout);
}

// The JSON the script writes with `cat > ds_config.json <<'EOF'`, as written.
std::string embedded_config(const std::string& script) {
  const std::string open = "cat > ds_config.json <<'EOF'\n";
  const size_t start = script.find(open);
  REQUIRE(start != std::string::npos);
  const size_t body = start + open.size();
  const size_t end = script.find("\nEOF\n", body);
  REQUIRE(end != std::string::npos);
  return script.substr(body, end + 1 - body);
}

// The line that starts the deepspeed launcher.
std::string launcher_line(const std::string& script) {
  std::istringstream lines(script);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("deepspeed ", 0) == 0) {
      return line;
    }
  }
  return "";
}

std::set<std::string> megatron_deepspeed_parser_flags() {
  return parser_flags("megatron_deepspeed_arguments_flags.txt");
}

void check_flag_names(const std::map<std::string, std::string>& flags) {
  const std::set<std::string> parser = megatron_deepspeed_parser_flags();
  REQUIRE(parser.size() == 320);     // 316 in arguments.py at f4157bea, 4 of DeepSpeed's
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, flag << " is not a Megatron-DeepSpeed argument");
  }
}

TEST_CASE("--emit megatron-deepspeed: Llama 2 7B at tp 2, pp 4, ZeRO 1, full recompute") {
  const planner::Plan plan = tp2_pp4_full_recompute_plan();
  const std::string script = emit_megatron_deepspeed(plan);
  CHECK(script.rfind("#!/usr/bin/env bash\n# meshplan plan --emit megatron-deepspeed: ", 0) == 0);
  CHECK(script.find("at f4157bea (megatron/arguments.py)") != std::string::npos);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  const std::map<std::string, std::string> expected = {
      {"--tensor-model-parallel-size", "2"},
      {"--pipeline-model-parallel-size", "4"},
      {"--micro-batch-size", "1"},
      {"--global-batch-size", "32"},
      {"--deepspeed", ""},
      {"--deepspeed_config", "ds_config.json"},
      {"--zero-stage", "1"},
      // gpt_model.py GPTModelPipe: PipelineModule interval = --checkpoint-num-layers.
      {"--checkpoint-activations", ""},
      {"--checkpoint-num-layers", "1"},
      {"--deepspeed-activation-checkpointing", ""},
      {"--num-layers", "32"},  // Touvron et al. 2023, Llama 2 7B: 32 layers, 4096, 32 heads
      {"--hidden-size", "4096"},
      {"--num-attention-heads", "32"},
      {"--ffn-hidden-size", "11008"},
      {"--seq-length", "4096"},
      {"--max-position-embeddings", "4096"},  // rope: the planned length
      {"--use-rotary-position-embeddings", ""},
      {"--rotary-position-embeddings-theta", "10000"},  // Llama 2's base (Su et al.'s 10000)
      {"--normalization", "rmsnorm"},
      {"--swiglu", ""},
      {"--untie-embeddings-and-output-weights", ""},
      {"--disable-bias-linear", ""},
      {"--attention-dropout", "0"},
      {"--hidden-dropout", "0"},
      {"--use-flash-attn-v2", ""},
      {"--bf16", ""},
      {"--tokenizer-type", "NullTokenizer"},
      {"--vocab-size", "31999"},  // NullTokenizer adds its end-of-document id: 32000 in all
      {"--make-vocab-size-divisible-by", "128"},  // deepspeed's default divisor, as costed
      {"--data-path", "\"$DATA_PATH\""}};
  CHECK(flags == expected);
  check_flag_names(flags);
  // 16 ranks at 8 per H100 node: two hosts from a hostfile.
  CHECK(launcher_line(script) ==
        "deepspeed --hostfile \"${HOSTFILE:-hostfile}\" --num_nodes 2 --num_gpus 8 "
        "--master_port \"${MASTER_PORT:-29500}\" \\");
  // The config is --emit deepspeed's, byte for byte, and states the plan: 32 sequences = 1 per
  // micro-batch x 16 micro-batches x dp 2; every layer checkpointed by the pipeline engine.
  const std::string config = embedded_config(script);
  CHECK(config == emit_deepspeed(plan));
  const nlohmann::json json = nlohmann::json::parse(config);
  CHECK(json.at("train_batch_size") == 32);
  CHECK(json.at("train_micro_batch_size_per_gpu") == 1);
  CHECK(json.at("gradient_accumulation_steps") == 16);
  CHECK(json.at("zero_optimization").at("stage") == 1);
  CHECK(json.at("pipeline").at("activation_checkpoint_interval") == 1);
  // Nothing but the script: no sequence parallelism, nothing exported.
  CHECK(script.find("CUDA_DEVICE_MAX_CONNECTIONS") == std::string::npos);
  CHECK(script.find("\nset -euo pipefail\n") != std::string::npos);
}

TEST_CASE("--emit megatron-deepspeed: Llama 2 7B at tp 1, pp 1, ZeRO 3") {
  const planner::Plan plan = zero3_dp8_plan();
  const std::string script = emit_megatron_deepspeed(plan);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  CHECK(flags.at("--tensor-model-parallel-size") == "1");
  CHECK(flags.at("--pipeline-model-parallel-size") == "1");
  // Without it pretrain_gpt.py builds GPTModelPipe, whose engine asserts ZeRO < 2.
  CHECK(flags.at("--no-pipeline-parallel").empty());
  CHECK(flags.at("--micro-batch-size") == "2");
  CHECK(flags.at("--global-batch-size") == "64");
  CHECK(flags.at("--zero-stage") == "3");
  for (const char* absent : {"--sequence-parallel", "--checkpoint-activations",
                             "--checkpoint-num-layers", "--deepspeed-activation-checkpointing",
                             "--partition-activations", "--recompute-granularity"}) {
    CHECK_MESSAGE(flags.count(absent) == 0, absent);
  }
  check_flag_names(flags);
  CHECK(launcher_line(script) ==
        "deepspeed --num_nodes 1 --num_gpus 8 --master_port \"${MASTER_PORT:-29500}\" \\");
  const std::string config = embedded_config(script);
  CHECK(config == emit_deepspeed(plan));
  const nlohmann::json json = nlohmann::json::parse(config);
  CHECK(json.at("zero_optimization").at("stage") == 3);
  CHECK(json.at("gradient_accumulation_steps") == 4);  // 64 = 2 x 4 x dp 8
  CHECK(json.count("pipeline") == 0);
}

TEST_CASE("--emit megatron-deepspeed: ZB-H1 as Megatron-DeepSpeed's exact-semantics schedule") {
  planner::Plan plan = tp2_pp4_full_recompute_plan();
  CHECK(megatron_flags(emit_megatron_deepspeed(plan)).count("--enable-zbh1-pipeline") == 0);
  plan.layout.schedule = planner::ScheduleKind::kZbH1;
  const std::string script = emit_megatron_deepspeed(plan);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  check_flag_names(flags);
  CHECK(flags.at("--enable-zbh1-pipeline").empty());
  // Without it the fork's variant fuses B and W in the steady state, not the order costed.
  CHECK(flags.at("--enable-zbh1-exact-semantics").empty());
  // The schedule is no config key: the config is the 1F1B plan's, and --emit deepspeed, which
  // writes only the config, points here.
  planner::Plan one_f_one_b = plan;
  one_f_one_b.layout.schedule = planner::ScheduleKind::kOneFOneB;
  CHECK(embedded_config(script) == emit_deepspeed(one_f_one_b));
  CHECK(error_of(plan, EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.schedule: DeepSpeed's pipeline engine runs 1F1B; ZB-H1 is "
        "Megatron-DeepSpeed's --enable-zbh1-pipeline, not a DeepSpeed config key: --emit "
        "megatron-deepspeed writes it, or plan with --schedule 1f1b (zb-h1)");
  // arguments.py asserts sequence parallelism off under --enable-zbh1-pipeline.
  plan.layout.sequence_parallel = true;
  CHECK(error_of(plan, kTarget)
            .find("deepspeed cannot run this layout: Megatron-DeepSpeed's "
                  "ZB-H1 (--enable-zbh1-pipeline) asserts sequence "
                  "parallelism off (arguments.py)") != std::string::npos);
}

TEST_CASE("plan --emit emits the best-ranked plan its target can express") {
  // Ranked as a deepspeed search might rank them: ZB-H1, then 1F1B with sequence parallelism,
  // then plain 1F1B. A DeepSpeed config says neither of the first two.
  planner::Plan zb_h1 = tp2_pp4_full_recompute_plan();
  zb_h1.layout.schedule = planner::ScheduleKind::kZbH1;
  planner::Plan sequence_parallel = tp2_pp4_full_recompute_plan();
  sequence_parallel.layout.sequence_parallel = true;
  const planner::Plan plain = tp2_pp4_full_recompute_plan();
  const std::vector<planner::Plan> ranked = {zb_h1, sequence_parallel, plain};

  const EmitChoice deepspeed = emit_best_expressible(ranked, EmitTarget::kDeepSpeed, "");
  CHECK(deepspeed.index == 2);
  CHECK(deepspeed.config == emit_deepspeed(plain));
  CHECK(deepspeed.best_refusal == error_of(zb_h1, EmitTarget::kDeepSpeed));
  CHECK(format_emit_choice(EmitTarget::kDeepSpeed, deepspeed, plain, 10.5, 10.0, true) ==
        "# --emit deepspeed: the best plan cannot be emitted (layout.schedule: DeepSpeed's "
        "pipeline engine runs 1F1B; ZB-H1 is Megatron-DeepSpeed's --enable-zbh1-pipeline, not "
        "a DeepSpeed config key: --emit megatron-deepspeed writes it, or plan with --schedule "
        "1f1b (zb-h1)); rank 3 is emitted and saved instead: " +
            planner::describe(plain.layout) + ", 10.5000 s/step (+5.00% over the best)\n");

  // Megatron-DeepSpeed writes ZB-H1: the best plan itself, and no note.
  const EmitChoice fork = emit_best_expressible(ranked, EmitTarget::kMegatronDeepSpeed, "");
  CHECK(fork.index == 0);
  CHECK(fork.config == emit_megatron_deepspeed(zb_h1));
  CHECK(fork.best_refusal.empty());
  CHECK(format_emit_choice(EmitTarget::kMegatronDeepSpeed, fork, zb_h1, 1.0, 1.0, false).empty());

  // None expressible: the best plan's refusal, and how many others were tried.
  CHECK_THROWS_WITH_AS(
      emit_best_expressible({zb_h1, sequence_parallel}, EmitTarget::kDeepSpeed, ""),
      (error_of(zb_h1, EmitTarget::kDeepSpeed) +
       "; none of the 1 next-ranked plans can be emitted either")
          .c_str(),
      InputError);
  // One plan (a fixed layout, or --save-plan-rank): its refusal unchanged.
  CHECK_THROWS_WITH_AS(emit_best_expressible({zb_h1}, EmitTarget::kDeepSpeed, ""),
                       error_of(zb_h1, EmitTarget::kDeepSpeed).c_str(), InputError);
  // Plans costed for another framework: every rank shares it, so rank 1's refusal alone, with
  // no count of next-ranked plans tried.
  CHECK_THROWS_WITH_AS(emit_best_expressible(ranked, EmitTarget::kTorchtitan, ""),
                       "--emit torchtitan: options.framework: the plan was costed for deepspeed; "
                       "re-plan with --framework fsdp to emit it for torchtitan (deepspeed)",
                       InputError);
}

TEST_CASE("--emit megatron-deepspeed: sequence parallelism and the environment it needs") {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.global_batch = 64;
  layout.zero = 1;
  layout.sequence_parallel = true;
  const planner::Plan plan = deepspeed_plan("llama2-7b", "dgx-h100", layout);
  const std::string script = emit_megatron_deepspeed(plan);
  CHECK(megatron_flags(script).at("--sequence-parallel").empty());
  // arguments.py validate_args raises on CUDA without it; one node inherits the shell's.
  CHECK(script.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\ndeepspeed --num_nodes 1 ") !=
        std::string::npos);
  CHECK(script.find("DS_ENV_FILE") == std::string::npos);
  // The config is the one --emit deepspeed writes for the plan without it (a config key does
  // not shard the sequence), and --emit deepspeed points at this target.
  planner::Plan without = plan;
  without.layout.sequence_parallel = false;
  CHECK(embedded_config(script) == emit_deepspeed(without));
  CHECK(error_of(plan, EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.sequence_parallel: sequence parallelism is the training "
        "script's flag (Megatron-DeepSpeed --sequence-parallel), not a DeepSpeed config key: "
        "--emit megatron-deepspeed writes both (on)");
  // Two nodes: the launcher passes other hosts only the variables of the file DS_ENV_FILE names.
  planner::Plan two_nodes = plan;
  two_nodes.layout.dp = 8;
  two_nodes.num_gpus = 16;
  CHECK(emit_megatron_deepspeed(two_nodes).find(
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            "cat > ds_env <<'EOF'\nCUDA_DEVICE_MAX_CONNECTIONS=1\nEOF\n"
            "export DS_ENV_FILE=ds_env\n") != std::string::npos);
}

TEST_CASE("--emit megatron-deepspeed: recompute in groups, partitioned, and without the pipeline") {
  // Full recompute at pp 1, which a DeepSpeed config alone cannot start: transformer.py
  // _checkpointed_forward checkpoints runs of --checkpoint-num-layers through DeepSpeed's
  // checkpointing, which --partition-activations partitions over tp.
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.global_batch = 64;
  layout.zero = 1;
  layout.recompute = planner::Recompute::kFull;
  layout.recompute_group_layers = 2;
  planner::Plan plan = deepspeed_plan("llama2-7b", "dgx-h100", layout);
  plan.options.distribute_saved_activations = true;
  const std::string script = emit_megatron_deepspeed(plan);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  CHECK(flags.at("--no-pipeline-parallel").empty());
  CHECK(flags.at("--checkpoint-activations").empty());
  CHECK(flags.at("--checkpoint-num-layers") == "2");
  CHECK(flags.at("--deepspeed-activation-checkpointing").empty());
  CHECK(flags.at("--partition-activations").empty());
  check_flag_names(flags);
  const nlohmann::json config = nlohmann::json::parse(embedded_config(script));
  CHECK(config.at("activation_checkpointing").at("partition_activations") == true);
  CHECK(error_of(plan, EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.recompute: without the pipeline engine DeepSpeed's activation "
        "checkpointing is called from the model's code, not set in the config (full)");
  // With the pipeline the interval is both the flag and the config's key.
  planner::Plan piped = tp2_pp4_full_recompute_plan();
  piped.layout.recompute_group_layers = 4;
  const std::string piped_script = emit_megatron_deepspeed(piped);
  CHECK(megatron_flags(piped_script).at("--checkpoint-num-layers") == "4");
  CHECK(nlohmann::json::parse(embedded_config(piped_script))
            .at("pipeline")
            .at("activation_checkpoint_interval") == 4);
}

TEST_CASE("--emit megatron-deepspeed: selective recompute of the unfused attention core") {
  planner::Plan plan = zero3_dp8_plan();
  plan.layout.recompute = planner::Recompute::kSelective;
  // With flash attention the framework's own rule refuses it (planner::check_framework).
  CHECK(error_of(plan, kTarget).starts_with("--emit megatron-deepspeed: layout: "));
  CHECK(error_of(plan, kTarget)
            .find("Megatron-DeepSpeed recomputes the attention core only "
                  "without flash attention") != std::string::npos);
  plan.options.flash_attention = false;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron_deepspeed(plan));
  CHECK(flags.at("--recompute-granularity") == "selective");
  CHECK(flags.count("--use-flash-attn-v2") == 0);
  CHECK(flags.count("--use-flash-attn-v1") == 0);
  check_flag_names(flags);
  // FlashAttention-1 has its own flag.
  planner::Plan flash1 = zero3_dp8_plan();
  flash1.options.flash_attention_version = 1;
  CHECK(megatron_flags(emit_megatron_deepspeed(flash1)).at("--use-flash-attn-v1").empty());
}

TEST_CASE("--emit megatron-deepspeed: GPT-3 1.3B, learned positions, LayerNorm, GELU, biases") {
  planner::Layout layout;
  layout.dp = 8;
  layout.global_batch = 64;
  layout.zero = 1;
  const planner::Plan plan = deepspeed_plan("gpt3-1.3b", "dgx-a100-80gb", layout);
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron_deepspeed(plan));
  CHECK(flags.at("--max-position-embeddings") == "2048");  // Brown et al. 2020: n_ctx 2048
  CHECK(flags.at("--normalization") == "layernorm");
  CHECK(flags.at("--vocab-size") == "50256");  // GPT-2's 50257 with NullTokenizer's own id
  for (const char* absent :
       {"--use-rotary-position-embeddings", "--swiglu", "--untie-embeddings-and-output-weights",
        "--disable-bias-linear", "--attention-dropout", "--hidden-dropout", "--kv-channels"}) {
    CHECK_MESSAGE(flags.count(absent) == 0, absent);
  }
  check_flag_names(flags);
}

TEST_CASE("--emit megatron-deepspeed refuses what Megatron-DeepSpeed cannot run as planned") {
  const planner::Plan plan = zero3_dp8_plan();
  CHECK(target_framework(kTarget) == planner::Framework::kDeepSpeed);
  CHECK_THROWS_WITH_AS(
      emit_megatron_deepspeed(costed_for(plan, planner::Framework::kMegatron)),
      "--emit megatron-deepspeed: options.framework: the plan was costed for megatron; re-plan "
      "with --framework deepspeed to emit it for megatron-deepspeed (megatron)",
      InputError);
  // tp-comm overlap never reaches the target: the planner refuses it under deepspeed.
  planner::Plan tp_overlap = plan;
  tp_overlap.options.overlap_tp_comm = true;
  CHECK_THROWS_WITH_AS(
      planner::check_overlap_tp_comm_options(tp_overlap.options, "--overlap-tp-comm"),
      "--overlap-tp-comm: on under framework deepspeed: Megatron-DeepSpeed overlaps no "
      "tensor-parallel communication under --deepspeed (arguments.py validate_args turns "
      "async_tensor_model_parallel_allreduce off)",
      InputError);
  // A ZeRO-1 plan with overlap_param_gather on is costed as DeepSpeed runs it (the gather inside
  // the optimizer step), so it is emitted, and its prediction equals the option's off.
  planner::Plan overlapped_gather = tp2_pp4_full_recompute_plan();
  overlapped_gather.options.overlap_param_gather = true;
  CHECK(error_of(overlapped_gather, kTarget) == "(no error)");
  planner::Plan gather_off = overlapped_gather;
  gather_off.options.overlap_param_gather = false;
  CHECK(planner::estimate_plan(overlapped_gather.model, overlapped_gather.cluster,
                               overlapped_gather.layout, overlapped_gather.options)
            .step_time_s == planner::estimate_plan(gather_off.model, gather_off.cluster,
                                                   gather_off.layout, gather_off.options)
                                .step_time_s);
  planner::Plan zero3_overlapped = plan;  // ZeRO 3 prefetches: nothing to refuse
  zero3_overlapped.options.overlap_param_gather = true;
  CHECK(error_of(zero3_overlapped, kTarget) == "(no error)");

  planner::Layout tp2_cp2;
  tp2_cp2.tp = 2;
  tp2_cp2.cp = 2;
  tp2_cp2.dp = 2;
  tp2_cp2.global_batch = 16;
  CHECK(error_of(make_plan("llama2-7b", "dgx-h100", tp2_cp2), kTarget) ==
        "--emit megatron-deepspeed: layout.cp: context parallelism is not emitted for DeepSpeed "
        "(2)");
  planner::Plan placed = tp2_pp4_full_recompute_plan();
  placed.layout.placement = planner::Placement::kTpPpDp;
  CHECK(error_of(placed, kTarget) ==
        "--emit megatron-deepspeed: layout.placement: DeepSpeed's PipeModelDataParallelTopology "
        "orders ranks pipe, data, model (tp-dp-pp) (tp-pp-dp)");
  planner::Layout moe;
  moe.dp = 8;
  moe.global_batch = 8;
  CHECK(error_of(make_plan("mixtral-8x7b", "dgx-h100", moe), kTarget) ==
        "--emit megatron-deepspeed: model.num_experts: mixture-of-experts models are not emitted "
        "for DeepSpeed (8)");
  // The split: GPTModelPipe's type:transformer gives Llama 2 7B's 32 layers 8 per stage.
  // A split no partition_method builds is DeepSpeed's own refusal (check_framework)...
  planner::Plan uneven = tp2_pp4_full_recompute_plan();
  uneven.layout.stage_layers = {7, 9, 9, 7};
  CHECK(error_of(uneven, kTarget)
            .find("none of type:transformer (8,8,8,8), parameters (8,8,8,8), "
                  "type:transformer|embedding (8,8,8,8) gives 7,9,9,7") != std::string::npos);
  // ...one that another method builds (GPT-2's 12 layers as type:transformer|embedding cuts
  // them, 3,4,3,2) is GPTModelPipe's: it builds 12 / 4 = 3 per stage.
  planner::Layout gpt2_layout = uneven.layout;
  gpt2_layout.dp = 1;
  gpt2_layout.global_batch = 8;
  gpt2_layout.stage_layers = {3, 4, 3, 2};
  CHECK(error_of(deepspeed_plan("gpt2-124m", "dgx-h100", gpt2_layout), kTarget) ==
        "--emit megatron-deepspeed: layout.stage_layers: Megatron-DeepSpeed's GPTModelPipe splits "
        "stages with partition_method type:transformer (gpt_model.py), 3,3,3,3 layers for this "
        "model (3,4,3,2)");
  // Flash attention in fp32 (a CPU cluster's precision): FlashSelfAttention asserts 16 bits.
  planner::Layout cpu;
  cpu.dp = 2;
  cpu.global_batch = 2;
  CHECK(error_of(make_plan("llama2-7b", "local-cpu", cpu), kTarget) ==
        "--emit megatron-deepspeed: options.flash_attention: Megatron-DeepSpeed's flash attention "
        "runs in bf16 or fp16 only (transformer.py FlashSelfAttention) (fp32)");
}

TEST_CASE("--emit megatron-deepspeed refuses model features the fork does not run") {
  // Llama 3 8B: 8 kv heads of 32 (Dubey et al. 2024, Table 3).
  planner::Layout dp8;
  dp8.dp = 8;
  dp8.global_batch = 64;
  dp8.zero = 3;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", dp8), kTarget) ==
        "--emit megatron-deepspeed: model.num_kv_heads: Megatron-DeepSpeed f4157bea splits the "
        "fused QKV projection in three equal parts (transformer.py ParallelAttention.forward), so "
        "--num-key-value-heads below --num-attention-heads does not run (8 of 32 heads)");
  planner::Layout tiny_dp;
  tiny_dp.dp = 2;
  tiny_dp.global_batch = 2;
  CHECK(error_of(make_plan("tiny-mla", "dgx-h100", tiny_dp), kTarget) ==
        "--emit megatron-deepspeed: model.kv_lora_rank: Megatron-DeepSpeed's ParallelAttention "
        "has no multi-latent attention (16)");
  planner::Plan geglu = zero3_dp8_plan();
  geglu.model.activation = models::Activation::kGeglu;
  CHECK(error_of(geglu, kTarget) ==
        "--emit megatron-deepspeed: model.activation: Megatron-DeepSpeed has no gated GELU MLP "
        "(its one gated MLP is --swiglu, SiLU) (geglu)");
  planner::Plan sandwich = zero3_dp8_plan();
  sandwich.model.sandwich_norm = true;
  CHECK(error_of(sandwich, kTarget) ==
        "--emit megatron-deepspeed: model.sandwich_norm: Megatron-DeepSpeed has none of Gemma's "
        "(1 + weight) RMSNorm, sqrt(h) embedding scale or post-branch norms (true)");
  planner::Plan qk_norm = zero3_dp8_plan();
  qk_norm.model.qk_norm = true;
  CHECK(error_of(qk_norm, kTarget) ==
        "--emit megatron-deepspeed: model.qk_norm: Megatron-DeepSpeed has no query/key "
        "normalization (no flag in arguments.py) (true)");
  planner::Plan capped = zero3_dp8_plan();
  capped.model.attn_logit_softcapping = 50.0;  // Gemma 2's
  CHECK(error_of(capped, kTarget) ==
        "--emit megatron-deepspeed: model.attn_logit_softcapping: Megatron-DeepSpeed has no logit "
        "soft-capping (no flag in arguments.py) (50)");
  planner::Plan scaled = zero3_dp8_plan();
  scaled.model.query_pre_attn_scalar = 2.0 * static_cast<double>(scaled.model.head_dim);
  CHECK(error_of(scaled, kTarget) ==
        fmt::format("--emit megatron-deepspeed: model.query_pre_attn_scalar: Megatron-DeepSpeed "
                    "scales attention by 1/sqrt(kv_channels) only ({} != head_dim {})",
                    2 * scaled.model.head_dim, scaled.model.head_dim));
  planner::Plan parallel = zero3_dp8_plan();
  parallel.model.parallel_residual = true;
  CHECK(error_of(parallel, kTarget) ==
        "--emit megatron-deepspeed: model.parallel_residual: Megatron-DeepSpeed's "
        "ParallelTransformerLayer runs the attention and then the MLP, not in parallel (true)");
  planner::Plan alibi = zero3_dp8_plan();
  alibi.model.positions = models::Positions::kAlibi;
  CHECK(error_of(alibi, kTarget) ==
        "--emit megatron-deepspeed: model.positions: Megatron-DeepSpeed has learned and rotary "
        "position embeddings, no ALiBi (alibi)");
  planner::Plan qkv_only = zero3_dp8_plan();  // Qwen2's biases: on Q, K and V only
  qkv_only.model.qkv_bias = true;
  CHECK(error_of(qkv_only, kTarget) ==
        "--emit megatron-deepspeed: model.mlp_bias: Megatron-DeepSpeed biases every linear layer "
        "or none (--disable-bias-linear) (qkv_bias true, attention_output_bias false, mlp_bias "
        "false)");
}

TEST_CASE("--emit megatron-deepspeed: the launcher's flags are DeepSpeed's runner's") {
  // deepspeed/launcher/runner.py parse_args (DeepSpeed 38327e07): --hostfile (-H), --num_nodes,
  // --num_gpus (--num_accelerators), --master_port.
  const std::set<std::string> runner = {"--hostfile", "--num_nodes", "--num_gpus", "--master_port"};
  for (const planner::Plan& plan : {tp2_pp4_full_recompute_plan(), zero3_dp8_plan()}) {
    std::istringstream words(launcher_line(emit_megatron_deepspeed(plan)));
    std::string word;
    words >> word;
    CHECK(word == "deepspeed");
    while (words >> word) {
      if (word.rfind("--", 0) == 0) {
        CHECK_MESSAGE(runner.count(word) == 1, word << " is not a deepspeed launcher argument");
      }
    }
  }
}

}  // namespace
}  // namespace meshplan::reports
