// Megatron-Core's flex token dispatcher (DeepEP normal kernels) against values worked out by
// hand (planner/moe_cost.cpp moe_flex_traffic, docs/research/flex-dispatcher.md).
//
// The case: tiny-moe (h 64, 4 layers, the first dense) with 32 experts, top-4, and 4,096 tokens
// per sequence, on dgx-h100 (bf16, e = 2 B; NVLink 450e9 B/s, NIC 50e9 B/s per GPU, latencies
// 2 us and 5 us), tp 1, micro-batch 1: a rank dispatches T h e = 4,096 x 64 x 2 = 524,288 B of
// tokens per MoE layer. With ep 16 over 16 GPUs (two nodes of 8) each rank holds 2 experts, each
// node 16. Balanced routing draws a token's 4 experts as 4 distinct of the 32:
//   P(a node is missed) = C(16, 4) / C(32, 4) = 1,820 / 35,960;
//   P(a rank is missed) = C(30, 4) / C(32, 4) = 27,405 / 35,960.
// DeepEP's published efficiencies (H800, docs/legacy.md): NVLink 153/200 (dispatch) and 158/200
// (combine) of the link, RDMA 43/50, on logical bytes (own node and own rank included).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "compute_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

models::TransformerConfig flex_moe() {
  models::TransformerConfig model = test::tiny_moe();
  model.num_experts = 32;
  model.experts_per_token = 4;
  model.seq_length = 4096;
  return model;
}

Layout with_flex_ep(Layout layout, int64_t ep) {
  layout.ep = ep;
  layout.etp = 1;
  return layout;
}

PlanOptions flex() {
  PlanOptions options;
  options.moe_dispatcher = MoeDispatcher::kFlex;
  return options;
}

constexpr double kTokenBytes = 4096.0 * 64 * 2;
constexpr double kNodeMissed = 1820.0 / 35960.0;
constexpr double kRankMissed = 27405.0 / 35960.0;

}  // namespace

// A model routing k of E experts, with G groups of which M per token when `groups` > 0.
models::TransformerConfig routed(int64_t experts, int64_t k, int64_t groups = 0,
                                 int64_t chosen = 0) {
  models::TransformerConfig model = flex_moe();
  model.num_experts = experts;
  model.experts_per_token = k;
  model.router_num_groups = groups;
  model.router_group_topk = chosen;
  return model;
}

TEST_CASE("expected destinations: G (1 - C(E - E/G, k) / C(E, k)), by enumeration and binomials") {
  // E 4, G 2, k 2: of the 6 pairs only {2, 3} misses group {0, 1}: 2 x 5/6 groups.
  CHECK(moe_expected_destinations(routed(4, 2), 2) == doctest::Approx(10.0 / 6.0).scale(0));
  // Qwen3-30B-A3B's routing (E 128, k 8) over two nodes: C(64, 8) / C(128, 8) =
  // 4,426,165,368 / 1,429,702,652,400.
  CHECK(moe_expected_destinations(routed(128, 8), 2) ==
        doctest::Approx(2.0 * (1.0 - 4426165368.0 / 1429702652400.0)).scale(0));
  // Over 16 ranks of 8 experts: C(120, 8) / C(128, 8) = 840,261,910,995 / 1,429,702,652,400.
  CHECK(moe_expected_destinations(routed(128, 8), 16) ==
        doctest::Approx(16.0 * (1.0 - 840261910995.0 / 1429702652400.0)).scale(0));
  // k larger than the experts outside a group: every token reaches it.
  CHECK(moe_expected_groups_hit(4, 3, 2) == 1.0);
  CHECK(moe_expected_range_hit(routed(4, 2), 1, 3) == 1.0);
  // One group: always reached.
  CHECK(moe_expected_destinations(routed(128, 8), 1) == 1.0);
}

