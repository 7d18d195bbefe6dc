// plan --emit: each launch config parsed back (flags into a map, TOML through a parser of the
// subset emitted, JSON through nlohmann, sbatch directives) and every value checked against the
// plan's fields. Flag and key names are checked against each framework's own parser source:
//   Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM fd0df7d3): every emitted flag
//     must be in tests/data/emit/megatron_arguments_flags.txt, the list extracted from that file;
//   torchtitan torchtitan/config/job_config.py (pytorch/torchtitan e347b1e5): kTorchtitanKeys;
//   DeepSpeed deepspeed/runtime/constants.py, zero/config.py, config.py get_pipeline_config
//     (microsoft/DeepSpeed 38327e07): the key sets in the DeepSpeed test.
#include "meshplan/emit.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "emit_test_support.h"
#include "meshplan/pipeline_layout.h"

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

// Megatron's 7.5B GPT on 8 H100 at tp 2, dp 4 with the distributed optimizer (zero 1).
planner::Plan tp2_dp4_distributed_optimizer_plan() {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.micro_batch = 1;
  layout.global_batch = 64;
  layout.zero = 1;
  return make_plan("megatron-7.5b", "dgx-h100", layout);
}

// One virtual stage's module list as torchtitan names the llama3 modules: layers [first, end),
// tok_embeddings before them on the first stage, norm and output after them on the last.
std::string toml_modules(int64_t first, int64_t end, bool with_embedding, bool with_head) {
  std::vector<std::string> names;
  if (with_embedding) {
    names.emplace_back("\"tok_embeddings\"");
  }
  for (int64_t layer = first; layer < end; ++layer) {
    names.push_back("\"layers." + std::to_string(layer) + "\"");
  }
  if (with_head) {
    names.emplace_back("\"norm\"");
    names.emplace_back("\"output\"");
  }
  std::string joined;
  for (const std::string& name : names) {
    joined += (joined.empty() ? "" : ", ") + name;
  }
  return "[" + joined + "]";
}

TEST_CASE("--emit megatron: Llama-3 70B, interleaved, full recompute, distributed optimizer") {
  planner::Layout layout;
  layout.tp = 8;
  layout.pp = 4;
  layout.dp = 16;
  layout.vpp = 2;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  layout.micro_batch = 1;
  layout.global_batch = 512;  // 32 micro-batches per pipeline, a multiple of pp
  layout.recompute = planner::Recompute::kFull;
  layout.sequence_parallel = true;
  layout.zero = 1;
  const planner::Plan plan = make_plan("llama3-70b", "dgx-h100", layout);
  const std::string script = emit_megatron(plan);
  CHECK(script.find("torchrun --nnodes 64 --nproc-per-node 8 ") != std::string::npos);  // 512/8
  // arguments.py asserts it for tp > 1 before Blackwell, set before torchrun starts the ranks.
  CHECK(script.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun ") != std::string::npos);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  const std::map<std::string, std::string> expected = {
      {"--tensor-model-parallel-size", "8"},
      {"--pipeline-model-parallel-size", "4"},
      {"--num-layers-per-virtual-pipeline-stage", "10"},  // 80 layers / (pp 4 * vpp 2)
      {"--sequence-parallel", ""},
      {"--recompute-granularity", "full"},
      {"--recompute-method", "uniform"},
      {"--recompute-num-layers", "1"},
      {"--use-distributed-optimizer", ""},
      {"--overlap-grad-reduce", ""},
      {"--overlap-param-gather", ""},
      {"--no-overlap-p2p-communication", ""},  // PlanOptions' overlap_p2p_comm is off here
      // Megatron-Core's default, max(40,000,000, 1,000,000 x dp 16) parameters.
      {"--ddp-bucket-size", "40000000"},
      {"--micro-batch-size", "1"},
      {"--global-batch-size", "512"},
      {"--num-layers", "80"},  // Dubey et al. 2024, Table 3 (70B)
      {"--hidden-size", "8192"},
      {"--num-attention-heads", "64"},
      {"--group-query-attention", ""},
      {"--num-query-groups", "8"},
      {"--ffn-hidden-size", "28672"},
      {"--seq-length", "8192"},
      {"--max-position-embeddings", "8192"},  // rope: the planned length
      {"--position-embedding-type", "rope"},
      {"--rotary-base", "500000"},  // Dubey et al. 2024, Table 3: RoPE base 500,000
      // Llama 3.1's frequency bands (the preset's rope_scaling; Megatron-Core fixes the bands).
      {"--use-rope-scaling", ""},
      {"--rope-scaling-factor", "8"},
      {"--normalization", "RMSNorm"},
      {"--swiglu", ""},
      {"--untie-embeddings-and-output-weights", ""},
      {"--disable-bias-linear", ""},
      {"--attention-dropout", "0"},
      {"--hidden-dropout", "0"},
      {"--vocab-size", "128256"},
      {"--make-vocab-size-divisible-by", "128"},  // megatron's default divisor, as costed
      {"--attention-backend", "auto"},            // Transformer Engine's fused attention
      {"--bf16", ""}};
  CHECK(flags == expected);
  // Against the plan's own fields too, so the literals above cannot drift from the presets.
  CHECK(flags.at("--num-layers") == std::to_string(plan.model.num_layers));
  CHECK(flags.at("--ffn-hidden-size") == std::to_string(plan.model.ffn_hidden_size));
  CHECK(flags.at("--global-batch-size") == std::to_string(plan.layout.global_batch));
  const std::set<std::string> parser = megatron_parser_flags();
  REQUIRE(parser.size() > 500);      // the list is there (564 names at fd0df7d3)
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, flag << " is not a Megatron-LM argument");
  }
  // On is Megatron-LM's default for interleaved schedules (no flag); 1F1B takes none either way.
  planner::Plan overlapped = plan;
  overlapped.options.overlap_p2p_comm = true;
  CHECK(megatron_flags(emit_megatron(overlapped)).count("--no-overlap-p2p-communication") == 0);
  planner::Plan one_f_one_b = plan;
  one_f_one_b.layout.schedule = planner::ScheduleKind::kOneFOneB;
  one_f_one_b.layout.vpp = 1;
  CHECK(megatron_flags(emit_megatron(one_f_one_b)).count("--no-overlap-p2p-communication") == 0);
}

TEST_CASE("--emit megatron: GPT-3 1.3B, learned positions, LayerNorm, GELU, biases, tied") {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.micro_batch = 4;
  layout.global_batch = 64;
  layout.recompute = planner::Recompute::kSelective;
  const planner::Plan plan = make_plan("gpt3-1.3b", "dgx-a100-80gb", layout);
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--recompute-granularity") == "selective");
  CHECK(flags.count("--recompute-method") == 0);
  CHECK(flags.at("--position-embedding-type") == "learned_absolute");
  CHECK(flags.at("--max-position-embeddings") == "2048");  // Brown et al. 2020: n_ctx 2048
  CHECK(flags.at("--normalization") == "LayerNorm");
  CHECK(flags.at("--hidden-size") == "2048");  // Brown et al. 2020, Table 2.1 (XL, 1.3B)
  CHECK(flags.at("--num-attention-heads") == std::to_string(plan.model.num_attention_heads));
  for (const char* absent :
       {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
        "--group-query-attention", "--use-distributed-optimizer", "--overlap-param-gather",
        "--num-layers-per-virtual-pipeline-stage", "--sequence-parallel", "--attention-dropout",
        "--rotary-base"}) {
    CHECK_MESSAGE(flags.count(absent) == 0, absent);
  }
  const std::set<std::string> parser = megatron_parser_flags();
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, flag << " is not a Megatron-LM argument");
  }
}

TEST_CASE("--emit: the model's rope base in each Megatron target; a fractional one refused") {
  planner::Layout layout;
  layout.dp = 8;
  layout.global_batch = 16;
  layout.zero = 1;
  planner::Plan plan = make_plan("llama2-7b", "dgx-h100", layout);
  plan.model.rope_theta = 1e6;  // as Code Llama's (Roziere et al. 2023, Sec. 2.4)
  const auto flags_for = [&](EmitTarget target) {
    planner::Plan costed = plan;
    costed.options.framework = *target_framework(target);
    return megatron_flags(emit_launch_config(costed, target, ""));
  };
  CHECK(flags_for(EmitTarget::kMegatron).at("--rotary-base") == "1000000");
  CHECK(flags_for(EmitTarget::kMegatronDeepSpeed).at("--rotary-position-embeddings-theta") ==
        "1000000");
  planner::Plan bridge = plan;
  bridge.options.grad_reduce_dtype = planner::GradReduceDtype::kFp32;
  const std::string script = emit_launch_config(bridge, EmitTarget::kMegatronBridge, "");
  CHECK(script.find("  model.rotary_base=1000000 \\\n") != std::string::npos);
  plan.model.rope_theta = 10000.5;
  for (const EmitTarget target :
       {EmitTarget::kMegatron, EmitTarget::kMegatronBridge, EmitTarget::kMegatronDeepSpeed}) {
    CAPTURE(to_string(target));
    CHECK(error_of(plan, target) ==
          fmt::format("--emit {}: model.rope_theta: the rotary base is an integer flag in "
                      "Megatron-LM and Megatron-DeepSpeed (arguments.py type=int) (10000.5)",
                      to_string(target)));
  }
}

