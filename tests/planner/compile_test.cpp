// --compile (torchtitan's --training.compile): the compiled loss's memory and bytes, the
// frameworks that refuse it, and its plan file key.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "compute_cost.h"
#include "loss_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

TEST_CASE("compile: the loss holds 4 T V bytes compiled against eager's 14 T V") {
  // megatron-7.5b (seq 2048, vocab 51,200), fsdp, pp 1, micro-batch 1, bf16, no recompute:
  // eager, torchtitan's cross_entropy(pred.float()) holds the fp32 log-softmax (4 T V), its
  // backward two fp32 gradients (8 T V) and the freed bf16 logits' cached segment (2 T V);
  // compiled, the saved bf16 logits (2 T V) and one bf16 gradient (2 T V): 10 T V fewer.
  // Allocated: held 4 -> 2 and transient 8 -> 2, 8 T V; the cached segment is reserved,
  // not allocated, so the reserve falls by 2 T V plus the allocator's fragmentation share
  // (kAllocatorFragmentation, memory.h) of the 8 T V.
  constexpr double kTokens = 2048, kVocab = 51200;
  PlanOptions options;
  const MemoryBreakdown eager = test::fsdp_loss_test_memory(options);
  options.compile = true;
  const MemoryBreakdown compiled = test::fsdp_loss_test_memory(options);
  CHECK(static_cast<double>(eager.activations_bytes - compiled.activations_bytes) ==
        doctest::Approx(8.0 * kTokens * kVocab).epsilon(1e-9).scale(0));
  CHECK(static_cast<double>(eager.reserved_bytes - compiled.reserved_bytes) ==
        doctest::Approx((2.0 + 8.0 * kAllocatorFragmentation) * kTokens * kVocab)
            .epsilon(1e-6)
            .scale(0));
  CHECK(compiled.weights_bytes == eager.weights_bytes);
  CHECK(static_cast<double>(eager.total_bytes() - compiled.total_bytes()) ==
        doctest::Approx((10.0 + 8.0 * kAllocatorFragmentation) * kTokens * kVocab)
            .epsilon(1e-6)
            .scale(0));
}

TEST_CASE("compile: the loss's memory-bound bytes per logit, eager and compiled") {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  // Eager (Megatron-Core's unfused passes, bf16 logits): forward cast 2 + 4, max 4, subtract
  // 8, exp 8, sum 4, divide 8 = 38; backward mul 8, cast 4 + 2 = 14.
  const PassBytes eager = loss_bytes_per_logit(2.0, options);
  CHECK(eager.forward == 38.0);
  CHECK(eager.backward == 14.0);
  // Compiled: one fused reduction reads the bf16 logits (2); the backward reads them again and
  // writes the bf16 gradient (2 + 2).
  options.compile = true;
  const PassBytes compiled = loss_bytes_per_logit(2.0, options);
  CHECK(compiled.forward == 2.0);
  CHECK(compiled.backward == 4.0);
}

// --compile blocks (compile_loss false): torchtitan 9dec370 .. d1f62be7 compiled each
// TransformerBlock and kept the loss eager (train.py), so the loss costs what it costs eager, in
// bytes and in memory, while the blocks keep compile's fused element-wise count.
TEST_CASE("compile blocks: the loss costs and holds what it does eager") {
  PlanOptions options;
  options.framework = Framework::kFsdp;
  options.compile = true;
  options.compile_loss = false;
  CHECK_FALSE(loss_compiled(options));
  const PassBytes blocks = loss_bytes_per_logit(2.0, options);
  CHECK(blocks.forward == 38.0);  // eager's, the case above
  CHECK(blocks.backward == 14.0);
  // Llama 3 8B: rope and SwiGLU, whose eager element-wise kernels compile fuses.
  const models::TransformerConfig model = models::load_model("llama3-8b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(1, 1, 64, 1, 64);
  layout.zero = 3;
  PlanOptions eager_options = options;
  eager_options.compile = false;
  const PlanEstimate eager = estimate_plan(model, cluster, layout, eager_options);
  const PlanEstimate compiled_blocks = estimate_plan(model, cluster, layout, options);
  // Memory: compiled blocks are counted as eager (cost_model.h), and so is this loss.
  CHECK(compiled_blocks.stages[0].memory.total_bytes() == eager.stages[0].memory.total_bytes());
  // Time: faster than eager by the blocks' element-wise passes only, so slower than compiling
  // the loss too.
  options.compile_loss = true;
  const PlanEstimate compiled_all = estimate_plan(model, cluster, layout, options);
  CHECK(compiled_blocks.step_time_s < eager.step_time_s);
  CHECK(compiled_all.step_time_s < compiled_blocks.step_time_s);
}

TEST_CASE("compile: only framework fsdp runs torchtitan's torch.compile") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  PlanOptions options;
  options.compile = true;
  options.framework = Framework::kFsdp;
  CHECK_NOTHROW(check_precision(cluster, options));
  options.framework = Framework::kMegatron;
  CHECK_THROWS_WITH_AS(check_precision(cluster, options),
                       doctest::Contains("compile: framework megatron"), InputError);
  options.framework = Framework::kDeepSpeed;
  CHECK_THROWS_WITH_AS(check_precision(cluster, options),
                       doctest::Contains("compile: framework deepspeed"), InputError);
  options.framework = Framework::kMeshplan;
  CHECK_THROWS_WITH_AS(check_precision(cluster, options),
                       doctest::Contains("compile: framework meshplan"), InputError);
}

TEST_CASE("round trip: compile is stored only when on and read back") {
  Plan plan;
  plan.model = models::load_model("megatron-7.5b");
  plan.cluster = models::load_cluster("dgx-h100");
  plan.num_gpus = 64;
  plan.layout = make_layout(1, 1, 64, 1, 64);
  plan.layout.zero = 3;
  plan.options.framework = Framework::kFsdp;
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("compile"));
  plan.options.compile = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("compile") == true);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.compile);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["compile"] = "on";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"), doctest::Contains("p.json: options: compile"),
                       InputError);
  // compile_loss: written only when false (--compile blocks), and only with compile.
  CHECK_FALSE(json.at("options").contains("compile_loss"));
  plan.options.compile_loss = false;
  const nlohmann::json blocks = plan_to_json(plan, {});
  CHECK(blocks.at("options").at("compile_loss") == false);
  CHECK(plan_from_json(blocks, "p.json") == plan);
  nlohmann::json loss_without_compile = blocks;
  loss_without_compile["options"].erase("compile");
  CHECK_THROWS_WITH_AS(plan_from_json(loss_without_compile, "p.json"),
                       doctest::Contains("p.json: options: compile_loss: only with compile true"),
                       InputError);
  nlohmann::json megatron = json;
  megatron["options"]["framework"] = "megatron";
  CHECK_THROWS_WITH_AS(plan_from_json(megatron, "p.json"),
                       doctest::Contains("compile: framework megatron"), InputError);
}

}  // namespace
}  // namespace meshplan::planner
