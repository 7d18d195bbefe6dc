// check_layout (planner/validity.cpp): each rule with its code and exact reason text, one
// violation at a time, on layouts that break that rule only (or, where noted, break it first).

#include <doctest/doctest.h>

#include <string>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

struct Case {
  const char* model;  // preset
  Layout layout;
  int64_t num_gpus;
  const char* code;
  const char* reason;
};

Layout with(Layout layout, auto&& change) {
  change(layout);
  return layout;
}

void check_case(const Case& c, bool allow_tp_across_nodes = false) {
  CAPTURE(c.code);
  CAPTURE(describe(c.layout));
  const Validity validity =
      check_layout(models::load_model(c.model), models::load_cluster("dgx-a100-80gb"), c.num_gpus,
                   c.layout, allow_tp_across_nodes);
  CHECK(validity.code == c.code);
  CHECK(validity.reason == c.reason);
  CHECK_FALSE(validity.ok());
}

TEST_CASE("a valid layout passes every rule") {
  // GPT-3 175B, Narayanan et al. 2021 Table 1's layout for 1024 GPUs: tp 8, pp 8, dp 16,
  // interleaved with 2 chunks (12 layers per stage, 6 per chunk), global batch 1536:
  // 1536 / 16 = 96 micro-batches, divisible by pp 8.
  Layout layout = make_layout(8, 8, 16, 1, 1536);
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.sequence_parallel = true;
  layout.zero = 1;
  const Validity validity = check_layout(models::load_model("gpt3-175b"),
                                         models::load_cluster("dgx-a100-80gb"), 1024, layout);
  CHECK(validity.ok());
  CHECK(validity.code.empty());
  CHECK(validity.reason.empty());
}

TEST_CASE("each validity rule: code and reason") {
  // gpt3-175b: 96 layers, 96 heads (96 kv heads), ffn 49152, seq 2048; llama3-8b: 32 heads, 8 kv
  // heads; tiny: 4 layers, 4 heads, 2 kv heads, ffn 176, seq 32. dgx-a100-80gb: 8 GPUs per node.
  const Case cases[] = {
      // 2 * 2 * 2 = 8 GPUs laid out, 16 given.
      {"tiny", make_layout(2, 2, 2, 1, 8), 16, "gpus",
       "tp*pp*dp must equal the GPU count (2*2*2 != 16)"},
      // 96 heads do not split over 5 ranks.
      {"gpt3-175b", make_layout(5, 1, 1, 1, 1), 5, "tp_heads",
       "num_attention_heads not divisible by tp (96 % 5)"},
      // Llama-3 8B: 32 query heads split over 16, its 8 kv heads do not.
      {"llama3-8b", make_layout(16, 1, 1, 1, 1), 16, "tp_kv_heads",
       "num_kv_heads not divisible by tp (8 % 16)"},
      // 16 ranks split GPT-3's heads and ffn (49152 = 16 * 3072) but not an 8-GPU node.
      {"gpt3-175b", make_layout(16, 1, 1, 1, 1), 16, "tp_node",
       "tp group does not fit in one node (tp 16 with 8 GPUs per node)"},
      // tp 3 also divides 96 heads and 49152, but not the node's 8 GPUs.
      {"gpt3-175b", make_layout(3, 1, 1, 1, 1), 3, "tp_node",
       "tp group does not fit in one node (tp 3 with 8 GPUs per node)"},
      // 96 layers over 5 stages.
      {"gpt3-175b", make_layout(8, 5, 1, 1, 5), 40, "pp_layers",
       "num_layers not divisible by pp*vpp (96 % 5)"},
      // 100 sequences over dp 8 * micro-batch 1.
      {"tiny", make_layout(1, 1, 8, 1, 100), 8, "batch",
       "global_batch not divisible by dp*micro_batch (100 % 8)"},
      // 12 sequences, dp 2, micro-batch 2: 3 micro-batches, not a multiple of pp 2.
      {"tiny",
       with(make_layout(1, 2, 2, 2, 12),
            [](Layout& l) {
              l.schedule = ScheduleKind::kInterleaved;
              l.vpp = 2;
            }),
       4, "interleaved_micro_batches",
       "interleaved schedule needs micro-batches divisible by pp (3 % 2)"},
      // Chunks without the interleaved schedule.
      {"tiny", with(make_layout(1, 2, 1, 1, 4), [](Layout& l) { l.vpp = 2; }), 2, "vpp_schedule",
       "vpp > 1 needs the interleaved schedule (vpp 2, 1f1b)"},
      // Interleaved with one chunk per rank.
      {"tiny",
       with(make_layout(1, 2, 1, 1, 4), [](Layout& l) { l.schedule = ScheduleKind::kInterleaved; }),
       2, "vpp_schedule", "interleaved schedule needs pp >= 2 and vpp >= 2 (pp 2, vpp 1)"},
      // Interleaved on one stage.
      {"tiny",
       with(make_layout(1, 1, 1, 1, 4),
            [](Layout& l) {
              l.schedule = ScheduleKind::kInterleaved;
              l.vpp = 2;
            }),
       1, "vpp_schedule", "interleaved schedule needs pp >= 2 and vpp >= 2 (pp 1, vpp 2)"},
      // Sequence parallelism splits the sequence over tp ranks: needs tp > 1.
      {"tiny", with(make_layout(1, 1, 1, 1, 1), [](Layout& l) { l.sequence_parallel = true; }), 1,
       "sequence_parallel", "sequence parallel needs tp > 1"},
      // ZeRO stages are 0 to 3.
      {"tiny", with(make_layout(1, 1, 2, 1, 2), [](Layout& l) { l.zero = 7; }), 2, "zero",
       "ZeRO stage must be 0-3 (7)"},
      {"tiny", with(make_layout(1, 1, 2, 1, 2), [](Layout& l) { l.zero = -1; }), 2, "zero",
       "ZeRO stage must be 0-3 (-1)"},
      // Non-positive sizes: the layout is described whole.
      {"tiny", make_layout(0, 1, 1, 1, 1), 0, "sizes",
       "tp, pp, dp, vpp, micro_batch and global_batch must be positive (tp=0 pp=1 dp=1 vpp=1 "
       "mb=1 recompute=none sp=off zero=0 schedule=1f1b)"},
  };
  for (const Case& c : cases) {
    check_case(c);
  }
}