TEST_CASE("--emit: a second rope base for the sliding layers is refused by every target") {
  planner::Layout layout;
  layout.dp = 8;
  layout.global_batch = 16;
  layout.zero = 1;
  planner::Plan plan = make_plan("llama2-7b", "dgx-h100", layout);
  // Gemma 3's bases (Gemma Team 2025, Sec. 2.2) on a window that covers the sequence, so no
  // target refuses the window first: the base is what is refused.
  plan.model.rope_theta = 1e6;
  plan.model.sliding_window = plan.model.seq_length;
  plan.model.window_attn_skip_freq = 6;
  plan.model.rope_local_theta = 10000.0;
  for (const EmitTarget target :
       {EmitTarget::kMegatron, EmitTarget::kMegatronBridge, EmitTarget::kMegatronDeepSpeed}) {
    CAPTURE(to_string(target));
    CHECK(error_of(plan, target) ==
          fmt::format("--emit {}: model.rope_local_theta: the sliding layers turn by a base of "
                      "their own, the others by rope_theta 1000000; Megatron-LM's --rotary-base "
                      "gives every layer one base (10000)",
                      to_string(target)));
  }
  // torchtitan's llama3 flavors have one base: the model matches none.
  planner::Layout fsdp = layout;
  fsdp.zero = 3;
  planner::Plan titan = make_plan("llama3-8b", "dgx-h100", fsdp);
  titan.model.sliding_window = titan.model.seq_length;
  titan.model.window_attn_skip_freq = 6;
  titan.model.rope_local_theta = 10000.0;
  CHECK(error_of(titan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model: torchtitan selects a model by flavor; none of llama3 8B, 70B, "
        "405B has this shape (llama3-8b)");
}

TEST_CASE("--emit megatron: Gemma's (1 + weight) RMSNorm is --apply-layernorm-1p") {
  planner::Layout layout;
  layout.dp = 8;
  layout.global_batch = 16;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  CHECK(megatron_flags(emit_megatron(plan)).count("--apply-layernorm-1p") == 0);
  plan.model.norm_unit_offset = true;  // TransformerConfig.layernorm_zero_centered_gamma
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--apply-layernorm-1p") == 1);
  CHECK(megatron_parser_flags().count("--apply-layernorm-1p") == 1);
}

TEST_CASE("--emit megatron: FP8 with --fp8-param-gather on the distributed optimizer") {
  planner::Plan plan = tp2_dp4_distributed_optimizer_plan();
  plan.options.gemm_precision = planner::GemmPrecision::kFp8;
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  // TE delayed scaling with the 1024-entry amax history meshplan's memory counts.
  CHECK(flags.at("--fp8-format") == "hybrid");
  CHECK(flags.at("--fp8-amax-history-len") == "1024");
  CHECK(flags.at("--fp8-amax-compute-algo") == "max");
  CHECK(flags.count("--fp8-param-gather") == 0);
  plan.options.fp8_param_gather = true;
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--fp8-param-gather").empty());
  CHECK(flags.count("--use-distributed-optimizer") == 1);  // arguments.py requires it
  const std::set<std::string> parser = megatron_parser_flags();
  for (const auto& entry : flags) {
    CHECK_MESSAGE(parser.count(entry.first) == 1, entry.first << " is not a Megatron-LM argument");
  }
  // Current scaling: --fp8-recipe tensorwise, no amax history.
  plan.options.fp8_recipe = planner::Fp8Recipe::kTensorwise;
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--fp8-format") == "hybrid");
  CHECK(flags.at("--fp8-recipe") == "tensorwise");
  CHECK(flags.count("--fp8-amax-history-len") == 0);
  CHECK(parser.count("--fp8-recipe") == 1);
}

TEST_CASE("--emit megatron: --grad-reduce-in-bf16 when the plan reduces gradients in bf16") {
  planner::Plan plan = tp2_dp4_distributed_optimizer_plan();
  // Unset: Megatron's --bf16 default, fp32, needs no flag; the bucket counts fp32 elements.
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--grad-reduce-in-bf16") == 0);
  // max(40M, 1M x dp 4) parameters: 160,000,000 bytes of fp32 gradients / 4 bytes.
  CHECK(flags.at("--ddp-bucket-size") == "40000000");
  plan.options.grad_reduce_dtype = planner::GradReduceDtype::kFp32;
  CHECK(megatron_flags(emit_megatron(plan)).count("--grad-reduce-in-bf16") == 0);
  plan.options.grad_reduce_dtype = planner::GradReduceDtype::kBf16;
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--grad-reduce-in-bf16").empty());
  CHECK(flags.at("--ddp-bucket-size") == "40000000");  // 80,000,000 bytes of bf16 / 2 bytes
  plan.options.bucket_bytes = 25 * 1024 * 1024;        // a stated bucket wins
  CHECK(megatron_flags(emit_megatron(plan)).at("--ddp-bucket-size") == "13107200");  // / 2 B
  const std::set<std::string> parser = megatron_parser_flags();
  CHECK(parser.count("--grad-reduce-in-bf16") == 1);
}

TEST_CASE("--emit megatron: Megatron-FSDP with pp > 1 carries the plan's caveat") {
  // The Llama-3 70B layout above with ZeRO 2 (Megatron-FSDP optim_grads) over pp 4: emitted,
  // with the caveat `plan` prints under its row (planner::framework_caveat); ZeRO 1 has none.
  planner::Layout layout;
  layout.tp = 8;
  layout.pp = 4;
  layout.dp = 16;
  layout.micro_batch = 1;
  layout.global_batch = 512;
  layout.sequence_parallel = true;
  layout.zero = 2;
  planner::Plan plan = make_plan("llama3-70b", "dgx-h100", layout);
  const std::string script = emit_megatron(plan);
  CHECK(script.find("# caveat: Megatron-FSDP with pp > 1: ") != std::string::npos);
  CHECK(megatron_flags(script).at("--data-parallel-sharding-strategy") == "optim_grads");
  plan.layout.zero = 1;
  CHECK(emit_megatron(plan).find("caveat") == std::string::npos);
}

TEST_CASE("--emit megatron refuses what Megatron-LM cannot run") {
  planner::Layout layout;
  layout.pp = 2;
  layout.dp = 4;
  layout.global_batch = 64;
  layout.schedule = planner::ScheduleKind::kZbH1;
  const planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  CHECK(error_of(plan, EmitTarget::kMegatron) ==
        "--emit megatron: layout: megatron cannot run this layout: Megatron-Core schedules.py has "
        "1F1B and interleaved 1F1B, no zb-h1 (" +
            planner::describe(layout) + ")");
  planner::Layout zero1;
  zero1.dp = 8;
  zero1.global_batch = 16;
  zero1.zero = 1;
  planner::Plan no_overlap = make_plan("llama3-8b", "dgx-h100", zero1);
  no_overlap.options.overlap_grad_reduce = false;
  CHECK(error_of(no_overlap, EmitTarget::kMegatron) ==
        "--emit megatron: options.overlap_param_gather: Megatron-LM overlaps the parameter gather "
        "only with --overlap-grad-reduce (on, overlap_grad_reduce off)");
  planner::Layout uneven;
  uneven.dp = 12;
  uneven.global_batch = 24;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", uneven), EmitTarget::kMegatron) ==
        "--emit megatron: num_gpus: the launcher starts the same number of ranks on every node of "
        "8 (12)");
  planner::Layout dense;
  dense.dp = 8;
  dense.global_batch = 16;
  planner::Plan neox_style = make_plan("gpt3-1.3b", "dgx-h100", dense);
  neox_style.model.parallel_residual = true;
  CHECK(error_of(neox_style, EmitTarget::kMegatron) ==
        "--emit megatron: model.parallel_residual: Megatron-Core's TransformerLayer runs the "
        "attention and then the MLP, not in parallel (true)");
  planner::Plan geglu = make_plan("llama3-8b", "dgx-h100", dense);
  geglu.model.activation = models::Activation::kGeglu;
  CHECK(error_of(geglu, EmitTarget::kMegatron) ==
        "--emit megatron: model.activation: Megatron-LM has no flag for a tanh-GELU-gated MLP "
        "(--swiglu gates with SiLU, --quick-geglu with x sigmoid(1.702 x)) (geglu)");
  planner::Plan scaled = make_plan("llama3-8b", "dgx-h100", dense);
  scaled.model.scale_embeddings = true;
  CHECK(error_of(scaled, EmitTarget::kMegatron) ==
        "--emit megatron: model.scale_embeddings: Megatron-LM has no flag to scale the embeddings "
        "by sqrt(h) (Megatron-Bridge's EmbeddingScalingMixin does it in Python) (true)");
  planner::Plan sandwich = make_plan("llama3-8b", "dgx-h100", dense);
  sandwich.model.sandwich_norm = true;
  CHECK(error_of(sandwich, EmitTarget::kMegatron) ==
        "--emit megatron: model.sandwich_norm: Megatron-Core's TransformerLayer has no "
        "post-attention and post-MLP norms (true)");
  planner::Plan capped = make_plan("llama3-8b", "dgx-h100", dense);
  capped.model.final_logit_softcapping = 30.0;  // Gemma 2's
  CHECK(error_of(capped, EmitTarget::kMegatron) ==
        "--emit megatron: model.final_logit_softcapping: Megatron-LM has no flag for Gemma 2's "
        "logit soft-capping (30)");
  capped.model.attn_logit_softcapping = 50.0;
  CHECK(error_of(capped, EmitTarget::kMegatron) ==
        "--emit megatron: model.attn_logit_softcapping: Megatron-LM has no flag for Gemma 2's "
        "logit soft-capping (50)");
  planner::Plan scaled_attention = make_plan("llama3-8b", "dgx-h100", dense);
  scaled_attention.model.query_pre_attn_scalar = 144.0;  // gemma-2-27b's, llama3-8b's head_dim 128
  CHECK(error_of(scaled_attention, EmitTarget::kMegatron) ==
        "--emit megatron: model.query_pre_attn_scalar: Megatron-LM has no flag for an attention "
        "scale other than 1/sqrt(kv_channels) (144 != head_dim 128)");
  scaled_attention.model.query_pre_attn_scalar = 128.0;  // = head_dim: the usual scale, no refusal
  CHECK(error_of(scaled_attention, EmitTarget::kMegatron) == "(no error)");
}

