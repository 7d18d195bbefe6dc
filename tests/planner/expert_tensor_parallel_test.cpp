// Expert tensor parallelism (Layout::etp, Megatron --expert-tensor-parallel-size) against values
// worked out by hand.
//
// The case: the tiny-moe preset (4 layers, the first dense; h 64, E 4 experts of f_e 96 SwiGLU,
// top-2, s 32) on local-cpu (fp32, e = 4 bytes, 8 ranks a node), tp 2 with sequence
// parallelism, pp 1, micro-batch 1.
//   One expert: 3 h f_e = 3 * 64 * 96 = 18,432 parameters (fc1 2 f_e columns, fc2 f_e rows).
//   A rank holds E / ep experts of each of the 3 MoE layers, each split over etp ranks
//   (Megatron-Core experts.py TEGroupedMLP on the expert tp group).
//   Expert grid (parallel_state.py initialize_model_parallel, order tp-ep-dp-pp): a stage's
//   tp * cp * dp ranks numbered etp_rank + etp * (ep_rank + ep * expert_dp_rank), so the ep
//   group is ep ranks etp apart and expert dp = tp cp dp / (etp ep).
//   All-to-all (alltoall dispatcher, dropless): a rank sends its T / sp = 32 / 2 tokens k = 2
//   times, h = 64 fp32 elements each: 16 * 2 * 64 * 4 = 8,192 bytes, whatever etp.

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "compute_cost.h"
#include "estimate_internal.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

using test::local_cpu;
using test::tiny_moe;

// tp 2 x dp `dp`, sequence parallel, ep and etp as given.
Layout moe_layout(int64_t dp, int64_t ep, int64_t etp, int64_t global_batch = 4) {
  Layout layout = make_layout(2, 1, dp, 1, global_batch);
  layout.sequence_parallel = true;
  layout.ep = ep;
  set_expert_tensor_parallel(layout, etp);
  return layout;
}

constexpr int64_t kExpert = 3 * 64 * 96;  // 18,432 parameters

}  // namespace

TEST_CASE("etp: 0 spells tp, set_expert_tensor_parallel keeps that one spelling") {
  Layout layout = moe_layout(2, 2, 2);
  CHECK(layout.etp == 0);
  CHECK(expert_tensor_parallel(layout) == 2);
  set_expert_tensor_parallel(layout, 1);
  CHECK(layout.etp == 1);
  CHECK(expert_tensor_parallel(layout) == 1);
  CHECK(describe(layout) ==
        "tp=2 pp=1 dp=2 vpp=1 mb=1 recompute=none sp=on zero=0 schedule=1f1b ep=2 etp=1");
  CHECK(moe_layout(2, 2, 2) == moe_layout(2, 2, 2));
}

TEST_CASE("etp: expert parameters per rank are E / ep experts split over etp, not tp") {
  // tp 2: etp 2 halves each expert, etp 1 keeps them whole.
  CHECK(stage_expert_parameter_count(tiny_moe(), moe_layout(2, 2, 2), 0, PlanOptions{}) ==
        3 * 2 * kExpert / 2);
  CHECK(stage_expert_parameter_count(tiny_moe(), moe_layout(2, 2, 1), 0, PlanOptions{}) ==
        3 * 2 * kExpert);
  CHECK(stage_expert_parameter_count(tiny_moe(), moe_layout(2, 4, 1), 0, PlanOptions{}) ==
        3 * 1 * kExpert);
  // The rest of the stage (attention, router, norms, dense layer, vocabulary) is tp-sharded as
  // before: the same count whatever etp.
  CHECK(stage_parameter_count(tiny_moe(), moe_layout(2, 2, 1), 0, PlanOptions{}) -
            stage_expert_parameter_count(tiny_moe(), moe_layout(2, 2, 1), 0, PlanOptions{}) ==
        stage_parameter_count(tiny_moe(), moe_layout(2, 2, 2), 0, PlanOptions{}) -
            stage_expert_parameter_count(tiny_moe(), moe_layout(2, 2, 2), 0, PlanOptions{}));

  // DeepSeek-V3 (h 7168, 256 experts of 2048, 58 MoE layers of 61), tp 4 x dp 512, ep 8: 32
  // experts of 3 * 7168 * 2048 = 44,040,192 parameters a layer, whole at etp 1, quartered at 4.
  const models::TransformerConfig ds = models::load_model("deepseek-v3");
  Layout layout = make_layout(4, 1, 512, 1, 512);
  layout.ep = 8;
  CHECK(stage_expert_parameter_count(ds, layout, 0, PlanOptions{}) == 58LL * 32 * 44'040'192 / 4);
  set_expert_tensor_parallel(layout, 1);
  CHECK(stage_expert_parameter_count(ds, layout, 0, PlanOptions{}) == 58LL * 32 * 44'040'192);
}