TEST_CASE("tp_ffn: ffn hidden size not divisible by tp") {
  // tiny with 8 heads of 8 (they split over tp 8) and ffn 1004 = 8 * 125 + 4 (it does not).
  models::TransformerConfig model = models::load_model("tiny");
  model.num_attention_heads = 8;
  model.num_kv_heads = 8;
  model.head_dim = 8;
  model.ffn_hidden_size = 1004;
  const Validity validity =
      check_layout(model, models::load_cluster("dgx-a100-80gb"), 8, make_layout(8, 1, 1, 1, 1));
  CHECK(validity.code == "tp_ffn");
  CHECK(validity.reason == "ffn_hidden_size not divisible by tp (1004 % 8)");
}

TEST_CASE("sequence_parallel: the sequence must split evenly over tp") {
  models::TransformerConfig model = models::load_model("tiny");
  Layout layout = make_layout(2, 1, 1, 1, 1);
  layout.sequence_parallel = true;
  model.seq_length = 31;  // odd: 31 % 2 = 1
  const Validity validity = check_layout(model, models::load_cluster("dgx-a100-80gb"), 2, layout);
  CHECK(validity.code == "sequence_parallel");
  CHECK(validity.reason == "seq_length not divisible by tp (31 % 2)");
}

TEST_CASE("tp_node: allowed across nodes on request") {
  // The same tp 16 layout as above passes when tp groups may span nodes.
  const Validity validity =
      check_layout(models::load_model("gpt3-175b"), models::load_cluster("dgx-a100-80gb"), 16,
                   make_layout(16, 1, 1, 1, 1), /*allow_tp_across_nodes=*/true);
  CHECK(validity.ok());
}