TEST_CASE("--emit megatron: Llama 3 405B's uneven stages interleaved") {
  // Dubey et al. 2024, Sec. 3.3.2: 126 layers on pp 16, first and last stage one layer short,
  // the first chunk holding only the embedding, the last only the LM head and loss: Megatron-
  // Core's --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split.
  // arguments.py derives vpp = (126 + 1 + 1) / pp 16 / layers per virtual stage.
  planner::Layout layout;
  layout.tp = 8;
  layout.pp = 16;
  layout.dp = 64;
  layout.vpp = 8;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  layout.sequence_parallel = true;
  layout.zero = 1;
  layout.global_batch = 2048;
  layout.stage_layers = std::vector<int64_t>(16, 8);
  layout.stage_layers.front() = 7;
  layout.stage_layers.back() = 7;
  const planner::Plan plan = make_plan("llama3-405b", "dgx-h100", layout);
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--account-for-embedding-in-pipeline-split") == 1);
  CHECK(flags.count("--account-for-loss-in-pipeline-split") == 1);
  const int64_t per_virtual_stage = std::stoll(flags.at("--num-layers-per-virtual-pipeline-stage"));
  CHECK((plan.model.num_layers + 2) / layout.pp / per_virtual_stage == layout.vpp);
  // Megatron-Core asserts the accounted split and first/last counts exclude each other.
  CHECK(flags.count("--decoder-first-pipeline-num-layers") == 0);
  CHECK(flags.count("--decoder-last-pipeline-num-layers") == 0);
  const std::set<std::string> parser = megatron_parser_flags();
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    CHECK_MESSAGE(parser.count(entry.first) == 1, entry.first << " is not a Megatron-LM argument");
  }
  // 8x15/6 with vpp 2 divides every stage: first/last counts, vpp given directly (arguments.py
  // refuses --num-layers-per-virtual-pipeline-stage with uneven first/last stages).
  planner::Layout divisible = layout;
  divisible.vpp = 2;
  divisible.stage_layers = std::vector<int64_t>(16, 8);
  divisible.stage_layers.back() = 6;
  flags = megatron_flags(emit_megatron(make_plan("llama3-405b", "dgx-h100", divisible)));
  CHECK(flags.at("--num-virtual-stages-per-pipeline-rank") == "2");
  CHECK(flags.at("--decoder-last-pipeline-num-layers") == "6");
  CHECK(flags.count("--num-layers-per-virtual-pipeline-stage") == 0);
  CHECK(flags.count("--account-for-embedding-in-pipeline-split") == 0);
  // The search's memory-shifted split (planner memory_shifted_splits) has no first/last or
  // accounted form: Megatron-Core's --pipeline-model-parallel-layout, virtual stages v = 16 c + s
  // in order. Expanding it as parse_str_to_list does ("t*n" -> n t's) gives 128 stages, E first,
  // L last, 126 t's, and each stage's count stage_layer_range's.
  planner::Layout shifted = layout;
  shifted.stage_layers = {7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 8};
  const planner::Plan shifted_plan = make_plan("llama3-405b", "dgx-h100", shifted);
  flags = megatron_flags(emit_megatron(shifted_plan));
  for (const char* absent :
       {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
        "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
        "--account-for-embedding-in-pipeline-split"}) {
    CHECK_MESSAGE(flags.count(absent) == 0, absent);
  }
  std::string text = flags.at("--pipeline-model-parallel-layout");
  REQUIRE(text.size() > 2);
  CHECK(text.front() == '"');
  CHECK(text.back() == '"');
  text = text.substr(1, text.size() - 2);
  CHECK(text.front() == 'E');
  CHECK(text.back() == 'L');
  // Read back by the planner's parser of Megatron-Core's grammar (tested by hand in
  // tests/planner/pipeline_layout_test.cpp, and against a Python copy of parse_str_to_list in
  // tests/cli/emit_cli_test.sh).
  const std::vector<int64_t> counts =
      planner::parse_pipeline_layout(shifted_plan.model, 16, text, "layout");
  REQUIRE(counts.size() == 128);
  for (size_t v = 0; v < counts.size(); ++v) {
    CAPTURE(v);
    CHECK(counts[v] ==
          planner::stage_layer_range(shifted_plan.model, shifted, v % 16, v / 16).count());
  }
  CHECK(counts[1] == 0);    // stage 1, chunk 0: the layer taken off
  CHECK(counts[124] == 2);  // stage 12, chunk 7: the layer put on
}