TEST_CASE("etp: the ep group is ep ranks etp apart; expert dp is tp cp dp / (etp ep)") {
  // tp 2 x dp 2: ranks 0-3 of one stage.
  CHECK(expert_parallel_ranks(moe_layout(2, 2, 2), 1) == std::vector<int64_t>{1, 3});
  CHECK(expert_parallel_ranks(moe_layout(2, 2, 1), 3) == std::vector<int64_t>{2, 3});
  CHECK(expert_parallel_ranks(moe_layout(2, 4, 1), 2) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(group_stride(moe_layout(2, 4, 1), CommGroup::kEp) == 1);
  CHECK(group_stride(moe_layout(2, 2, 2), CommGroup::kEp) == 2);
  // Stage 1 of pp 2 starts at rank 4.
  Layout two_stages = moe_layout(2, 4, 1, 4);
  two_stages.pp = 2;
  CHECK(expert_parallel_ranks(two_stages, 6) == std::vector<int64_t>{4, 5, 6, 7});
  // tp 2 x dp 4 = 8 ranks: 8 / (1 * 2) = 4 expert-dp ranks 2 apart at etp 1, 8 / (2 * 2) = 2 at
  // etp 2.
  CHECK(expert_data_parallel(moe_layout(4, 2, 1, 8)) == 4);
  CHECK(expert_data_parallel(moe_layout(4, 2, 2, 8)) == 2);
  CHECK(group_stride(moe_layout(4, 2, 1, 8), CommGroup::kExpertDp) == 2);
  CHECK(group_stride(moe_layout(4, 2, 2, 8), CommGroup::kExpertDp) == 4);
  const Layout expert = expert_layout(moe_layout(4, 2, 1, 8));
  CHECK(expert.tp == 1);
  CHECK(grad_group_size(expert) == 4);
}

TEST_CASE("etp 1: all-to-alls over ep ranks of the tp group, no routed-token gathers") {
  const Layout layout = moe_layout(2, 4, 1);  // m = 4 / 2 = 2
  CHECK(moe_all_to_all_bytes(tiny_moe(), local_cpu(), layout) == 8'192);
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), layout);
  REQUIRE(estimate.rejection_code == "");
  const CollectiveTraffic* forward = test::find_traffic(
      estimate.collectives, "ep: MoE token dispatch and combine all-to-alls (forward)");
  REQUIRE(forward != nullptr);
  CHECK(forward->group == CommGroup::kEp);
  CHECK(forward->group_size == 4);
  CHECK(forward->message_bytes == 8'192);
  CHECK(forward->calls_per_step == 12);  // 2 per MoE layer x 3 layers x 2 micro-batches
  // Four ranks in one node: 3/4 of 8,192 bytes at 5e9 B/s x 0.5 efficiency, plus three 1 us
  // steps: 6,144 / 2.5e9 + 3e-6 = 5.4576e-6 s.
  CHECK(forward->seconds_per_call == doctest::Approx(5.4576e-6).epsilon(1e-9).scale(0));
  CHECK(test::find_traffic(estimate.collectives,
                           "tp: MoE routed-token all-gathers (forward; backward of combine)") ==
        nullptr);
  CHECK(test::find_traffic(
            estimate.collectives,
            "tp: MoE routed-token reduce-scatters (forward; backward of dispatch)") == nullptr);
  // 4 / (1 * 4): one expert-dp rank, nothing to reduce.
  CHECK(test::find_traffic(estimate.collectives, "expert_dp: expert gradient all-reduce") ==
        nullptr);
}

TEST_CASE("etp = tp: the dispatched tokens are gathered over the etp ranks") {
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), moe_layout(2, 2, 2));
  REQUIRE(estimate.rejection_code == "");
  const CollectiveTraffic* gathers = test::find_traffic(
      estimate.collectives, "tp: MoE routed-token all-gathers (forward; backward of combine)");
  REQUIRE(gathers != nullptr);
  CHECK(gathers->group_size == 2);
  // Gathered output: T k etp / sp = 32 * 2 * 2 / 2 = 64 tokens of 64 fp32: 16,384 bytes.
  CHECK(gathers->message_bytes == 16'384);
  CHECK(gathers->calls_per_step == 3 * 2 * 2);  // forward and the combine's backward
}