TEST_CASE("group-limited routing: M of G groups, k / M experts in each, by enumeration") {
  // E 16 in G 4 groups of 4, M 2 per token, k 4: 2 experts in each chosen group.
  const models::TransformerConfig model = routed(16, 4, 4, 2);
  // Experts [0, 8) are groups 0 and 1 whole: missed only when the token picks {2, 3}, 1 of the
  // C(4, 2) = 6 pairs.
  CHECK(moe_expected_range_hit(model, 0, 8) == doctest::Approx(5.0 / 6.0).scale(0));
  // Experts [2, 6) are half of group 0 and half of group 1; a chosen group misses its half
  // with C(2, 2) / C(4, 2) = 1/6. Over the six pairs: {0, 1} misses with 1/36, {0, 2}, {0, 3},
  // {1, 2}, {1, 3} with 1/6 each, {2, 3} always: (1/36 + 4/6 + 1) / 6 = 61/216.
  CHECK(moe_expected_range_hit(model, 2, 4) == doctest::Approx(1.0 - 61.0 / 216.0).scale(0));
  // One group whole: chosen in 3 of the 6 pairs.
  CHECK(moe_expected_range_hit(model, 4, 4) == doctest::Approx(0.5).scale(0));
  // Every expert: always reached.
  CHECK(moe_expected_range_hit(model, 0, 16) == doctest::Approx(1.0).scale(0));
  // G 1, M 1 is no limit: the hypergeometric of k of E.
  CHECK(moe_expected_range_hit(routed(16, 4, 1, 1), 2, 4) ==
        doctest::Approx(moe_expected_groups_hit(16, 4, 4)).scale(0));
  // Destinations that straddle groups (E 12 in G 4 groups of 3, M 2, k 2: one expert per chosen
  // group; 6 destinations of 2): a token's 2 experts reach 2 destinations unless both sit in one,
  // which happens for {2, 3} and {8, 9}, each with 1/6 x 1/9: 2 - 2/54 = 53/27.
  CHECK(moe_expected_destinations(routed(12, 2, 4, 2), 6) == doctest::Approx(53.0 / 27.0).scale(0));
  // DeepSeek-V3's node-limited routing (E 256, G 8, M 4, k 8) over 8 nodes of one group each:
  // a node is reached when its group is chosen, half the time, so a token reaches M = 4 nodes
  // (Sec. 2.1.2: "each token will be sent to at most M nodes"); over ep 64 ranks of 4 experts a
  // rank is reached when its group is chosen and 1 of the group's 2 picks is among its 4:
  // 1/2 x (1 - C(28, 2) / C(32, 2)) = 1/2 x 118/496.
  const models::TransformerConfig dsv3 = routed(256, 8, 8, 4);
  CHECK(moe_expected_destinations(dsv3, 8) == doctest::Approx(4.0).scale(0));
  CHECK(moe_expected_destinations(dsv3, 64) == doctest::Approx(64.0 * 59.0 / 496.0).scale(0));
  // Without the limit a token reaches 8 (1 - C(224, 8) / C(256, 8)) = 5.29 nodes.
  CHECK(moe_expected_destinations(routed(256, 8), 8) > 5.28);
}

TEST_CASE("flex with node-limited routing: RDMA to M nodes, DeepSeek-V3 over 8 nodes") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = with_flex_ep(make_layout(1, 1, 64, 1, 64), 64);
  const MoeFlexTraffic limited = moe_flex_traffic(routed(256, 8, 8, 4), cluster, layout, 0);
  const MoeFlexTraffic unlimited = moe_flex_traffic(routed(256, 8), cluster, layout, 0);
  CHECK(limited.nodes == 8);
  CHECK(limited.destination_nodes == doctest::Approx(4.0).scale(0));
  // Its own node is reached half the time: 4 - 1/2 nodes' worth of copies leave the node.
  CHECK(limited.inter_node_bytes_per_rank == doctest::Approx(kTokenBytes * 3.5).scale(0));
  CHECK(limited.rdma_logical_bytes_per_rank == doctest::Approx(kTokenBytes * 4.0).scale(0));
  CHECK(limited.destination_gpus == doctest::Approx(64.0 * 59.0 / 496.0).scale(0));
  CHECK(unlimited.destination_nodes > 5.28);
  CHECK(limited.dispatch_seconds < unlimited.dispatch_seconds);
}

