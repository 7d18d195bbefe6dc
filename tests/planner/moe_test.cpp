// Mixture-of-experts planning (expert parallelism) against values worked out by hand.
//
// The case: the tiny-moe preset (4 layers, the first dense; h 64, a 4, g 2, d 16, f 176
// SwiGLU, V 256, s 32, RMSNorm, untied; E 4 experts of f_e 96, top-2) on local-cpu (fp32,
// e = 4 bytes), tp 1, pp 1.
//   Dense layer: 46,208 parameters (moe_parameter_count_test.cpp).
//   MoE layer without its experts: attention 12,288 + router 4 * 64 = 256 + norms 128 = 12,672.
//   One expert: 3 * 64 * 96 = 18,432; with ep 2 a rank holds 2 of them per MoE layer.
//   Stage (pp 1): non-expert 46,208 + 3 * 12,672 + embedding 16,384 + final norm 64 + LM head
//   16,384 = 117,056; experts 3 * 2 * 18,432 = 110,592.
// All-to-all (Megatron-Core's alltoall dispatcher, dropless): a rank sends its T = 32 tokens
// k = 2 times, h = 64 fp32 elements each: 32 * 2 * 64 * 4 = 16,384 bytes per dispatch or
// combine; two of them per MoE layer and micro-batch forward, two backward.

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "compute_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/search.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

using test::local_cpu;
using test::tiny_moe;

Layout with_ep(Layout layout, int64_t ep) {
  layout.ep = ep;
  return layout;
}

}  // namespace