TEST_CASE("--emit megatron: Mixtral 8x7B expert parallelism, Llama-3 8B context parallelism") {
  planner::Layout moe;
  moe.tp = 2;
  moe.dp = 8;
  moe.ep = 8;
  moe.sequence_parallel = true;
  moe.global_batch = 64;
  const planner::Plan mixtral = make_plan("mixtral-8x7b", "dgx-h100", moe);
  const std::string script = emit_megatron(mixtral);
  const std::map<std::string, std::string> flags = megatron_flags(script);
  const std::set<std::string> parser = megatron_parser_flags();
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, "not a Megatron-LM flag: " << flag);
  }
  // Mixtral-8x7B's config.json: num_local_experts 8, num_experts_per_tok 2,
  // intermediate_size 14336 (each expert's width); no shared experts.
  CHECK(flags.at("--expert-model-parallel-size") == "8");
  CHECK(flags.at("--num-experts") == "8");
  CHECK(flags.at("--moe-router-topk") == "2");
  CHECK(flags.at("--moe-ffn-hidden-size") == "14336");
  CHECK(flags.at("--moe-token-dispatcher-type") == "alltoall");
  CHECK(flags.count("--moe-grouped-gemm") == 1);
  CHECK(flags.count("--moe-shared-expert-intermediate-size") == 0);
  CHECK(flags.count("--context-parallel-size") == 0);
  // etp = tp is Megatron's default (arguments.py): no flag; etp 1 is written.
  CHECK(flags.count("--expert-tensor-parallel-size") == 0);
  planner::Plan folded = mixtral;
  planner::set_expert_tensor_parallel(folded.layout, 1);
  const std::map<std::string, std::string> folded_flags = megatron_flags(emit_megatron(folded));
  CHECK(folded_flags.at("--expert-tensor-parallel-size") == "1");
  CHECK(folded_flags.at("--tensor-model-parallel-size") == "2");
  CHECK(parser.count("--expert-tensor-parallel-size") == 1);

  // overlap_moe_expert_parallel_comm: the flag, and more than one hardware queue so the
  // all-to-all stream runs beside compute (arguments.py warns instead of asserting 1 with it).
  CHECK(script.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n") != std::string::npos);
  CHECK(flags.count("--overlap-moe-expert-parallel-comm") == 0);
  planner::Plan merged = mixtral;
  merged.options.overlap_moe_expert_parallel_comm = true;
  const std::string merged_script = emit_megatron(merged);
  CHECK(megatron_flags(merged_script).count("--overlap-moe-expert-parallel-comm") == 1);
  CHECK(megatron_flags(merged_script).count("--delay-wgrad-compute") == 0);
  CHECK(merged_script.find("export CUDA_DEVICE_MAX_CONNECTIONS=32\n") != std::string::npos);
  CHECK(merged_script.find("CUDA_DEVICE_MAX_CONNECTIONS=1") == std::string::npos);
  merged.options.delay_wgrad_compute = true;
  CHECK(megatron_flags(emit_megatron(merged)).count("--delay-wgrad-compute") == 1);

  planner::Layout cp;
  cp.tp = 2;
  cp.cp = 4;
  cp.dp = 2;
  cp.global_batch = 16;
  planner::Plan llama = make_plan("llama3-8b", "dgx-h100", cp);
  std::map<std::string, std::string> cp_flags = megatron_flags(emit_megatron(llama));
  CHECK(cp_flags.at("--context-parallel-size") == "4");
  CHECK(cp_flags.count("--cp-comm-type") == 0);  // p2p is Megatron-Core's default
  CHECK(cp_flags.count("--expert-model-parallel-size") == 0);
  CHECK(cp_flags.count("--num-experts") == 0);
  llama.options.cp_comm = planner::CpComm::kA2a;
  cp_flags = megatron_flags(emit_megatron(llama));
  CHECK(cp_flags.at("--cp-comm-type") == "a2a");
  for (const auto& entry : cp_flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, "not a Megatron-LM flag: " << flag);
  }
}

TEST_CASE("--emit megatron: DeepSeek-V3's latent attention, dense prefix, router and MTP") {
  const std::set<std::string> parser = megatron_parser_flags();
  planner::Layout dsv3;
  dsv3.tp = 2;
  dsv3.pp = 1;
  dsv3.dp = 32;
  dsv3.ep = 32;
  dsv3.etp = 1;
  dsv3.sequence_parallel = true;  // Megatron-LM's MoE at tp > 1
  dsv3.global_batch = 32;
  planner::Plan plan = make_plan("deepseek-v3", "dgx-h100", dsv3);
  plan.model.mtp_num_layers = 1;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  const models::TransformerConfig& m = plan.model;
  // MLA as Megatron-Bridge's DeepSeekV3Provider sets it: q 1536, kv 512, qk 128 + 64, v 128,
  // the latent norms through --qk-layernorm, no --kv-channels or grouped-query flags.
  CHECK(flags.count("--multi-latent-attention") == 1);
  CHECK(flags.at("--q-lora-rank") == std::to_string(m.q_lora_rank));
  CHECK(flags.at("--q-lora-rank") == "1536");
  CHECK(flags.at("--kv-lora-rank") == "512");
  CHECK(flags.at("--qk-head-dim") == std::to_string(m.qk_nope_head_dim));
  CHECK(flags.at("--qk-pos-emb-head-dim") == std::to_string(m.qk_rope_head_dim));
  CHECK(flags.at("--v-head-dim") == std::to_string(m.v_head_dim));
  CHECK(flags.count("--qk-layernorm") == 1);
  CHECK(flags.count("--kv-channels") == 0);
  CHECK(flags.count("--group-query-attention") == 0);
  // The dense prefix: a pattern of num_layers entries, 3 dense then 58 MoE.
  CHECK(flags.at("--moe-layer-freq") == "\"[0]*3+[1]*58\"");
  CHECK(m.first_dense_layers + m.num_moe_layers() == m.num_layers);
  // The biased sigmoid router and node-limited routing (8 groups, 4 per token).
  CHECK(flags.at("--moe-router-score-function") == "sigmoid");
  CHECK(flags.count("--moe-router-enable-expert-bias") == 1);
  CHECK(flags.at("--moe-router-num-groups") == std::to_string(m.router_num_groups));
  CHECK(flags.at("--moe-router-group-topk") == std::to_string(m.router_group_topk));
  CHECK(flags.at("--moe-router-num-groups") == "8");
  CHECK(flags.at("--moe-router-group-topk") == "4");
  CHECK(flags.at("--num-experts") == "256");
  CHECK(flags.at("--moe-router-topk") == "8");
  CHECK(flags.at("--moe-shared-expert-intermediate-size") == "2048");
  CHECK(flags.at("--mtp-num-layers") == "1");
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    CHECK_MESSAGE(parser.count(entry.first) == 1, "not a Megatron-LM flag: " << entry.first);
  }
  // Without routing groups or a score bias (Mixtral's router) none of the router flags.
  planner::Layout moe;
  moe.tp = 1;
  moe.dp = 8;
  moe.ep = 8;
  moe.global_batch = 8;
  const std::map<std::string, std::string> mixtral =
      megatron_flags(emit_megatron(make_plan("mixtral-8x7b", "dgx-h100", moe)));
  CHECK(mixtral.count("--moe-router-score-function") == 0);
  CHECK(mixtral.count("--moe-router-num-groups") == 0);
  CHECK(mixtral.count("--moe-layer-freq") == 0);
  CHECK(mixtral.count("--multi-latent-attention") == 0);
  // MoE every other layer goes out as the list (arguments.py moe_freq_type, a Python list).
  planner::Plan alternate = make_plan("mixtral-8x7b", "dgx-h100", moe);
  alternate.model.moe_layers.assign(32, 0);
  for (size_t layer = 0; layer < 32; layer += 2) {
    alternate.model.moe_layers[layer] = 1;
  }
  CHECK(megatron_flags(emit_megatron(alternate)).at("--moe-layer-freq") ==
        "\"[1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0]\"");
}

TEST_CASE("--emit megatron: a dense model with latent attention and uncompressed queries") {
  // tiny-mla's MLA (q_lora_rank 32, kv 16, qk 16 + 8, v 16), dense: the MLA flags, not
  // --kv-channels (until session 44 it went out as standard attention of kv-channels 24).
  planner::Layout dense;
  dense.tp = 1;
  dense.dp = 8;
  dense.global_batch = 8;
  planner::Plan plan = make_plan("tiny-mla", "dgx-h100", dense);
  std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--multi-latent-attention") == 1);
  CHECK(flags.at("--q-lora-rank") == "32");
  CHECK(flags.at("--kv-lora-rank") == "16");
  CHECK(flags.at("--qk-head-dim") == "16");
  CHECK(flags.at("--qk-pos-emb-head-dim") == "8");
  CHECK(flags.at("--v-head-dim") == "16");
  CHECK(flags.count("--kv-channels") == 0);
  CHECK(flags.count("--num-experts") == 0);
  // DeepSeek-V2-Lite's uncompressed queries (q_lora_rank 0): Megatron's default None.
  plan.model.q_lora_rank = 0;
  flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.count("--q-lora-rank") == 0);
  CHECK(flags.count("--multi-latent-attention") == 1);
}