TEST_CASE("flex over two nodes (ep 16): RDMA once per node, NVLink once per GPU, the slower leg") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = with_flex_ep(make_layout(1, 1, 16, 1, 16), 16);
  const MoeFlexTraffic t = moe_flex_traffic(flex_moe(), cluster, layout, 0);
  CHECK(t.nodes == 2);
  CHECK(t.local_members == 8);
  const double nodes_hit = 2.0 * (1.0 - kNodeMissed);
  const double gpus_hit = 16.0 * (1.0 - kRankMissed);
  CHECK(t.destination_nodes == doctest::Approx(nodes_hit).scale(0));
  CHECK(t.destination_gpus == doctest::Approx(gpus_hit).scale(0));
  // Inter-node: each token to the other node when one of its experts is there.
  CHECK(t.inter_node_bytes_per_rank == doctest::Approx(kTokenBytes * (1.0 - kNodeMissed)).scale(0));
  CHECK(t.rdma_logical_bytes_per_rank == doctest::Approx(kTokenBytes * nodes_hit).scale(0));
  CHECK(t.nvlink_bytes_per_rank == doctest::Approx(kTokenBytes * gpus_hit).scale(0));
  const double rdma = kTokenBytes * nodes_hit / (50e9 * 43.0 / 50.0) + 5e-6;
  const double nvlink_dispatch = kTokenBytes * gpus_hit / (450e9 * 153.0 / 200.0) + 7 * 2e-6;
  const double nvlink_combine = kTokenBytes * gpus_hit / (450e9 * 158.0 / 200.0) + 7 * 2e-6;
  CHECK(t.dispatch_seconds == doctest::Approx(std::max(rdma, nvlink_dispatch)).scale(0));
  CHECK(t.combine_seconds == doctest::Approx(std::max(rdma, nvlink_combine)).scale(0));
  CHECK(rdma > nvlink_dispatch);  // the NIC paces this case
  // The alltoall dispatcher sends T k h e = 4 x 524,288 B, 8/16 of it through the NIC: k/2 = 2
  // token copies cross nodes, against 34,140/35,960 = 0.95 here, under half.
  CHECK(moe_all_to_all_bytes(flex_moe(), cluster, layout) == 4 * 524'288);
  CHECK(t.inter_node_bytes_per_rank < 0.5 * 8.0 / 16.0 * 4 * 524'288);
  CHECK(moe_dispatch_combine_seconds(flex_moe(), cluster, layout, flex(), 0) ==
        doctest::Approx(t.dispatch_seconds + t.combine_seconds).scale(0));
}

TEST_CASE("flex within one node (ep 8): the intranode kernel, NVLink only") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = with_flex_ep(make_layout(1, 1, 8, 1, 8), 8);
  const MoeFlexTraffic t = moe_flex_traffic(flex_moe(), cluster, layout, 0);
  CHECK(t.nodes == 1);
  CHECK(t.inter_node_bytes_per_rank == 0.0);
  CHECK(t.rdma_logical_bytes_per_rank == 0.0);
  // 8 ranks of 4 experts: a rank is missed with C(28, 4) / C(32, 4) = 20,475 / 35,960.
  const double gpus_hit = 8.0 * (1.0 - 20475.0 / 35960.0);
  CHECK(t.destination_gpus == doctest::Approx(gpus_hit).scale(0));
  CHECK(t.dispatch_seconds ==
        doctest::Approx(kTokenBytes * gpus_hit / (450e9 * 153.0 / 200.0) + 7 * 2e-6).scale(0));
  CHECK(t.combine_seconds ==
        doctest::Approx(kTokenBytes * gpus_hit / (450e9 * 158.0 / 200.0) + 7 * 2e-6).scale(0));
}

TEST_CASE("flex in the estimate: dispatch + combine per MoE layer each way, no count gather") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = with_flex_ep(make_layout(1, 1, 16, 1, 16), 16);
  const PlanEstimate estimate = estimate_plan(flex_moe(), cluster, layout, flex());
  REQUIRE(estimate.rejection_code == "");
  const MoeFlexTraffic t = moe_flex_traffic(flex_moe(), cluster, layout, 0);
  const double per_layer = t.dispatch_seconds + t.combine_seconds;
  // 3 MoE layers, one micro-batch; aux loss off: nothing else on ep.
  REQUIRE(estimate.stages[0].chunks.size() == 1);
  const ChunkCost& chunk = estimate.stages[0].chunks[0];
  CHECK(chunk.forward_ep_comm_seconds == doctest::Approx(3 * per_layer).scale(0));
  CHECK(chunk.backward_ep_comm_seconds == doctest::Approx(3 * per_layer).scale(0));
  const CollectiveTraffic* forward = test::find_traffic(
      estimate.collectives,
      "ep: MoE flex dispatch and combine, DeepEP (RDMA once per destination node, NVLink "
      "forward) (forward)");
  REQUIRE(forward != nullptr);
  CHECK(forward->calls_per_step == 6);  // 2 per MoE layer x 3 layers x 1 micro-batch
  CHECK(forward->message_bytes == std::llround(kTokenBytes * (1.0 - kNodeMissed)));
  CHECK(forward->seconds_per_call == doctest::Approx(per_layer / 2).scale(0));
  CHECK(test::find_traffic(estimate.collectives,
                           "ep: MoE token-count all-gather (dispatch preprocess)") == nullptr);
  CHECK(test::find_traffic(estimate.collectives,
                           "ep: MoE token dispatch and combine all-to-alls (forward)") == nullptr);
  // The same layout under alltoall costs more ep time (T k h e per call, the count gather too).
  const PlanEstimate alltoall = estimate_plan(flex_moe(), cluster, layout);
  CHECK(alltoall.stages[0].chunks[0].forward_ep_comm_seconds > chunk.forward_ep_comm_seconds);
}