TEST_CASE("etp: expert GEMMs are E / ep experts of width f_e / etp on T k etp ep / (E t) tokens") {
  // tp 2, ep 2: etp 1 runs 2 experts whole on 32 * 2 * 1 * 2 / (4 * 2) = 16 tokens each, etp 2
  // runs them halved on 32 tokens (the two etp ranks share them). fc1 is h x 2 f (SwiGLU),
  // fc2 f x h; everything else in the chunk (attention, router, element-wise work, embedding,
  // LM head) is the same layout's, so the difference is the 3 MoE layers' expert GEMMs and, as
  // etp 2 gathers the dispatched copies before the alltoall dispatcher sorts them by local expert
  // (token_dispatcher.py dispatch_postprocess, Permutation 2; 2 local experts), one more
  // sort and unsort: read and write T k / sp = 32 * 2 / 2 copies of 64 fp32 more each.
  const ChunkCost one = chunk_cost(tiny_moe(), local_cpu(), moe_layout(2, 2, 1), {}, 0, 0);
  const ChunkCost two = chunk_cost(tiny_moe(), local_cpu(), moe_layout(2, 2, 2), {}, 0, 0);
  const auto gemm = [](double m, double n, double k) { return gemm_seconds(local_cpu(), m, n, k); };
  const double experts_etp1 = 2 * (gemm(16, 2 * 96, 64) + gemm(16, 64, 96));
  const double experts_etp2 = 2 * (gemm(32, 2 * 48, 64) + gemm(32, 64, 48));
  const double sort_etp2_extra_bytes = 2.0 * 2.0 * 32 * 2 * 64 * 4 / 2;
  const double sort_etp2_extra = sort_etp2_extra_bytes / (local_cpu().gpu.hbm_bytes_per_second *
                                                          local_cpu().efficiency.hbm_efficiency);
  CHECK(one.forward_compute_seconds - two.forward_compute_seconds ==
        doctest::Approx(3 * (experts_etp1 - experts_etp2 - sort_etp2_extra)).scale(0));
  // The same FLOPs either way: 2 * (16 * 192 * 64 + 16 * 64 * 96) = 2 * (32 * 96 * 64 + 32 *
  // 64 * 48).
  CHECK(one.forward_flops == two.forward_flops);
}

TEST_CASE("etp: expert gradients reduce over tp dp / (etp ep) ranks; weights per rank") {
  const Layout layout = moe_layout(4, 2, 1, 8);  // 8 ranks, expert dp 4
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), layout);
  REQUIRE(estimate.rejection_code == "");
  const CollectiveTraffic* grads =
      test::find_traffic(estimate.collectives, "expert_dp: expert gradient all-reduce");
  REQUIRE(grads != nullptr);
  CHECK(grads->group == CommGroup::kExpertDp);
  CHECK(grads->group_size == 4);
  CHECK(grads->message_bytes == 3 * 2 * kExpert * 4);  // the rank's whole experts, fp32

  // ZeRO-1 keeps whole fp32 weights: etp 1 holds 3 * 2 * 18,432 expert parameters, etp 2 half
  // of them; everything else is the same layout.
  Layout zero1 = layout;
  zero1.zero = 1;
  Layout zero1_etp2 = moe_layout(4, 2, 2, 8);
  zero1_etp2.zero = 1;
  const InFlight in_flight = peak_in_flight(zero1.schedule, 1, 1, 2, 0);
  const MemoryBreakdown one = stage_memory(tiny_moe(), local_cpu(), zero1, {}, 0, in_flight);
  const MemoryBreakdown two = stage_memory(tiny_moe(), local_cpu(), zero1_etp2, {}, 0, in_flight);
  CHECK(one.weights_bytes - two.weights_bytes == 4 * 3 * 2 * kExpert / 2);
}