TEST_CASE("tiny-moe: experts split over ep, the rest replicated over dp") {
  const Layout layout = with_ep(make_layout(1, 1, 2, 1, 4), 2);
  CHECK(stage_expert_parameter_count(tiny_moe(), layout, 0, PlanOptions{}) ==
        110'592);  // 3 * 2 * 18,432
  CHECK(stage_parameter_count(tiny_moe(), layout, 0, PlanOptions{}) == 117'056 + 110'592);
  // ep 1: all four experts of each MoE layer: the whole model, 338,240 parameters.
  CHECK(stage_parameter_count(tiny_moe(), with_ep(layout, 1), 0, PlanOptions{}) ==
        models::count_parameters(tiny_moe()).total);
  CHECK(chunk_layers(tiny_moe(), layout, 0, 0).num_moe(tiny_moe()) == 3);
  // pp 2: stage 0 holds layers 0-1 (one dense, one MoE), stage 1 layers 2-3 (both MoE).
  Layout two_stages = with_ep(make_layout(1, 2, 2, 1, 4), 2);
  CHECK(chunk_layers(tiny_moe(), two_stages, 0, 0).num_moe(tiny_moe()) == 1);
  CHECK(chunk_layers(tiny_moe(), two_stages, 1, 0).num_moe(tiny_moe()) == 2);
  CHECK(stage_expert_parameter_count(tiny_moe(), two_stages, 1, PlanOptions{}) == 2 * 2 * 18'432);
}

TEST_CASE("tiny-moe: token permutations, the dispatcher's second sort with 2+ local experts") {
  // tiny-moe on local-cpu: T = 32 tokens a micro-batch, k = 2, h = 64, fp32. The permute before
  // the dispatch and the unpermute after the combine read and write T k h e = 16,384 B each:
  // 65,536 B. With more than one local expert (E 4 / ep) the alltoall dispatcher also sorts the
  // received copies by local expert and un-sorts them (Megatron-Core token_dispatcher.py
  // dispatch_postprocess Permutation 2, combine_preprocess Unpermutation 2): as much again, times
  // etp (the copies gathered from the etp ranks first).
  const Layout one_local = with_ep(make_layout(1, 1, 4, 1, 4), 4);  // 1 expert per rank
  CHECK(moe_permute_bytes(tiny_moe(), local_cpu(), one_local, {}) == 65'536);
  const Layout two_local = with_ep(make_layout(1, 1, 4, 1, 4), 2);
  CHECK(moe_permute_bytes(tiny_moe(), local_cpu(), two_local, {}) == 2 * 65'536);
  // tp 2 with sequence parallelism, ep 2, etp = tp: T k / sp = 32 copies sent, 64 sorted.
  Layout tp2 = with_ep(make_layout(2, 1, 2, 1, 2), 2);
  tp2.sequence_parallel = true;
  CHECK(moe_permute_bytes(tiny_moe(), local_cpu(), tp2, {}) == 4.0 * 32 * 64 * 4 * (1 + 2));
}

TEST_CASE("tiny-moe: model FLOPs count k of E experts and the router") {
  // Per token, forward: dense layer QKV 2 * 64 * (4 + 2 * 2) * 16 = 16,384, scores and values
  // 4 * 32 * 4 * 16 = 8,192, output 2 * 64 * 64 = 8,192, MLP 2 * 64 * 176 * 3 = 67,584:
  // 100,352. MoE layer: 32,768 + experts 2 * 64 * (2 * 96) * 3 = 73,728 + router 2 * 64 * 4 =
  // 512: 107,008. LM head 2 * 64 * 256 = 32,768. Step: 3 (forward + backward) per token:
  // 3 * (100,352 + 3 * 107,008 + 32,768) = 1,362,432; 32 tokens a sequence.
  CHECK(model_flops_per_step(tiny_moe(), 1) ==
        doctest::Approx(1'362'432.0 * 32).epsilon(1e-12).scale(0));
}

TEST_CASE("DeepSeek-V3: MLA and MoE forward FLOPs per token, by weight") {
  const models::TransformerConfig ds = models::load_model("deepseek-v3");
  // MLA: every projection weight once per token (2 FLOPs each): the attention's 187,107,328
  // weights less the norms (1536 + 512) and the output projection 128 * 128 * 7168 =
  // 117,440,512 leave 69,664,768 for the down and up projections.
  const LayerFlops dense = layer_forward_flops(ds, 1.0, LayerKind{false, false});
  CHECK(dense.qkv == 2.0 * 69'664'768);
  CHECK(dense.output == 2.0 * 117'440'512.0);
  CHECK(dense.attention == 2.0 * 4096 * 128 * (192 + 128));  // scores over d_qk, values d_v
  CHECK(dense.mlp == 2.0 * 7168 * 18432 * 3);
  CHECK(dense.router == 0);
  const LayerFlops moe = layer_forward_flops(ds, 1.0, LayerKind{true, false});
  CHECK(moe.mlp == 2.0 * 7168 * (8 * 2048 + 2048) * 3);  // 8 routed + 1 shared expert
  CHECK(moe.router == 2.0 * 7168 * 256);
}

TEST_CASE("tiny-moe: dispatch and combine all-to-alls in the inventory, on the ep group") {
  const Layout layout = with_ep(make_layout(1, 1, 2, 1, 4), 2);  // m = 4 / 2 = 2
  CHECK(moe_all_to_all_bytes(tiny_moe(), local_cpu(), layout) == 16'384);
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), layout);
  REQUIRE(estimate.rejection_code == "");
  const CollectiveTraffic* forward = test::find_traffic(
      estimate.collectives, "ep: MoE token dispatch and combine all-to-alls (forward)");
  const CollectiveTraffic* backward = test::find_traffic(
      estimate.collectives, "ep: MoE token dispatch and combine all-to-alls (backward)");
  REQUIRE(forward != nullptr);
  REQUIRE(backward != nullptr);
  CHECK(forward->kind == CollectiveKind::kAllToAll);
  CHECK(forward->group == CommGroup::kEp);
  CHECK(forward->group_size == 2);
  CHECK(forward->message_bytes == 16'384);
  CHECK(forward->calls_per_step == 12);  // 2 per MoE layer x 3 layers x 2 micro-batches
  CHECK(backward->calls_per_step == 12);
  // Two ranks in one node: (n - 1)/n of 16,384 bytes at 5e9 B/s x 0.5 efficiency, plus one
  // 1 us step: 8,192 / 2.5e9 + 1e-6 = 4.2768e-6 s.
  CHECK(forward->seconds_per_call == doctest::Approx(4.2768e-6).epsilon(1e-9).scale(0));
  // dp / ep = 1: no expert gradient reduction.
  CHECK(test::find_traffic(estimate.collectives, "expert_dp: expert gradient all-reduce") ==
        nullptr);
  // Megatron's dispatcher gathers every ep rank's E int64 token counts before each forward
  // dispatch: 2 ranks x 4 experts x 8 B = 64 B, once per MoE layer and micro-batch (3 x 2).
  const CollectiveTraffic* counts = test::find_traffic(
      estimate.collectives, "ep: MoE token-count all-gather (dispatch preprocess)");
  REQUIRE(counts != nullptr);
  CHECK(counts->kind == CollectiveKind::kAllGather);
  CHECK(counts->group == CommGroup::kEp);
  CHECK(counts->message_bytes == 64);
  CHECK(counts->calls_per_step == 6);
  // The estimate's exposed ep time is those calls: per MoE layer and micro-batch the 4
  // all-to-alls and the token-count gather. (Checked with an absolute tolerance of 1e-5 s before
  // 2026-11-25, this read the all-to-alls alone, 6% short of the estimate's own count.)
  double ep_seconds = 0;
  for (const ChunkCost& chunk : estimate.stages[0].chunks) {
    ep_seconds += chunk.forward_ep_comm_seconds + chunk.backward_ep_comm_seconds;
  }
  CHECK(ep_seconds * 2 ==
        doctest::Approx(forward->seconds_per_call * 12 + backward->seconds_per_call * 12 +
                        counts->seconds_per_call * 6)
            .scale(0));
}

TEST_CASE("MoE every other layer (moe_layers): the inventory, stages and parameters follow it") {
  models::TransformerConfig alternate = tiny_moe();
  alternate.first_dense_layers = 0;
  alternate.moe_layers = {1, 0, 1, 0};  // 2 MoE layers where tiny-moe has 3
  // pp 2: layers 0-1 and 2-3, one MoE layer each.
  const Layout pp2 = make_layout(1, 2, 1, 1, 4);
  CHECK(chunk_layers(alternate, pp2, 0, 0).num_moe(alternate) == 1);
  CHECK(chunk_layers(alternate, pp2, 1, 0).num_moe(alternate) == 1);
  CHECK(chunk_layers(tiny_moe(), pp2, 0, 0).num_moe(tiny_moe()) == 1);  // layer 1 of 0-1
  CHECK(stage_parameter_count(alternate, pp2, 0, {}) +
            stage_parameter_count(alternate, pp2, 1, {}) ==
        models::count_parameters(alternate).total);
  // ep 2: 2 all-to-alls per MoE layer and micro-batch, 2 MoE layers x 2 micro-batches.
  const Layout layout = with_ep(make_layout(1, 1, 2, 1, 4), 2);
  const PlanEstimate estimate = estimate_plan(alternate, local_cpu(), layout);
  REQUIRE(estimate.rejection_code == "");
  const CollectiveTraffic* forward = test::find_traffic(
      estimate.collectives, "ep: MoE token dispatch and combine all-to-alls (forward)");
  REQUIRE(forward != nullptr);
  CHECK(forward->calls_per_step == 8);
  // Model FLOPs: one layer's top-2 of 4 experts of 96 and its router become a dense MLP of 176
  // (h 64): per token 2 (2 x 3 h 96 + h 4) - 2 x 3 h 176 = 74,240 - 67,584 = 6,656 forward,
  // x 3 with the backward, x 4 sequences of 32 tokens.
  CHECK(model_flops_per_step(tiny_moe(), 4) - model_flops_per_step(alternate, 4) ==
        doctest::Approx(3.0 * 128 * 6'656).epsilon(1e-12).scale(0));
}

TEST_CASE("tiny-moe: the load-balancing loss all-reduces token counts over cp when it is on") {
  Layout layout = with_ep(make_layout(1, 1, 1, 1, 4), 2);
  layout.cp = 2;  // m = 4 micro-batches
  const char* what = "cp: MoE router token-count all-reduce (load-balancing loss)";
  CHECK(test::find_traffic(estimate_plan(tiny_moe(), local_cpu(), layout).collectives, what) ==
        nullptr);
  PlanOptions options;
  options.moe_aux_loss_coeff = 0.01;
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), layout, options);
  const CollectiveTraffic* counts = test::find_traffic(estimate.collectives, what);
  REQUIRE(counts != nullptr);
  CHECK(counts->kind == CollectiveKind::kAllReduce);
  CHECK(counts->group == CommGroup::kCp);
  CHECK(counts->message_bytes == 4 * 8);   // E int64 counts
  CHECK(counts->calls_per_step == 3 * 4);  // each MoE layer's forward, 4 micro-batches
}

TEST_CASE("tiny-moe: expert gradients reduce over dp / ep; ZeRO shards them there") {
  Layout layout = with_ep(make_layout(1, 1, 4, 1, 8), 2);  // expert data parallel 4 / 2 = 2
  const PlanEstimate estimate = estimate_plan(tiny_moe(), local_cpu(), layout);
  const CollectiveTraffic* expert_grads =
      test::find_traffic(estimate.collectives, "expert_dp: expert gradient all-reduce");
  REQUIRE(expert_grads != nullptr);
  CHECK(expert_grads->group == CommGroup::kExpertDp);
  CHECK(expert_grads->group_size == 2);
  CHECK(expert_grads->message_bytes == 110'592 * 4);  // the rank's experts, fp32
  CHECK(expert_grads->calls_per_step == 1);

  // ZeRO-1 in fp32 (ZeRO, Rajbhandari et al. 2020, Fig. 1: 4 + 4 + 8/d bytes): Adam states of
  // the 117,056 non-expert parameters over dp 4, of the 110,592 expert ones over dp / ep 2.
  layout.zero = 1;
  const MemoryBreakdown memory = stage_memory(tiny_moe(), local_cpu(), layout, PlanOptions{}, 0,
                                              peak_in_flight(layout.schedule, 1, 1, 2, 0));
  CHECK(memory.optimizer_bytes == 8 * 117'056 / 4 + 8 * 110'592 / 2);  // 234,112 + 442,368
  CHECK(memory.weights_bytes == 4 * (117'056 + 110'592));
}

TEST_CASE("expert-parallel validity rules name what is wrong") {
  const auto reason = [](const models::TransformerConfig& model, Layout layout) {
    const Validity validity = check_layout(model, local_cpu(), layout.num_gpus(), layout);
    return validity.code + ": " + validity.reason;
  };
  const models::TransformerConfig dense = models::load_model("tiny");
  CHECK(reason(dense, with_ep(make_layout(1, 1, 2, 1, 2), 2)) ==
        "ep: expert parallelism needs a mixture-of-experts model (ep 2, num_experts 0)");
  CHECK(reason(tiny_moe(), with_ep(make_layout(1, 1, 2, 1, 2), 4)) ==
        "ep_dp: ep must divide dp*cp: experts are split over data- and context-parallel ranks "
        "(2 % 4)");
  // Experts are laid over the dp x cp ranks (Megatron-Core: ep * expert_dp = dp * cp): with
  // dp 1 and cp 2, ep 2 passes the rule and ep 4 does not.
  Layout cp2 = make_layout(1, 1, 1, 1, 1);
  cp2.cp = 2;
  CHECK(check_layout(tiny_moe(), local_cpu(), 2, with_ep(cp2, 2)).code != "ep_dp");
  CHECK(reason(tiny_moe(), with_ep(cp2, 4)) ==
        "ep_dp: ep must divide dp*cp: experts are split over data- and context-parallel ranks "
        "(2 % 4)");
  CHECK(reason(tiny_moe(), with_ep(make_layout(1, 1, 3, 1, 3), 3)) ==
        "ep_experts: num_experts not divisible by ep (4 % 3)");
  CHECK(reason(tiny_moe(), make_layout(2, 1, 1, 1, 1)) ==
        "moe_sequence_parallel: Megatron-LM runs mixture-of-experts with tp > 1 only with "
        "sequence parallelism");
  Layout zero3 = make_layout(1, 1, 2, 1, 2);
  zero3.zero = 3;
  CHECK(reason(tiny_moe(), zero3) == "moe_zero3: ZeRO-3 of expert parameters is not modelled");
}

TEST_CASE("an all-to-all over nodes: NVLink and NIC shares at once, or the NICs alone") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const double bytes = 1 << 20;
  const double nvlink =
      cluster.intra_node_bytes_per_second * cluster.efficiency.collective_efficiency;
  const double nic =
      cluster.inter_node_bytes_per_second_per_gpu * cluster.efficiency.collective_efficiency;
  // 8 ranks in one node: 7/8 of the buffer over NVLink, 7 latency steps.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllToAll, 1 << 20, 8, 1) ==
        doctest::Approx(7.0 / 8.0 * bytes / nvlink + 7 * cluster.intra_node_latency_seconds)
            .scale(0));
  // 16 ranks filling two nodes: 7/16 of each buffer to the node's other members over NVLink and
  // 8/16 through the rank's NIC, both at once; the slower share sets the pace.
  const double two_nodes =
      std::max(7.0 / 16.0 * bytes / nvlink + 7 * cluster.intra_node_latency_seconds,
               8.0 / 16.0 * bytes / nic + 8 * cluster.inter_node_latency_seconds);
  CHECK(collective_seconds(cluster, CollectiveKind::kAllToAll, 1 << 20, 16, 1) ==
        doctest::Approx(two_nodes).scale(0));
  // One rank per node (stride 8): all 15/16 of the buffer at the NIC rate, 15 inter-node steps.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllToAll, 1 << 20, 16, 8) ==
        doctest::Approx(15.0 / 16.0 * bytes / nic + 15 * cluster.inter_node_latency_seconds)
            .scale(0));
}

TEST_CASE("the search tries ep among the divisors of dp that divide the expert count") {
  SearchSpace space;
  space.num_gpus = 4;
  space.global_batch = 8;
  space.tp = 1;
  space.pp = 1;
  space.micro_batch = 1;
  space.recompute = Recompute::kNone;
  space.zero = 0;
  const SearchResult result =
      search_layouts(tiny_moe(), local_cpu(), space, PlanOptions{}, Objective::kTime, 10);
  // dp 4: ep 1, 2 and 4 (all divide E = 4), one layout each.
  CHECK(result.num_evaluated == 3);
  std::vector<int64_t> eps;
  for (const PlanEstimate& estimate : result.best) {
    eps.push_back(estimate.layout.ep);
  }
  std::sort(eps.begin(), eps.end());
  CHECK(eps == std::vector<int64_t>{1, 2, 4});
}

TEST_CASE("with context parallelism ep ranges over the dp x cp ranks") {
  SearchSpace space;
  space.num_gpus = 4;
  space.global_batch = 8;
  space.tp = 1;
  space.pp = 1;
  space.cp = 2;
  space.micro_batch = 1;
  space.recompute = Recompute::kNone;
  space.zero = 0;
  const SearchResult result =
      search_layouts(tiny_moe(), local_cpu(), space, PlanOptions{}, Objective::kTime, 10);
  // dp 2 x cp 2 = 4 gradient ranks: ep 1, 2 and 4 (ep 4 > dp, allowed since Megatron-Core lays
  // experts over dp x cp), one layout each.
  std::vector<int64_t> eps;
  for (const PlanEstimate& estimate : result.best) {
    CHECK(estimate.layout.cp == 2);
    CHECK(estimate.layout.dp == 2);
    eps.push_back(estimate.layout.ep);
  }
  std::sort(eps.begin(), eps.end());
  CHECK(eps == std::vector<int64_t>{1, 2, 4});
  // ep 4 over the 4 ranks: one expert-data-parallel rank, so no expert gradient reduction;
  // ep 2: two, ZeRO-1 shards expert states in halves.
  Layout layout = result.best.front().layout;
  layout.ep = 4;
  CHECK(expert_data_parallel(layout) == 1);
  layout.ep = 2;
  CHECK(expert_data_parallel(layout) == 2);
  CHECK(grad_group_size(expert_layout(layout)) == 2);
}

TEST_CASE("framework meshplan: layouts its CPU executor refuses are refused at plan time") {
  // executor/shard_dims.cpp validate_moe_for_executor: experts at tp 1 and ZeRO 0 only;
  // validate_plan_for_executor: attention sinks without context parallelism only.
  PlanOptions options;
  options.framework = Framework::kMeshplan;
  const auto reason = [&](const models::TransformerConfig& model, const Layout& layout) {
    return check_framework(model, options, layout).reason;
  };
  Layout zero1 = with_ep(make_layout(1, 1, 2, 1, 2), 2);
  CHECK(reason(tiny_moe(), zero1).empty());
  zero1.zero = 1;
  CHECK(reason(tiny_moe(), zero1) ==
        "meshplan cannot run this layout: its executor's mixture-of-experts runs ZeRO 0 only "
        "(experts are not ZeRO-sharded) (tp=1 pp=1 dp=2 vpp=1 mb=1 recompute=none sp=off "
        "zero=1 schedule=1f1b ep=2)");
  CHECK(reason(models::load_model("tiny"), zero1).empty());  // a dense model shards with ZeRO
  Layout tp2 = make_layout(2, 1, 1, 1, 2);
  tp2.sequence_parallel = true;
  CHECK(check_framework(tiny_moe(), options, tp2).code == "framework");
  options.framework = Framework::kMegatron;  // Megatron-Core runs both
  CHECK(reason(tiny_moe(), zero1).empty());
  CHECK(reason(tiny_moe(), tp2).empty());
  options.framework = Framework::kMeshplan;
  models::TransformerConfig sinks = models::load_model("tiny");
  sinks.attention_sinks = true;
  Layout cp2 = make_layout(1, 1, 1, 1, 2);
  cp2.cp = 2;
  CHECK(check_framework(sinks, options, cp2).code == "framework");
  cp2.cp = 1;
  CHECK(check_framework(sinks, options, cp2).ok());
  // Gemma 2's soft-cap and query scale run in the same standard kernel (shard_dims.cpp).
  models::TransformerConfig softcap = models::load_model("tiny");
  softcap.attn_logit_softcapping = 50.0;
  CHECK(check_framework(softcap, options, cp2).ok());
  cp2.cp = 2;
  CHECK(reason(softcap, cp2) ==
        "meshplan cannot run this layout: its executor soft-caps attn_logit_softcapping in the "
        "standard attention kernel, not the context-parallel ring's (tp=1 pp=1 dp=1 cp=2 vpp=1 "
        "mb=1 recompute=none sp=off zero=0 schedule=1f1b)");
  options.framework = Framework::kMegatron;
  CHECK(check_framework(softcap, options, cp2).ok());
}

}  // namespace meshplan::planner