TEST_CASE("--emit megatron: gpt-oss's quick GeGLU, offset, clamp, sinks and biased router") {
  planner::Layout moe;
  moe.tp = 1;
  moe.dp = 8;
  moe.ep = 8;
  moe.global_batch = 64;
  planner::Plan plan = make_plan("mixtral-8x7b", "dgx-h100", moe);
  // gpt-oss's parts (models.h), as Megatron-LM's examples/gptoss/02_train.sh and
  // Megatron-Bridge's GPTOSSBridge set them: add_bias_linear with add_qkv_bias.
  plan.model.activation = models::Activation::kQuickGeglu;
  plan.model.glu_linear_offset = 1.0;
  plan.model.activation_clamp_value = 7.0;
  plan.model.attention_sinks = true;
  plan.model.qkv_bias = plan.model.attention_output_bias = plan.model.mlp_bias = true;
  plan.model.router_bias = true;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--quick-geglu").empty());
  CHECK(flags.at("--glu-linear-offset") == "1");
  CHECK(flags.at("--activation-func-clamp-value") == "7");
  CHECK(flags.at("--softmax-type") == "learnable");
  for (const char* absent : {"--swiglu", "--disable-bias-linear", "--add-qkv-bias"}) {
    CHECK_MESSAGE(flags.count(absent) == 0, absent);
  }
  const std::set<std::string> parser = megatron_parser_flags();
  for (const auto& entry : flags) {  // clang 14: no bindings in CHECK's lambda
    const std::string& flag = entry.first;
    CHECK_MESSAGE(parser.count(flag) == 1, "not a Megatron-LM flag: " << flag);
  }
  // Megatron's router takes its bias from add_bias_linear: the two must agree.
  planner::Plan unbiased_router = plan;
  unbiased_router.model.router_bias = false;
  CHECK(error_of(unbiased_router, EmitTarget::kMegatron) ==
        "--emit megatron: model.router_bias: Megatron-LM biases the router with the linear layers "
        "(--disable-bias-linear) (router_bias false, mlp_bias true)");
  // The offset runs with quick GELU only (transformer_config.py __post_init__).
  planner::Plan swiglu_offset = plan;
  swiglu_offset.model.activation = models::Activation::kSwiglu;
  CHECK(error_of(swiglu_offset, EmitTarget::kMegatron) ==
        "--emit megatron: model.glu_linear_offset: Megatron-Core's fused bias-GLU applies the "
        "offset with --quick-geglu only (1)");
  // A SwiGLU clamp on an MoE model's experts is Megatron's own option.
  swiglu_offset.model.glu_linear_offset = 0.0;
  const std::map<std::string, std::string> clamped = megatron_flags(emit_megatron(swiglu_offset));
  CHECK(clamped.at("--activation-func-clamp-value") == "7");
  CHECK(clamped.count("--swiglu") == 1);
}

TEST_CASE("--emit deepspeed and torchtitan refuse context parallelism and MoE by name") {
  planner::Layout cp;
  cp.cp = 2;
  cp.dp = 4;
  cp.zero = 3;
  cp.global_batch = 8;
  const planner::Plan llama = make_plan("llama3-8b", "dgx-h100", cp);
  CHECK(error_of(llama, EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.cp: context parallelism is not emitted for DeepSpeed (2)");
  CHECK(error_of(llama, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: layout.cp: context parallelism is not emitted for torchtitan yet (2)");
  planner::Layout moe;
  moe.dp = 8;
  moe.ep = 8;
  moe.global_batch = 8;  // zero 0: DDP, which torchtitan runs without tp and pp
  planner::Layout moe_zero1 = moe;
  moe_zero1.zero = 1;
  CHECK(error_of(make_plan("mixtral-8x7b", "dgx-h100", moe_zero1), EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: model.num_experts: mixture-of-experts models are not emitted for "
        "DeepSpeed (8)");
  CHECK(error_of(make_plan("mixtral-8x7b", "dgx-h100", moe), EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.num_experts: mixture-of-experts models are not emitted for "
        "torchtitan (8)");
}

TEST_CASE("--emit torchtitan: Llama-3 8B, FSDP x TP x PP, 1F1B") {
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 16;
  layout.micro_batch = 1;
  layout.global_batch = 128;
  layout.sequence_parallel = true;
  layout.zero = 3;
  layout.recompute = planner::Recompute::kFull;
  const planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  const std::map<std::string, std::string> toml =
      parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  const std::map<std::string, std::string> expected = {
      {"model.name", "llama3"},
      {"model.flavor", "8B"},
      {"training.local_batch_size", "8"},  // 128 sequences / dp 16, all through the pipeline
      {"training.global_batch_size", "128"},
      {"training.seq_len", "8192"},
      {"training.mixed_precision_param", "bfloat16"},
      {"parallelism.data_parallel_replicate_degree", "1"},
      {"parallelism.data_parallel_shard_degree", "16"},  // ZeRO-3 = FSDP2 fully_shard
      {"parallelism.tensor_parallel_degree", "2"},
      {"parallelism.enable_async_tensor_parallel", "false"},
      {"parallelism.pipeline_parallel_degree", "2"},
      {"parallelism.pipeline_parallel_schedule", "1F1B"},
      {"parallelism.pipeline_parallel_microbatch_size", "1"},
      // The plan's even split stated module by module (layers_per_stage 16 would make
      // torchtitan's ceil((32 + 2) / 16) = 3 virtual stages, not divisible by pp 2).
      {"parallelism.module_fqns_per_model_part",
       fmt::format("[{}, {}]", toml_modules(0, 16, true, false),
                   toml_modules(16, 32, false, true))},
      {"parallelism.context_parallel_degree", "1"},
      {"activation_checkpoint.mode", "full"}};
  CHECK(toml == expected);
  for (const auto& entry : toml) {  // clang 14: no bindings in CHECK's lambda
    const std::string& key = entry.first;
    CHECK_MESSAGE(kTorchtitanKeys.count(key) == 1, key << " is not a torchtitan JobConfig key");
  }
  // The flavor carries its own rotary base (torchtitan's llama3 8B: rope_theta 500000); a model
  // of the same shape at another base is not that flavor.
  planner::Plan other_base = plan;
  other_base.model.rope_theta = 10000.0;
  CHECK(error_of(other_base, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model: torchtitan selects a model by flavor; none of llama3 8B, 70B, "
        "405B has this shape (llama3-8b)");
}

// Uneven and interleaved: stage_layers 14, 18 with vpp 2 puts 7 + 7 layers on rank 0 and 9 + 9
// on rank 1 (Megatron-Core's rule, stage_layer_range); torchtitan's Interleaved1F1B gives rank r
// the virtual stages r and r + pp ("loop"), so the parts are listed v0 (rank 0), v1 (rank 1),
// v2 (rank 0), v3 (rank 1): layers 0-6, 7-15, 16-22, 23-31.
TEST_CASE("--emit torchtitan: hybrid sharding as the replicate and shard degrees") {
  // dp 64 as 8 replicas of a shard group of 8 (torchtitan/distributed/parallel_dims.py:
  // dp_replicate x dp_shard = dp); Megatron-LM and DeepSpeed have no such layout here.
  planner::Layout layout;
  layout.dp = 64;
  layout.micro_batch = 1;
  layout.global_batch = 64;
  layout.zero = 3;
  layout.recompute = planner::Recompute::kFull;
  planner::set_dp_shard(layout, 8);
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  plan.options.framework = planner::Framework::kFsdp;
  const std::map<std::string, std::string> toml =
      parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("parallelism.data_parallel_replicate_degree") == "8");
  CHECK(toml.at("parallelism.data_parallel_shard_degree") == "8");
  plan.options.framework = planner::Framework::kMegatron;
  CHECK(error_of(plan, EmitTarget::kMegatron)
            .find("hybrid sharding (dp_shard < dp) is modelled "
                  "as PyTorch FSDP2 runs it at ZeRO 3") != std::string::npos);
  // At ZeRO 1 it is Megatron's partial distributed optimizer: dp / dp_shard instances.
  plan.layout.zero = 1;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--use-distributed-optimizer").empty());
  CHECK(flags.at("--num-distributed-optimizer-instances") == "8");
}

TEST_CASE("--emit torchtitan: uneven interleaved stages as module_fqns_per_model_part") {
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 16;
  layout.vpp = 2;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  layout.micro_batch = 1;
  layout.global_batch = 128;
  layout.sequence_parallel = true;
  layout.zero = 3;
  layout.stage_layers = {14, 18};
  const planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  const std::map<std::string, std::string> toml =
      parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("parallelism.module_fqns_per_model_part") ==
        fmt::format("[{}, {}, {}, {}]", toml_modules(0, 7, true, false),
                    toml_modules(7, 16, false, false), toml_modules(16, 23, false, false),
                    toml_modules(23, 32, false, true)));
  CHECK(toml.at("parallelism.pipeline_parallel_schedule") == "Interleaved1F1B");
}

TEST_CASE("--emit: the interleaved micro-batch group size, Megatron's flag or a refusal") {
  // Megatron-Core model_parallel_config.py: --microbatch-group-size-per-virtual-pipeline-stage.
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 16;
  layout.vpp = 2;
  layout.schedule = planner::ScheduleKind::kInterleaved;
  layout.micro_batch = 1;
  layout.global_batch = 160;  // 10 micro-batches per pipeline: groups of 4, 4 and 2 (>= pp)
  layout.sequence_parallel = true;
  layout.zero = 3;
  layout.microbatch_group = 4;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  // Interleaving at pp 2 needs --overlap-p2p-communication (arguments.py; check_framework).
  plan.options.overlap_p2p_comm = true;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--microbatch-group-size-per-virtual-pipeline-stage") == "4");
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: layout.microbatch_group: torchtitan's Interleaved1F1B takes no "
        "micro-batch group size (4)");
  plan.layout.microbatch_group = 0;  // Megatron's default N = pp: no flag
  CHECK(megatron_flags(emit_megatron(plan))
            .count("--microbatch-group-size-per-virtual-pipeline-stage") == 0);
}

// torchtitan's async TP is a pass of torch.compile on the model (job_config.py Compile: "Async TP
// requires 'model' in --compile.components"): without --compile meshplan costs the loss eager, so
// the config compiles the blocks only; --compile on is the default components, model and loss.
TEST_CASE("--emit torchtitan: async TP compiles the blocks, --compile the blocks and the loss") {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.zero = 3;
  layout.global_batch = 8;
  layout.sequence_parallel = true;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  CHECK(parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)))
            .count("compile.enable") == 0);
  plan.options.overlap_tp_comm = true;
  std::map<std::string, std::string> toml =
      parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("parallelism.enable_async_tensor_parallel") == "true");
  CHECK(toml.at("compile.enable") == "true");
  CHECK(toml.at("compile.components") == "[\"model\"]");
  plan.options.compile = true;
  toml = parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("compile.enable") == "true");
  CHECK(toml.count("compile.components") == 0);  // torchtitan's default: model and loss
  plan.options.compile_loss = false;             // --compile blocks: the model only, the loss eager
  toml = parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("compile.enable") == "true");
  CHECK(toml.at("compile.components") == "[\"model\"]");
}

