// plan --emit megatron-bridge: the script's ConfigContainer overrides parsed back into a map and
// checked value by value against the plan (values worked out here from the plan's fields and the
// presets' published shapes), against --emit megatron's flags for the same plan, and every key
// against tests/data/emit/megatron_bridge_keys.txt (the fields of Megatron-Bridge 067f987d's
// dataclasses and the Megatron-Core 2a75ac12 ones they extend, listed by
// tests/data/emit/megatron_bridge_keys.py). Refusals are checked by message.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "emit_test_support.h"
#include "meshplan/emit.h"
#include "meshplan/pipeline_layout.h"

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

constexpr EmitTarget kBridge = EmitTarget::kMegatronBridge;

// The overrides after the run_recipe.py line: "  key=value \" or "  'key=value' \", one per line,
// up to "$@". A key given twice fails.
std::map<std::string, std::string> bridge_overrides(const std::string& script) {
  const std::string launcher =
      "scripts/training/run_recipe.py --recipe vanilla_gpt_pretrain_config --mode pretrain \\\n";
  const size_t start = script.find(launcher);
  REQUIRE(start != std::string::npos);
  std::istringstream lines(script.substr(start + launcher.size()));
  std::map<std::string, std::string> overrides;
  std::string line;
  while (std::getline(lines, line) && line != "  \"$@\"") {
    REQUIRE_MESSAGE(line.size() > 4, line);
    REQUIRE(line.substr(line.size() - 2) == " \\");
    std::string word = line.substr(2, line.size() - 4);
    if (word.front() == '\'') {
      REQUIRE(word.back() == '\'');
      word = word.substr(1, word.size() - 2);
    }
    const size_t equals = word.find('=');
    REQUIRE_MESSAGE(equals != std::string::npos, line);
    const std::string key = word.substr(0, equals);
    REQUIRE_MESSAGE(overrides.count(key) == 0, "key given twice: " << key);
    overrides[key] = word.substr(equals + 1);
  }
  CHECK(line == "  \"$@\"");  // the user's arguments come last
  return overrides;
}

std::set<std::string> bridge_keys() {
  std::ifstream file(std::string(MESHPLAN_SOURCE_DIR) +
                     "/tests/data/emit/megatron_bridge_keys.txt");
  std::set<std::string> keys;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line[0] != '#') {
      keys.insert(line);
    }
  }
  return keys;
}

void check_keys_exist(const std::map<std::string, std::string>& overrides) {
  static const std::set<std::string> keys = bridge_keys();
  REQUIRE(keys.size() > 600);            // 632 at 067f987d
  for (const auto& entry : overrides) {  // clang 14: no bindings in CHECK's lambda
    CHECK_MESSAGE(keys.count(entry.first) == 1, entry.first << " is not a ConfigContainer field");
  }
}

// Llama 3 70B on 512 H100: tp 8, pp 4, vpp 2, dp 16, full recompute, ZeRO 1.
planner::Plan llama70b_interleaved_plan() {
  planner::Layout layout;
  layout.tp = 8;
  layout.pp = 4;
  layout.dp = 16;
  layout.vpp = 2;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  layout.micro_batch = 1;
  layout.global_batch = 512;
  layout.recompute = planner::Recompute::kFull;
  layout.sequence_parallel = true;
  layout.zero = 1;
  return make_plan("llama3-70b", "dgx-h100", layout);
}