TEST_CASE("alltoall stays 2 x the all-to-all, and its permutations keep the second sort") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = with_flex_ep(make_layout(1, 1, 16, 1, 16), 16);
  CHECK(moe_dispatch_combine_seconds(flex_moe(), cluster, layout, PlanOptions{}, 0) ==
        2.0 * moe_all_to_all_seconds(flex_moe(), cluster, layout, 0));
  // 2 local experts: alltoall permutes, sorts, unsorts and unpermutes T k h e each (read and
  // write); flex expands after its dispatch and folds before its combine only.
  const double routed = 4096.0 * 4 * 64 * 2;
  CHECK(moe_permute_bytes(flex_moe(), cluster, layout, PlanOptions{}) == 8.0 * routed);
  CHECK(moe_permute_bytes(flex_moe(), cluster, layout, flex()) == 4.0 * routed);
}

TEST_CASE("flex: refused for dense models, ep 1, etp > 1 and frameworks other than megatron") {
  const Layout layout = with_flex_ep(make_layout(1, 1, 16, 1, 16), 16);
  CHECK(check_moe_dispatcher(flex_moe(), layout, flex()).ok());
  CHECK(check_moe_dispatcher(flex_moe(), with_flex_ep(layout, 1), PlanOptions{}).ok());
  const Validity dense = check_moe_dispatcher(models::load_model("gpt2-124m"), layout, flex());
  CHECK(dense.code == "moe_dispatcher");
  CHECK(dense.reason.find("mixture-of-experts") != std::string::npos);
  const Validity ep1 = check_moe_dispatcher(flex_moe(), with_flex_ep(layout, 1), flex());
  CHECK(ep1.code == "moe_dispatcher");
  CHECK(ep1.reason.find("ep > 1") != std::string::npos);
  Layout etp2 = with_flex_ep(make_layout(2, 1, 8, 1, 8), 8);
  etp2.etp = 2;
  const Validity etp = check_moe_dispatcher(flex_moe(), etp2, flex());
  CHECK(etp.code == "moe_dispatcher");
  CHECK(etp.reason.find("etp 1") != std::string::npos);
  // The estimate comes back infeasible with that reason.
  CHECK(estimate_plan(flex_moe(), models::load_cluster("dgx-h100"), with_flex_ep(layout, 1), flex())
            .rejection_code == "moe_dispatcher");
  for (const Framework framework :
       {Framework::kDeepSpeed, Framework::kFsdp, Framework::kMeshplan}) {
    PlanOptions options = flex();
    options.framework = framework;
    CHECK_THROWS_WITH_AS(check_moe_dispatcher_options(options, "moe_dispatcher"),
                         doctest::Contains("moe_dispatcher: flex: framework"), InputError);
  }
  CHECK_NOTHROW(check_moe_dispatcher_options(flex(), "moe_dispatcher"));
}

TEST_CASE("moe_dispatcher in a plan file: written when flex, read back, alltoall when absent") {
  const nlohmann::json written = options_to_json(flex());
  CHECK(written.at("moe_dispatcher") == "flex");
  CHECK(options_from_json(written, "test", nullptr) == flex());
  CHECK_FALSE(options_to_json(PlanOptions{}).contains("moe_dispatcher"));
  const PlanOptions defaults;
  nlohmann::json json = written;
  json.erase("moe_dispatcher");
  CHECK(options_from_json(json, "test", &defaults).moe_dispatcher == MoeDispatcher::kAllToAll);
  json["moe_dispatcher"] = "deepep";
  CHECK_THROWS_WITH_AS(options_from_json(json, "test", &defaults),
                       "test: options: moe_dispatcher: unsupported MoE token dispatcher (deepep); "
                       "supported: alltoall, flex",
                       InputError);
  CHECK(to_string(parse_moe_dispatcher("alltoall", "f")) == "alltoall");
  CHECK(to_string(parse_moe_dispatcher("flex", "f")) == "flex");
}

}  // namespace meshplan::planner