// torchtitan's Optimizer.implementation ("for-loop", "foreach", "fused"; default fused) and
// Optimizer.weight_decay (default 0.1), job_config.py at e347b1e5.
TEST_CASE("--emit torchtitan: the optimizer implementation and weight decay; composer refused") {
  planner::Layout layout;
  layout.dp = 8;
  layout.zero = 3;
  layout.global_batch = 8;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  plan.options.framework = planner::Framework::kFsdp;  // unfused optimizers are fsdp's
  CHECK(parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)))
            .count("optimizer.implementation") == 0);
  plan.options.optimizer_impl = planner::OptimizerImpl::kForeach;
  std::map<std::string, std::string> toml =
      parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("optimizer.implementation") == "foreach");
  CHECK(toml.count("optimizer.weight_decay") == 0);
  plan.options.optimizer_impl = planner::OptimizerImpl::kForLoop;
  plan.options.weight_decay = false;
  toml = parse_toml(emit_torchtitan(costed_for(plan, planner::Framework::kFsdp)));
  CHECK(toml.at("optimizer.implementation") == "for-loop");
  CHECK(toml.at("optimizer.weight_decay") == "0.0");
  for (const auto& entry : toml) {  // clang 14: no bindings in CHECK's lambda
    CHECK_MESSAGE(kTorchtitanKeys.count(entry.first) == 1,
                  entry.first << " is not a torchtitan JobConfig key");
  }
  plan.options.optimizer_impl = planner::OptimizerImpl::kComposer;
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.optimizer_impl: Composer's DecoupledAdamW is llm-foundry's "
        "optimizer; torchtitan steps with torch.optim.AdamW (fused, foreach or for-loop) "
        "(composer)");
  // llm-foundry's loss is not torchtitan's either.
  plan.options.optimizer_impl = planner::OptimizerImpl::kFused;
  plan.options.cross_entropy_loss_fusion = planner::CrossEntropyFusion::kXentropy;
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.cross_entropy_loss_fusion: xentropy is llm-foundry's "
        "FlashAttention loss; torchtitan's loss is its own cross_entropy (xentropy)");
}

TEST_CASE("--emit torchtitan: DDP without pp accumulates micro-batches; refusals") {
  planner::Layout ddp;
  ddp.dp = 8;
  ddp.micro_batch = 2;
  ddp.global_batch = 64;  // 4 accumulated micro-batches per rank
  const std::map<std::string, std::string> toml = parse_toml(emit_torchtitan(
      costed_for(make_plan("llama3-8b", "dgx-h100", ddp), planner::Framework::kFsdp)));
  CHECK(toml.at("training.local_batch_size") == "2");
  CHECK(toml.at("training.global_batch_size") == "64");
  CHECK(toml.at("parallelism.data_parallel_replicate_degree") == "8");
  CHECK(toml.at("parallelism.data_parallel_shard_degree") == "1");
  CHECK(toml.count("parallelism.pipeline_parallel_schedule") == 0);

  planner::Layout zero1 = ddp;
  zero1.zero = 1;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", zero1), EmitTarget::kTorchtitan) ==
        "--emit torchtitan: layout: fsdp cannot run this layout: torchtitan shards with FSDP2 "
        "(ZeRO-3) or replicates (DDP) (" +
            planner::describe(zero1) + ")");
  planner::Layout tiny;
  tiny.dp = 2;
  tiny.global_batch = 4;
  CHECK(error_of(make_plan("tiny", "local-cpu", tiny), EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model: torchtitan selects a model by flavor; none of llama3 8B, 70B, "
        "405B has this shape (tiny)");
  // selective-op is torchtitan's op-level policy, which the config names.
  planner::Layout selective = ddp;
  selective.recompute = planner::Recompute::kSelectiveOp;
  const std::map<std::string, std::string> op_sac = parse_toml(emit_torchtitan(
      costed_for(make_plan("llama3-8b", "dgx-h100", selective), planner::Framework::kFsdp)));
  CHECK(op_sac.at("activation_checkpoint.mode") == "selective");
  CHECK(op_sac.at("activation_checkpoint.selective_ac_option") == "op");
}

TEST_CASE("--emit refuses norm_kernel eager: no emitted config names torchtitan's eager norm") {
  planner::Layout ddp;
  ddp.dp = 8;
  ddp.global_batch = 8;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", ddp);
  plan.options.norm_kernel = planner::NormKernel::kEager;
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.norm_kernel: torchtitan's current JobConfig has no "
        "model.norm_type (the hand-written eager RMSNorm is gone) (eager)");
  // The eager norm is an fsdp-only option: the planner refuses it under megatron and deepspeed,
  // whose targets refuse an fsdp plan by its framework (emit_framework_test).
  planner::PlanOptions megatron;
  megatron.norm_kernel = planner::NormKernel::kEager;
  CHECK_THROWS_AS(planner::check_norm_kernel_options(megatron, "norm_kernel"), InputError);
}

TEST_CASE("--emit deepspeed: the pipeline sends split over tp as the plan costs them") {
  // pipe/engine.py splits both directions when tp > 1 unless pipeline.pipe_partitioned /
  // grad_partitioned say otherwise (config.py defaults true), so both are always written.
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 2;
  layout.global_batch = 8;
  layout.zero = 1;
  planner::Plan plan =
      costed_for(make_plan("llama3-8b", "dgx-h100", layout), planner::Framework::kDeepSpeed);
  const auto pipeline = [&plan] {
    return nlohmann::json::parse(emit_deepspeed(plan)).at("pipeline");
  };
  CHECK(pipeline().at("pipe_partitioned") == false);  // meshplan's default: whole tensors
  CHECK(pipeline().at("grad_partitioned") == false);
  plan.options.scatter_gather_pipeline = true;
  CHECK(pipeline().at("pipe_partitioned") == true);
  CHECK(pipeline().at("grad_partitioned") == true);
  plan.options.pipeline_grad_scatter_gather = false;  // DeeperSpeed eb7f5cff, GPT-NeoX-20B
  CHECK(pipeline().at("pipe_partitioned") == true);
  CHECK(pipeline().at("grad_partitioned") == false);
  CHECK(pipeline().count("stages") == 0);  // read by nothing in DeepSpeed
  CHECK(nlohmann::json::parse(emit_deepspeed(plan)).count("tensor_parallel") == 0);
  CHECK(deepspeed_launch_note(plan).rfind(
            "# --emit deepspeed: the model-parallel sizes are the training script's: "
            "Megatron-DeepSpeed --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2; "
            "a DeepSpeed config cannot set them\n",
            0) == 0);
}

// Llama-3 8B under framework fsdp, ZeRO 3 over dp 8.
planner::Plan fsdp_zero3_plan() {
  planner::Layout zero3;
  zero3.dp = 8;
  zero3.global_batch = 8;
  zero3.zero = 3;
  planner::Plan plan = make_plan("llama3-8b", "dgx-h100", zero3);
  plan.options.framework = planner::Framework::kFsdp;
  return plan;
}