TEST_CASE("rules are checked in order: the first violation is reported") {
  // tp 5 on GPT-3 breaks tp_heads (96 % 5) and tp_node (5 does not divide 8) and pp 5 breaks
  // pp_layers; the heads rule comes first.
  const Validity validity =
      check_layout(models::load_model("gpt3-175b"), models::load_cluster("dgx-a100-80gb"), 25,
                   make_layout(5, 5, 1, 1, 1));
  CHECK(validity.code == "tp_heads");
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("grad_reduce_dtype: what each framework and precision can reduce in") {
  const models::ClusterConfig bf16 = models::load_cluster("dgx-h100");
  const models::ClusterConfig fp32 = models::load_cluster("local-cpu");
  const auto error_of = [](const models::ClusterConfig& cluster, Framework framework,
                           GradReduceDtype dtype) -> std::string {
    PlanOptions options;
    options.framework = framework;
    options.grad_reduce_dtype = dtype;
    try {
      check_grad_reduce_dtype_options(cluster, options, "--grad-reduce-dtype");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  const auto kFp32 = GradReduceDtype::kFp32;
  const auto kBf16 = GradReduceDtype::kBf16;
  // Megatron: both (--grad-reduce-in-bf16); fp32 training: fp32 only.
  CHECK(error_of(bf16, Framework::kMegatron, kFp32).empty());
  CHECK(error_of(bf16, Framework::kMegatron, kBf16).empty());
  CHECK(error_of(fp32, Framework::kMeshplan, kFp32).empty());
  CHECK(error_of(fp32, Framework::kMegatron, kBf16) ==
        "--grad-reduce-dtype: bf16 needs 16-bit mixed-precision training (local-cpu trains in "
        "fp32)");
  CHECK(error_of(bf16, Framework::kDeepSpeed, kBf16).empty());
  CHECK(error_of(bf16, Framework::kDeepSpeed, kFp32)
            .rfind("--grad-reduce-dtype: fp32 under framework deepspeed: DeepSpeed's "
                   "communication_data_type fp32",
                   0) == 0);
  // FSDP: both (FSDP1 MixedPrecision / FSDP2 MixedPrecisionPolicy reduce_dtype).
  CHECK(error_of(bf16, Framework::kFsdp, kFp32).empty());
  CHECK(error_of(bf16, Framework::kFsdp, kBf16).empty());
  CHECK(error_of(bf16, Framework::kMeshplan, kFp32)
            .rfind("--grad-reduce-dtype: fp32 under framework meshplan: the executor", 0) == 0);
  CHECK_THROWS_WITH_AS(parse_grad_reduce_dtype("fp16", "--grad-reduce-dtype"),
                       "--grad-reduce-dtype: unsupported gradient reduce dtype (fp16); supported: "
                       "fp32, bf16",
                       InputError);
}

TEST_CASE("grad_reduce_dtype: Megatron-FSDP's fp32 main grads are refused, not guessed") {
  Layout layout = test::make_layout(1, 1, 8, 1, 8);
  PlanOptions options;
  options.grad_reduce_dtype = GradReduceDtype::kFp32;
  for (int zero : {0, 1}) {
    layout.zero = zero;
    CHECK(check_grad_reduce_dtype(layout, options).ok());
  }
  for (int zero : {2, 3}) {
    layout.zero = zero;
    const Validity validity = check_grad_reduce_dtype(layout, options);
    CHECK(validity.code == "framework");
    CHECK(validity.reason.find("megatron cannot run this layout: grad_reduce_dtype fp32") == 0);
  }
  options.grad_reduce_dtype.reset();  // the default, bf16 main grads there
  CHECK(check_grad_reduce_dtype(layout, options).ok());
}

TEST_CASE("grad_reduce_dtype: FSDP reduces in bf16 when told, its DDP (zero 0) does not") {
  Layout layout = test::make_layout(1, 1, 8, 1, 8);
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.grad_reduce_dtype = GradReduceDtype::kBf16;
  layout.zero = 3;
  CHECK(check_grad_reduce_dtype(layout, options).ok());
  layout.zero = 0;
  const Validity validity = check_grad_reduce_dtype(layout, options);
  CHECK(validity.code == "framework");
  CHECK(validity.reason.find("fsdp cannot run this layout: grad_reduce_dtype bf16 is FSDP's "
                             "reduce_dtype (zero 3)") == 0);
}

}  // namespace
}  // namespace meshplan::planner