TEST_CASE("etp validity rules name the field") {
  const auto reason = [](const models::TransformerConfig& model, const Layout& layout) {
    const Validity validity = check_layout(model, local_cpu(), layout.num_gpus(), layout);
    return validity.code + ": " + validity.reason;
  };
  Layout four = moe_layout(2, 2, 2);
  four.etp = 4;
  CHECK(reason(tiny_moe(), four) ==
        "etp_tp: etp must divide tp: meshplan models the expert tensor-parallel group inside "
        "the tp group (2 % 4)");
  Layout negative = moe_layout(2, 2, 2);
  negative.etp = -1;
  CHECK(reason(tiny_moe(), negative) == "etp: etp must be positive (-1)");
  // tp 2 x dp 1 = 2 ranks cannot hold etp 1 x ep 4.
  CHECK(reason(tiny_moe(), moe_layout(1, 4, 1, 2)) ==
        "ep_dp: etp*ep must divide tp*cp*dp: the expert grid etp x ep x expert-dp covers a "
        "stage's ranks (2 % 4)");
  // At etp 1, ep 4 > dp 2 is allowed: the experts fold over the tp ranks too.
  CHECK(check_layout(tiny_moe(), local_cpu(), 4, moe_layout(2, 4, 1)).ok());
  Layout tp_pp_dp = moe_layout(2, 2, 1);
  tp_pp_dp.placement = Placement::kTpPpDp;
  CHECK(reason(tiny_moe(), tp_pp_dp) ==
        "etp_placement: etp != tp needs placement tp-dp-pp (Megatron-Core's expert order "
        "tp-ep-dp-pp); not modelled under tp-pp-dp (etp 1, tp 2)");
  Layout dense = make_layout(2, 1, 1, 1, 1);
  dense.sequence_parallel = true;
  set_expert_tensor_parallel(dense, 1);
  CHECK(reason(models::load_model("tiny"), dense) ==
        "etp: expert tensor parallelism needs a mixture-of-experts model (etp 1, num_experts 0)");
  CHECK(check_framework(Framework::kDeepSpeed, moe_layout(2, 2, 1)).code == "framework");
  CHECK(check_framework(Framework::kMegatron, moe_layout(2, 2, 1)).ok());
}

TEST_CASE("etp: plan files write layout.etp only when it differs from tp; absent is tp") {
  Plan plan;
  plan.model = tiny_moe();
  plan.cluster = local_cpu();
  plan.num_gpus = 4;
  plan.layout = moe_layout(2, 4, 1);
  const nlohmann::json json = plan_to_json(plan, nlohmann::json::object());
  CHECK(json.at("layout").at("etp") == 1);
  CHECK(plan_from_json(json, "p.json") == plan);

  plan.layout = moe_layout(2, 2, 2);
  nlohmann::json same = plan_to_json(plan, nlohmann::json::object());
  CHECK_FALSE(same.at("layout").contains("etp"));
  CHECK(plan_from_json(same, "p.json").layout.etp == 0);
  same["layout"]["etp"] = 2;  // written out as tp: read as the one spelling, 0
  CHECK(plan_from_json(same, "p.json") == plan);
}

TEST_CASE("the search tries etp tp and 1, with ep over tp cp dp / etp, and keeps the fastest") {
  SearchSpace space;
  space.num_gpus = 4;
  space.global_batch = 4;
  space.tp = 2;
  space.pp = 1;
  space.micro_batch = 1;
  space.recompute = Recompute::kNone;
  space.sequence_parallel = true;
  space.zero = 0;
  const SearchResult result =
      search_layouts(tiny_moe(), local_cpu(), space, PlanOptions{}, Objective::kTime, 10);
  // etp 2: ep in {1, 2} (divisors of dp 2); etp 1: ep in {1, 2, 4} (divisors of tp dp = 4).
  CHECK(result.num_evaluated == 5);
  REQUIRE(result.best.size() == 5);
  double fastest = 1e30;
  for (const auto& [ep, etp] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 2}, {1, 1}, {2, 1}, {4, 1}}) {
    fastest = std::min(fastest,
                       estimate_plan(tiny_moe(), local_cpu(), moe_layout(2, ep, etp)).step_time_s);
  }
  CHECK(result.best.front().step_time_s == fastest);
  // --etp fixes it: 2 layouts at etp 2.
  space.etp = 2;
  CHECK(search_layouts(tiny_moe(), local_cpu(), space, PlanOptions{}, Objective::kTime, 10)
            .num_evaluated == 2);
}

TEST_CASE("MoE activations: the routed tokens an etp group gathers, not the whole tp group") {
  // Megatron-Core's alltoall dispatcher gathers the sequence-parallel tokens' k routed copies
  // over the etp ranks only: T k h e etp / tp per layer and micro-batch (T k h e at etp = tp).
  // tiny-moe at tp 2 with sequence parallelism, micro-batch 2: etp 2 against etp 1 differ by
  // T k h e / 2.
  const models::TransformerConfig model = models::load_model("tiny-moe");
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  Layout layout = make_layout(2, 1, 2, 2, 8);
  layout.sequence_parallel = true;
  layout.ep = 2;
  const PlanOptions options;
  const double at_tp = activation_bytes_per_layer(model, cluster, layout, options, true);
  set_expert_tensor_parallel(layout, 1);
  const double at_one = activation_bytes_per_layer(model, cluster, layout, options, true);
  const double tokens = 2.0 * static_cast<double>(model.seq_length);
  const double routed_bytes = tokens * static_cast<double>(model.experts_per_token) *
                              static_cast<double>(model.hidden_size) * 4.0;
  CHECK(at_tp - at_one == doctest::Approx(routed_bytes / 2).scale(0));
}

}  // namespace meshplan::planner