TEST_CASE("--emit refuses fsdp_version 1: no emitted config runs PyTorch FSDP1") {
  planner::Plan plan = fsdp_zero3_plan();
  plan.options.fsdp_version = 1;
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.fsdp_version: torchtitan shards with FSDP2 fully_shard, not "
        "FSDP1 (1)");
  // FSDP1 is an fsdp-only option: the other targets refuse the plan for its framework.
  CHECK_THROWS_WITH_AS(emit_megatron(plan),
                       "--emit megatron: options.framework: the plan was costed for fsdp; "
                       "re-plan with --framework megatron to emit it for megatron (fsdp)",
                       InputError);
}

TEST_CASE("--emit torchtitan refuses fsdp_head_in_root: its parallelize.py wraps [norm, output]") {
  planner::Plan plan = fsdp_zero3_plan();
  plan.options.fsdp_head_in_root = true;
  CHECK(error_of(plan, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: options.fsdp_head_in_root: torchtitan since 83e694105 wraps [norm, "
        "output] as their own FSDP unit (true)");
  plan.options.fsdp_head_in_root = false;  // what it runs: emitted
  CHECK(error_of(plan, EmitTarget::kTorchtitan) == "(no error)");
}

TEST_CASE("--emit deepspeed: pipeline engine with ZeRO-1, full recompute") {
  planner::Layout layout;
  layout.pp = 4;
  layout.dp = 16;
  layout.micro_batch = 2;
  layout.global_batch = 256;
  layout.zero = 1;
  layout.recompute = planner::Recompute::kFull;
  const planner::Plan plan = make_plan("llama3-8b", "dgx-h100", layout);
  const nlohmann::json config =
      nlohmann::json::parse(emit_deepspeed(costed_for(plan, planner::Framework::kDeepSpeed)));
  CHECK(config.at("train_batch_size") == 256);
  CHECK(config.at("train_micro_batch_size_per_gpu") == 2);
  // DeepSpeed's identity train_batch_size = micro * accumulation * dp: 256 = 2 * 8 * 16.
  CHECK(config.at("gradient_accumulation_steps") == 8);
  CHECK(config.at("bf16").at("enabled") == true);
  CHECK(config.at("zero_optimization").at("stage") == 1);
  CHECK(config.at("zero_optimization").at("overlap_comm") == true);
  // DeepSpeed's own default, 5e8 elements, as the plan was costed (planner::dp_bucket_bytes).
  CHECK(config.at("zero_optimization").at("reduce_bucket_size") == 500000000);
  CHECK(config.at("pipeline").at("pipe_partitioned") == false);  // tp 1: nothing to split
  CHECK(config.at("pipeline").at("activation_checkpoint_interval") == 1);
  // The even split of 32 layers is what type:transformer builds; "parameters" (PipelineModule's
  // default) gives 7,9,9,7 here, so the method is named beside the config.
  CHECK(deepspeed_launch_note(costed_for(plan, planner::Framework::kDeepSpeed)) ==
        "# --emit deepspeed: the model-parallel sizes are the training script's: "
        "Megatron-DeepSpeed --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4; a "
        "DeepSpeed config cannot set them\n"
        "# --emit deepspeed: stages of 8,8,8,8 layers: build the PipelineModule with "
        "partition_method=\"type:transformer\" (what GPT-NeoX and Megatron-DeepSpeed pass; "
        "PipelineModule's default, parameters, splits this model differently); a DeepSpeed "
        "config cannot set it\n");
  planner::Plan by_parameters = plan;
  by_parameters.layout.stage_layers = {7, 9, 9, 7};
  const std::string note =
      deepspeed_launch_note(costed_for(by_parameters, planner::Framework::kDeepSpeed));
  CHECK(note.substr(note.find('\n') + 1) ==
        "# --emit deepspeed: stages of 7,9,9,7 layers: build the PipelineModule with "
        "partition_method=\"parameters\" (PipelineModule's default); a DeepSpeed config cannot "
        "set it\n");
  // Key names as DeepSpeed's parser reads them (files in the header comment).
  const std::set<std::string> top = {"train_batch_size",
                                     "train_micro_batch_size_per_gpu",
                                     "gradient_accumulation_steps",
                                     "bf16",
                                     "zero_optimization",
                                     "pipeline"};
  for (const auto& item : config.items()) {  // clang 14: no bindings in CHECK's lambda
    const std::string key = item.key();
    CHECK_MESSAGE(top.count(key) == 1, key);
  }
  const std::set<std::string> zero_keys = {"stage", "overlap_comm", "reduce_bucket_size",
                                           "allgather_bucket_size",
                                           "use_multi_rank_bucket_allreduce"};
  for (const auto& item : config.at("zero_optimization").items()) {
    const std::string key = item.key();
    CHECK_MESSAGE(zero_keys.count(key) == 1, key);
  }
  // The plan costs the bucket all-reduce, DeepSpeed's default: no key. Costed as per-rank
  // reduces, the config turns the all-reduce off (zero/config.py, default true since v0.12.4).
  CHECK(config.at("zero_optimization").count("use_multi_rank_bucket_allreduce") == 0);
  planner::Plan reduced = plan;
  reduced.options.deepspeed_grad_all_reduce = false;
  CHECK(nlohmann::json::parse(emit_deepspeed(costed_for(reduced, planner::Framework::kDeepSpeed)))
            .at("zero_optimization")
            .at("use_multi_rank_bucket_allreduce") == false);
}

// Llama-3 8B on 64 H100s, tp 2, pp 4, dp 8, ZeRO 1, full recompute: the recompute options' plan.
planner::Plan full_recompute_plan() {
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 4;
  layout.dp = 8;
  layout.micro_batch = 1;
  layout.global_batch = 64;
  layout.zero = 1;
  layout.recompute = planner::Recompute::kFull;
  return make_plan("llama3-8b", "dgx-h100", layout);
}

TEST_CASE("--emit megatron: the block method as --recompute-method block") {
  // Megatron-LM arguments.py --recompute-method {uniform,block}, --recompute-num-layers N.
  planner::Plan plan = full_recompute_plan();
  plan.layout.recompute_layers = 3;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--recompute-granularity") == "full");
  CHECK(flags.at("--recompute-method") == "block");
  CHECK(flags.at("--recompute-num-layers") == "3");
}

TEST_CASE("--emit megatron: recompute modules as --recompute-modules, space-separated") {
  // Megatron-LM arguments.py --recompute-modules (nargs='*') with --recompute-granularity
  // selective; the default (core_attn alone) writes no list.
  planner::Plan plan = full_recompute_plan();
  plan.layout.recompute = planner::Recompute::kSelective;
  CHECK(emit_megatron(plan).find("--recompute-modules") == std::string::npos);
  plan.layout.recompute_modules = planner::kRecomputeCoreAttn | planner::kRecomputeLayernorm;
  const std::string script = emit_megatron(plan);
  CHECK(script.find("  --recompute-granularity selective \\\n") != std::string::npos);
  CHECK(script.find("  --recompute-modules core_attn layernorm \\\n") != std::string::npos);
  CHECK(megatron_parser_flags().count("--recompute-modules") == 1);
}

TEST_CASE("--emit: recompute in groups as Megatron's uniform method and DeepSpeed's interval") {
  // Megatron-LM arguments.py --recompute-method uniform --recompute-num-layers N; DeepSpeed's
  // PipelineModule activation_checkpoint_interval (the pipeline section of its config).
  planner::Plan plan = full_recompute_plan();
  plan.layout.recompute_group_layers = 4;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--recompute-method") == "uniform");
  CHECK(flags.at("--recompute-num-layers") == "4");
  planner::Plan deepspeed = plan;
  deepspeed.options.framework = planner::Framework::kDeepSpeed;
  const nlohmann::json config =
      nlohmann::json::parse(emit_deepspeed(costed_for(deepspeed, planner::Framework::kDeepSpeed)));
  CHECK(config.at("pipeline").at("activation_checkpoint_interval") == 4);
}

TEST_CASE("--emit: distributed saved activations as Megatron's flag and DeepSpeed's key") {
  // Megatron-LM arguments.py --distribute-saved-activations (a flag the parser has); DeepSpeed's
  // config section activation_checkpointing.partition_activations
  // (runtime/activation_checkpointing/config.py ACT_CHKPT, ACT_CHKPT_PARTITION_ACTIVATIONS).
  planner::Plan plan = full_recompute_plan();
  CHECK(megatron_flags(emit_megatron(plan)).count("--distribute-saved-activations") == 0);
  plan.options.distribute_saved_activations = true;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--distribute-saved-activations").empty());
  CHECK(megatron_parser_flags().count("--distribute-saved-activations") == 1);
  CHECK(flags.at("--recompute-granularity") == "full");
  planner::Plan deepspeed = plan;
  deepspeed.options.framework = planner::Framework::kDeepSpeed;
  const nlohmann::json config =
      nlohmann::json::parse(emit_deepspeed(costed_for(deepspeed, planner::Framework::kDeepSpeed)));
  CHECK(config.at("activation_checkpointing") == nlohmann::json{{"partition_activations", true}});
  deepspeed.options.distribute_saved_activations = false;
  CHECK(nlohmann::json::parse(emit_deepspeed(costed_for(deepspeed, planner::Framework::kDeepSpeed)))
            .count("activation_checkpointing") == 0);
}

TEST_CASE("--emit deepspeed refuses ZeRO-2 with pp > 1 and sequence parallelism") {
  planner::Layout layout;
  layout.pp = 2;
  layout.dp = 4;
  layout.global_batch = 64;
  layout.zero = 2;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", layout), EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout: deepspeed cannot run this layout: its pipeline engine refuses "
        "ZeRO-2 and ZeRO-3 with pp > 1 (" +
            planner::describe(layout) + ")");
  planner::Layout sp;
  sp.tp = 2;
  sp.dp = 4;
  sp.global_batch = 64;
  sp.sequence_parallel = true;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", sp), EmitTarget::kDeepSpeed) ==
        "--emit deepspeed: layout.sequence_parallel: sequence parallelism is the training "
        "script's flag (Megatron-DeepSpeed --sequence-parallel), not a DeepSpeed config key: "
        "--emit megatron-deepspeed writes both (on)");
}