TEST_CASE(
    "--emit megatron-bridge: Llama-3 70B, interleaved, full recompute, distributed optimizer") {
  planner::Plan plan = llama70b_interleaved_plan();
  plan.options.overlap_p2p_comm = true;
  const std::string script = emit_megatron_bridge(plan);
  CHECK(script.find("torchrun --nnodes 64 --nproc-per-node 8 ") != std::string::npos);
  CHECK(script.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun ") != std::string::npos);
  const std::map<std::string, std::string> overrides = bridge_overrides(script);
  check_keys_exist(overrides);
  const std::map<std::string, std::string> expected = {
      {"model.tensor_model_parallel_size", "8"},
      {"model.pipeline_model_parallel_size", "4"},
      {"model.context_parallel_size", "1"},
      {"model.expert_model_parallel_size", "1"},
      {"model.virtual_pipeline_model_parallel_size", "2"},
      // Megatron-LM's interleaved default; ModelParallelConfig's is off, so both are written.
      {"model.overlap_p2p_comm", "true"},
      {"model.batch_p2p_comm", "false"},
      {"model.recompute_granularity", "full"},
      {"model.recompute_method", "uniform"},
      {"model.recompute_num_layers", "1"},
      {"model.sequence_parallel", "true"},
      {"model.account_for_embedding_in_pipeline_split", "false"},
      {"model.account_for_loss_in_pipeline_split", "false"},
      {"model.distribute_saved_activations", "false"},
      {"ddp.use_distributed_optimizer", "true"},
      {"optimizer.use_distributed_optimizer", "true"},
      {"ddp.overlap_grad_reduce", "true"},
      {"ddp.overlap_param_gather", "true"},
      {"optimizer.overlap_param_gather", "true"},
      {"dist.use_tp_pp_dp_mapping", "false"},
      {"model.layernorm_zero_centered_gamma", "false"},
      {"model.add_qkv_bias", "false"},
      {"model.qk_layernorm", "false"},
      {"model.qk_l2_norm", "false"},
      // GPTModelProvider fuses the loss by default; Megatron-LM and this plan do not.
      {"model.cross_entropy_loss_fusion", "false"},
      {"ddp.bucket_size", "40000000"},  // max(40M, 1M x dp 16) parameters
      {"train.micro_batch_size", "1"},
      {"train.global_batch_size", "512"},
      {"model.num_layers", "80"},  // Dubey et al. 2024, Table 3 (70B)
      {"model.hidden_size", "8192"},
      {"model.num_attention_heads", "64"},
      {"model.num_query_groups", "8"},
      {"model.ffn_hidden_size", "28672"},
      {"dataset.seq_length", "8192"},
      {"model.seq_length", "8192"},
      {"model.position_embedding_type", "rope"},
      {"model.rotary_base", "500000"},  // Dubey et al. 2024, Table 3
      {"model.rope_scaling", "true"},   // Llama 3.1's bands, GPTModelProvider's switch
      {"model.rope_scaling_factor", "8"},
      {"model.normalization", "RMSNorm"},
      {"model.gated_linear_unit", "true"},
      {"model.activation_func", "silu"},
      {"model.share_embeddings_and_output_weights", "false"},
      {"model.add_bias_linear", "false"},
      {"model.attention_dropout", "0"},
      {"model.hidden_dropout", "0"},
      {"tokenizer.tokenizer_type", "NullTokenizer"},
      {"tokenizer.vocab_size", "128256"},
      {"model.make_vocab_size_divisible_by", "128"},
      {"mixed_precision", "bf16_mixed"}};
  CHECK(overrides == expected);
  CHECK(overrides.at("model.num_layers") == std::to_string(plan.model.num_layers));
  CHECK(overrides.at("train.global_batch_size") == std::to_string(plan.layout.global_batch));
  CHECK(overrides.at("tokenizer.vocab_size") == std::to_string(plan.model.vocab_size));

  // The p2p overlap off, and a non-interleaved schedule: batched sends, no overlap.
  plan.options.overlap_p2p_comm = false;
  std::map<std::string, std::string> off = bridge_overrides(emit_megatron_bridge(plan));
  CHECK(off.at("model.overlap_p2p_comm") == "false");
  CHECK(off.at("model.batch_p2p_comm") == "true");
  plan.layout.schedule = planner::ScheduleKind::kOneFOneB;
  plan.layout.vpp = 1;
  off = bridge_overrides(emit_megatron_bridge(plan));
  CHECK(off.at("model.virtual_pipeline_model_parallel_size") == "null");
  CHECK(off.at("model.overlap_p2p_comm") == "false");
}

TEST_CASE("--emit megatron-bridge: without ZeRO both optimizer configs say so; no recompute") {
  // The recipe's optimizer config enables the distributed optimizer, and Bridge turns it on for
  // both configs if either asks (config.py): a ZeRO-0 plan must write false to both.
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.micro_batch = 1;
  layout.global_batch = 64;
  const planner::Plan plan = make_plan("megatron-7.5b", "dgx-h100", layout);
  const std::map<std::string, std::string> overrides = bridge_overrides(emit_megatron_bridge(plan));
  check_keys_exist(overrides);
  CHECK(overrides.at("ddp.use_distributed_optimizer") == "false");
  CHECK(overrides.at("optimizer.use_distributed_optimizer") == "false");
  CHECK(overrides.at("ddp.overlap_param_gather") == "false");
  CHECK(overrides.at("optimizer.overlap_param_gather") == "false");
  CHECK(overrides.at("model.recompute_granularity") == "null");
  CHECK(overrides.count("model.recompute_method") == 0);
  // fp32 training has no preset: mixed_precision null keeps TransformerConfig's fp32.
  planner::Plan fp32 = plan;
  fp32.cluster.precision = models::Precision::kFp32;
  CHECK(bridge_overrides(emit_megatron_bridge(fp32)).at("mixed_precision") == "null");
}

TEST_CASE("--emit megatron-bridge: GPT-3's learned positions, GELU, biases and tied embedding") {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.global_batch = 32;
  const planner::Plan plan = make_plan("gpt3-1.3b", "dgx-h100", layout);
  const std::map<std::string, std::string> overrides = bridge_overrides(emit_megatron_bridge(plan));
  check_keys_exist(overrides);
  CHECK(overrides.at("model.position_embedding_type") == "learned_absolute");
  CHECK(overrides.at("model.normalization") == "LayerNorm");
  CHECK(overrides.at("model.gated_linear_unit") == "false");
  CHECK(overrides.at("model.activation_func") == "gelu");
  CHECK(overrides.at("model.add_bias_linear") == "true");
  CHECK(overrides.at("model.share_embeddings_and_output_weights") == "true");
  CHECK(overrides.at("dataset.seq_length") == "2048");  // Brown et al. 2020: n_ctx 2048
  // A learned table other than seq_length rows has no field in GPTModelProvider.
  planner::Plan shorter = plan;
  shorter.model.seq_length = 1024;
  CHECK(error_of(shorter, kBridge) ==
        "--emit megatron-bridge: model.max_position_embeddings: Megatron-Bridge's "
        "GPTModelProvider learns seq_length positions (gpt_provider.py); plan at --seq-len "
        "equal to the table (2048 != seq_length 1024)");
}

TEST_CASE("--emit megatron-bridge: Mixtral's experts; a dense prefix as the expanded list") {
  planner::Layout moe;
  moe.tp = 2;
  moe.dp = 8;
  moe.ep = 8;
  moe.sequence_parallel = true;
  moe.global_batch = 64;
  moe.zero = 1;
  planner::Plan mixtral = make_plan("mixtral-8x7b", "dgx-h100", moe);
  std::map<std::string, std::string> overrides = bridge_overrides(emit_megatron_bridge(mixtral));
  check_keys_exist(overrides);
  // Mixtral-8x7B's config.json: num_local_experts 8, num_experts_per_tok 2, intermediate 14336.
  CHECK(overrides.at("model.expert_model_parallel_size") == "8");
  CHECK(overrides.at("model.num_moe_experts") == "8");
  CHECK(overrides.at("model.moe_router_topk") == "2");
  CHECK(overrides.at("model.moe_ffn_hidden_size") == "14336");
  CHECK(overrides.at("model.moe_token_dispatcher_type") == "alltoall");
  CHECK(overrides.at("model.moe_grouped_gemm") == "true");
  CHECK(overrides.at("model.overlap_moe_expert_parallel_comm") == "false");
  CHECK(overrides.count("model.moe_layer_freq") == 0);
  CHECK(overrides.count("model.expert_tensor_parallel_size") == 0);  // etp = tp
  planner::set_expert_tensor_parallel(mixtral.layout, 1);
  CHECK(bridge_overrides(emit_megatron_bridge(mixtral)).at("model.expert_tensor_parallel_size") ==
        "1");
  // Three dense layers first: Megatron-LM's "[0]*3+[1]*29" as the list it evaluates to.
  planner::Plan prefixed = make_plan("mixtral-8x7b", "dgx-h100", moe);
  prefixed.model.first_dense_layers = 3;
  const std::string script = emit_megatron_bridge(prefixed);
  overrides = bridge_overrides(script);
  std::string expected = "[0,0,0";
  for (int layer = 3; layer < prefixed.model.num_layers; ++layer) {
    expected += ",1";
  }
  CHECK(overrides.at("model.moe_layer_freq") == expected + "]");
  // Quoted for bash, whose globbing would read the brackets.
  CHECK(script.find("  'model.moe_layer_freq=[0,0,0,1,") != std::string::npos);
}

TEST_CASE("--emit megatron-bridge: every --emit megatron flag has its override") {
  // The same plans through both writers: each Megatron-LM value flag's value reappears under its
  // ConfigContainer key (the mapping restated here from TransformerConfig's field names).
  const std::map<std::string, std::string> same_value = {
      {"--tensor-model-parallel-size", "model.tensor_model_parallel_size"},
      {"--pipeline-model-parallel-size", "model.pipeline_model_parallel_size"},
      {"--recompute-granularity", "model.recompute_granularity"},
      {"--recompute-method", "model.recompute_method"},
      {"--recompute-num-layers", "model.recompute_num_layers"},
      {"--ddp-bucket-size", "ddp.bucket_size"},
      {"--micro-batch-size", "train.micro_batch_size"},
      {"--global-batch-size", "train.global_batch_size"},
      {"--num-layers", "model.num_layers"},
      {"--hidden-size", "model.hidden_size"},
      {"--num-attention-heads", "model.num_attention_heads"},
      {"--num-query-groups", "model.num_query_groups"},
      {"--ffn-hidden-size", "model.ffn_hidden_size"},
      {"--rotary-base", "model.rotary_base"},
      {"--rope-scaling-factor", "model.rope_scaling_factor"},
      {"--rotary-seq-len-interpolation-factor", "model.seq_len_interpolation_factor"},
      {"--seq-length", "dataset.seq_length"},
      {"--vocab-size", "tokenizer.vocab_size"},
      {"--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by"},
      {"--num-experts", "model.num_moe_experts"},
      {"--moe-router-topk", "model.moe_router_topk"},
      {"--moe-ffn-hidden-size", "model.moe_ffn_hidden_size"},
      {"--expert-model-parallel-size", "model.expert_model_parallel_size"}};
  planner::Layout moe;
  moe.tp = 2;
  moe.dp = 8;
  moe.ep = 8;
  moe.sequence_parallel = true;
  moe.global_batch = 64;
  moe.zero = 1;
  moe.recompute = planner::Recompute::kFull;
  for (const planner::Plan& plan :
       {llama70b_interleaved_plan(), make_plan("mixtral-8x7b", "dgx-h100", moe)}) {
    const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
    const std::map<std::string, std::string> overrides =
        bridge_overrides(emit_megatron_bridge(plan));
    for (const auto& entry : same_value) {  // clang 14: no bindings in CHECK's lambda
      if (flags.count(entry.first) != 0) {
        CHECK_MESSAGE(overrides.at(entry.second) == flags.at(entry.first), entry.first);
      }
    }
  }
}

TEST_CASE("--emit megatron-bridge: uneven stages, a layout string, recompute modules") {
  planner::Plan plan = llama70b_interleaved_plan();
  plan.layout.schedule = planner::ScheduleKind::kOneFOneB;
  plan.layout.vpp = 1;
  plan.layout.stage_layers = {19, 21, 21, 19};
  std::map<std::string, std::string> overrides = bridge_overrides(emit_megatron_bridge(plan));
  CHECK(overrides.at("model.num_layers_in_first_pipeline_stage") == "19");
  CHECK(overrides.at("model.num_layers_in_last_pipeline_stage") == "19");
  CHECK(overrides.count("model.pipeline_model_parallel_layout") == 0);
  // Unequal middle stages go out as Megatron-Core's layout string, quoted for Hydra and bash.
  plan.layout.stage_layers = {19, 20, 22, 19};
  const std::string script = emit_megatron_bridge(plan);
  overrides = bridge_overrides(script);
  const std::string layout = planner::format_pipeline_layout(plan.model, plan.layout);
  CHECK(overrides.at("model.pipeline_model_parallel_layout") == "\"" + layout + "\"");
  CHECK(overrides.count("model.num_layers_in_first_pipeline_stage") == 0);
  CHECK(script.find("  'model.pipeline_model_parallel_layout=\"" + layout + "\"' \\\n") !=
        std::string::npos);

  planner::Plan selective = llama70b_interleaved_plan();
  selective.layout.recompute = planner::Recompute::kSelective;
  selective.layout.recompute_modules = planner::kRecomputeCoreAttn | planner::kRecomputeLayernorm;
  overrides = bridge_overrides(emit_megatron_bridge(selective));
  check_keys_exist(overrides);
  CHECK(overrides.at("model.recompute_granularity") == "selective");
  CHECK(overrides.at("model.recompute_modules") == "[core_attn,layernorm]");
}

TEST_CASE("--emit megatron-bridge: FP8 as the delayed-scaling preset") {
  planner::Plan plan = llama70b_interleaved_plan();
  plan.options.gemm_precision = planner::GemmPrecision::kFp8;
  plan.options.fp8_param_gather = true;
  CHECK(bridge_overrides(emit_megatron_bridge(plan)).at("mixed_precision") ==
        "bf16_with_fp8_delayed_scaling_mixed");
  plan.options.fp8_param_gather = false;
  CHECK(error_of(plan, kBridge) ==
        "--emit megatron-bridge: options.fp8_param_gather: Megatron-Bridge's delayed-scaling "
        "preset (bf16_with_fp8_delayed_scaling_mixed) gathers FP8 parameters; re-plan with "
        "--fp8-param-gather on (off)");
  plan.options.fp8_param_gather = true;
  plan.options.fp8_recipe = planner::Fp8Recipe::kTensorwise;
  CHECK(error_of(plan, kBridge) ==
        "--emit megatron-bridge: options.fp8_recipe: Megatron-Bridge's tensorwise preset "
        "(bf16_with_fp8_current_scaling_mixed) keeps the first and last transformer layers in "
        "bf16, which the plan costs in FP8 (tensorwise)");
}

TEST_CASE("--emit megatron-bridge refuses what the vanilla recipe cannot be told") {
  const planner::Plan base = llama70b_interleaved_plan();
  planner::Plan bf16_reduce = base;
  bf16_reduce.options.grad_reduce_dtype = planner::GradReduceDtype::kBf16;
  CHECK(error_of(bf16_reduce, kBridge) ==
        "--emit megatron-bridge: options.grad_reduce_dtype: Megatron-Bridge's bf16_mixed preset "
        "reduces gradients in fp32 (mixed_precision.py: grad_reduce_in_fp32=True, copied into "
        "ddp. after the overrides) (bf16)");
  planner::Plan tp_overlap = base;
  tp_overlap.options.overlap_tp_comm = true;
  CHECK(error_of(tp_overlap, kBridge).find("--emit megatron-bridge: options.overlap_tp_comm: ") ==
        0);
  planner::Plan unfused = base;
  unfused.options.flash_attention = false;
  CHECK(error_of(unfused, kBridge).find("--emit megatron-bridge: options.flash_attention: ") == 0);
  planner::Layout fsdp;
  fsdp.dp = 8;
  fsdp.global_batch = 64;
  fsdp.zero = 3;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", fsdp), kBridge) ==
        "--emit megatron-bridge: layout.zero: Megatron-Bridge's bf16_mixed preset sets "
        "ddp.grad_reduce_in_fp32, so Megatron-FSDP would keep fp32 gradients where the plan "
        "costs bf16 (mixed_precision.py) (optim_grads_params)");
  planner::Layout one;
  one.dp = 8;
  one.global_batch = 64;
  CHECK(error_of(make_plan("tiny-mla", "dgx-h100", one), kBridge)
            .find("--emit megatron-bridge: model.kv_lora_rank: vanilla_gpt_pretrain_config "
                  "builds a GPTModelProvider") == 0);
  CHECK(error_of(make_plan("mistral-7b", "dgx-h100", one), kBridge)
            .find("--emit megatron-bridge: model.sliding_window: ") == 0);
  // Megatron-LM's own refusals come named for this target.
  planner::Plan op = base;
  op.layout.recompute = planner::Recompute::kSelectiveOp;
  CHECK(error_of(op, kBridge).find("--emit megatron-bridge: layout.recompute: ") == 0);
  // Only plans costed for megatron.
  planner::Plan other = costed_for(base, planner::Framework::kDeepSpeed);
  try {
    emit_megatron_bridge(other);
    FAIL("a deepspeed plan was emitted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "--emit megatron-bridge: options.framework: the plan was costed for deepspeed; re-plan "
          "with --framework megatron to emit it for megatron-bridge (deepspeed)");
  }
}

}  // namespace
}  // namespace meshplan::reports