TEST_CASE("--emit slurm: nodes, tasks per node and the execute line of a CPU plan") {
  planner::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.dp = 4;
  layout.global_batch = 16;
  const planner::Plan plan = make_plan("tiny", "local-cpu", layout);
  const std::string script = emit_launch_config(plan, EmitTarget::kSlurm, "runs/p.json");
  std::map<std::string, std::string> directives;
  std::string srun;
  std::istringstream lines(script);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#SBATCH --", 0) == 0) {
      const size_t equals = line.find('=');
      directives[line.substr(8, equals - 8)] = line.substr(equals + 1);
    } else if (line.rfind("srun ", 0) == 0) {
      srun = line;
    }
  }
  // 16 ranks on local-cpu's 8 per node: 2 nodes of 8 tasks, one core each.
  CHECK(directives.at("--nodes") == "2");
  CHECK(directives.at("--ntasks-per-node") == "8");
  CHECK(directives.at("--cpus-per-task") == "1");
  CHECK(srun ==
        "srun --ntasks=16 --cpu-bind=cores --mpi=pmix meshplan execute 'runs/p.json' \"$@\"");
  CHECK(error_of(plan, EmitTarget::kSlurm) ==
        "--emit slurm: needs --save-plan (the script runs meshplan execute on that file)");
  planner::Layout gpu;
  gpu.dp = 8;
  gpu.global_batch = 16;
  CHECK(error_of(make_plan("llama3-8b", "dgx-h100", gpu), EmitTarget::kSlurm, "p.json") ==
        "--emit slurm: p.json: cluster.precision: the CPU executor runs fp32 only (bf16); plan "
        "with --cluster local-cpu");
}

TEST_CASE("--emit targets: names and an unknown one") {
  for (EmitTarget target :
       {EmitTarget::kMegatron, EmitTarget::kTorchtitan, EmitTarget::kDeepSpeed,
        EmitTarget::kMegatronDeepSpeed, EmitTarget::kMegatronBridge, EmitTarget::kSlurm}) {
    CHECK(parse_emit_target(to_string(target), "--emit") == target);
  }
  CHECK_THROWS_WITH_AS(parse_emit_target("nemo", "--emit"),
                       "--emit: unknown emit target (nemo); supported: megatron, torchtitan, "
                       "deepspeed, megatron-deepspeed, megatron-bridge, slurm",
                       InputError);
}

}  // namespace
}  // namespace meshplan::reports

namespace meshplan::reports {
namespace {

using namespace emit_test;  // NOLINT(google-build-using-namespace): the suite's helpers

TEST_CASE(
    "--emit: a sliding window as Megatron's --window-size w-1,0 (and its layers), refused "
    "elsewhere") {
  planner::Layout layout;
  layout.tp = 2;
  layout.dp = 4;
  layout.global_batch = 16;
  planner::Plan plan = make_plan("mistral-7b", "dgx-h100", layout);  // seq 8192, window 4096
  CHECK(plan.model.sliding_window == 4096);
  // Without a window (or one covering the sequence) there is no flag.
  plan.model.sliding_window = 0;
  CHECK(megatron_flags(emit_megatron(plan)).count("--window-size") == 0);
  plan.model.sliding_window = 8192;
  CHECK(megatron_flags(emit_megatron(plan)).count("--window-size") == 0);
  // Jiang et al. 2023, Table 1: window 4096. Query i attends keys i - 4096 < j <= i, Megatron-
  // Core window_size (4095, 0), parsed by arguments.py tuple_type from "4095,0".
  plan.model.sliding_window = 4096;
  const std::map<std::string, std::string> flags = megatron_flags(emit_megatron(plan));
  CHECK(flags.at("--window-size") == "4095,0");
  CHECK(flags.count("--window-attn-skip-freq") == 0);  // every layer windowed
  CHECK(megatron_parser_flags().count("--window-size") == 1);
  CHECK(megatron_parser_flags().count("--window-attn-skip-freq") == 1);
  // Some layers only: Megatron-Core's --window-attn-skip-freq (arguments.py moe_freq_type), the
  // integer as is; Megatron's is_layer_window_attention reads it as the model does.
  plan.model.window_attn_skip_freq = 2;
  const std::map<std::string, std::string> every_other = megatron_flags(emit_megatron(plan));
  CHECK(every_other.at("--window-size") == "4095,0");
  CHECK(every_other.at("--window-attn-skip-freq") == "2");
  // The list as the Python list expression moe_freq_type evaluates, quoted for the shell:
  // only digits, commas and brackets (_eval_pattern refuses anything else), one entry per layer.
  plan.model.window_attn_skip_freq = 0;
  plan.model.window_attn_layers.assign(32, 1);
  plan.model.window_attn_layers[3] = 0;
  plan.model.window_attn_layers[31] = 0;
  const std::string listed = megatron_flags(emit_megatron(plan)).at("--window-attn-skip-freq");
  REQUIRE(listed.size() > 2);
  CHECK(listed.front() == '"');
  CHECK(listed.back() == '"');
  const std::string expression = listed.substr(1, listed.size() - 2);
  CHECK(expression.find_first_not_of("0123456789,[]") == std::string::npos);
  CHECK(nlohmann::json::parse(expression).get<std::vector<int>>() == plan.model.window_attn_layers);
  plan.model.window_attn_layers.clear();
  // torchtitan's llama3, Megatron-DeepSpeed and the DeepSpeed config costed for it have none.
  planner::Layout sharded = layout;
  sharded.tp = 1;
  sharded.dp = 8;
  sharded.zero = 3;
  planner::Plan fsdp = make_plan("llama3-8b", "dgx-h100", sharded);
  fsdp.model.sliding_window = 4096;
  CHECK(error_of(fsdp, EmitTarget::kTorchtitan) ==
        "--emit torchtitan: model.sliding_window: torchtitan's llama3 model has no "
        "sliding-window attention (4096)");
  planner::Layout zero1 = layout;
  zero1.zero = 1;
  planner::Plan deepspeed = make_plan("mistral-7b", "dgx-h100", zero1);
  deepspeed.model.sliding_window = 4096;
  // The planner's framework rule (check_framework) refuses it for both DeepSpeed targets.
  const std::string refusal =
      ": layout: deepspeed cannot run this layout: Megatron-DeepSpeed's ParallelAttention has no "
      "sliding window (sliding_window 4096 < seq_length 8192) (tp=2 pp=1 dp=4 vpp=1 mb=1 "
      "recompute=none sp=off zero=1 schedule=1f1b)";
  CHECK(error_of(deepspeed, EmitTarget::kDeepSpeed) == "--emit deepspeed" + refusal);
  CHECK(error_of(deepspeed, EmitTarget::kMegatronDeepSpeed) ==
        "--emit megatron-deepspeed" + refusal);
}

}  // namespace
}  // namespace meshplan::reports
