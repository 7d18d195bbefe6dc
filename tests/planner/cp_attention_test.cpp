// Context parallelism in the planner (planner/cp_attention.cpp, layout.cpp, validity.cpp, the
// memory and the inventory) against values worked out by hand.
//
// The case: the tiny preset (4 layers, h 64, a 4, g 2, d 16, f 176 SwiGLU, V 256, s 32, no
// dropout) in bf16 (e = 2) on dgx-a100-80gb, micro-batch 1. With cp 2 each rank holds
// T = 32 / 2 = 16 tokens of each sequence (chunks r and 3 - r of 4).

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "compute_cost.h"
#include "memory.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

Layout with_cp(Layout layout, int64_t cp) {
  layout.cp = cp;
  return layout;
}

// Sum of calls_per_step of the inventory entries described as `what`, and their message size.
struct Entry {
  int64_t calls = 0;
  int64_t message_bytes = 0;
  int64_t group_size = 0;
};
Entry find_entry(const PlanEstimate& estimate, const std::string& what) {
  Entry entry;
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    if (traffic.what == what) {
      entry.calls += traffic.calls_per_step;
      entry.message_bytes = traffic.message_bytes;
      entry.group_size = traffic.group_size;
    }
  }
  return entry;
}

TEST_CASE("ranks order tp, cp, dp, pp (Megatron-Core tp-cp-ep-dp-pp)") {
  // tp 2, cp 2, dp 2, pp 2: rank = tp + 2 (cp + 2 (dp + 2 pp)). Rank 13 = 1 + 2 * 6:
  // cp 6 % 2 = 0, then 3 = dp 1 + 2 * pp 1.
  const Layout layout = with_cp(make_layout(2, 2, 2, 1, 8), 2);
  const RankCoords coords = rank_coords(layout, 13);
  CHECK(coords.tp_rank == 1);
  CHECK(coords.cp_rank == 0);
  CHECK(coords.dp_rank == 1);
  CHECK(coords.pp_rank == 1);
  // Rank 2 = tp 0 + 2 * cp 1: the cp neighbour of rank 0 is tp ranks away.
  CHECK(rank_coords(layout, 2).cp_rank == 1);
  CHECK(rank_coords(layout, 2).dp_rank == 0);
  for (int64_t rank = 0; rank < layout.num_gpus(); ++rank) {
    CHECK(global_rank(layout, rank_coords(layout, rank)) == rank);
  }
  CHECK(layout.num_gpus() == 16);
  CHECK(grad_group_size(layout) == 4);
}

TEST_CASE("activations per layer are those of T / cp tokens") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // Flash attention, no recompute, tp 1 (memory.cpp, Korthikanti et al. eq. 1 generalised):
  //   split: T ((a + 2g) d + a d + 2 f + f) e = 16 (128 + 64 + 352 + 176) 2 = 23,040
  //   replicated: 4 T h e = 4 * 16 * 64 * 2 = 8,192; no dropout masks
  //   log-sum-exp: 4 T a = 4 * 16 * 4 = 256
  // cp 2: 31,488 bytes; cp 1 (T = 32): twice that, 62,976.
  const Layout cp2 = with_cp(make_layout(1, 1, 1, 1, 4), 2);
  CHECK(activation_bytes_per_layer(model, cluster, cp2, PlanOptions{}) == 31488.0);
  CHECK(activation_bytes_per_layer(model, cluster, make_layout(1, 1, 2, 1, 4), PlanOptions{}) ==
        62976.0);
}

TEST_CASE("ring attention: K/V and dK/dV sends in the inventory") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // tp 2, cp 2, 4 GPUs, global batch 4: m = 4 micro-batches, 4 layers.
  // K/V chunk per tp shard: 2 (T / cp) (g / t) d e = 2 * 16 * 1 * 16 * 2 = 1,024 bytes.
  // Per layer and micro-batch cp - 1 = 1 send forward and 1 backward, dK/dV 1 backward:
  //   K/V 2 * 4 layers * 4 = 32 calls, dK/dV 16; full recompute adds a forward: K/V 48.
  Layout layout = with_cp(make_layout(2, 1, 1, 1, 4), 2);
  PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.rejection_code == "");
  const Entry kv = find_entry(estimate, "cp: ring K/V sends (forward, backward)");
  CHECK(kv.message_bytes == 1024);
  CHECK(kv.calls == 32);
  CHECK(kv.group_size == 2);
  const Entry dkv = find_entry(estimate, "cp: ring dK/dV sends (backward)");
  CHECK(dkv.message_bytes == 1024);
  CHECK(dkv.calls == 16);
  layout.recompute = Recompute::kFull;
  estimate = estimate_plan(model, cluster, layout);
  CHECK(find_entry(estimate, "cp: ring K/V sends (forward, backward)").calls == 48);
  // The hidden-state messages of tp are those of T / cp = 16 tokens: 16 * 64 * 2 = 2,048.
  CHECK(find_entry(estimate, "tp: layer forward all-reduces (attention out, MLP out)")
            .message_bytes == 2048);
}

TEST_CASE("Ulysses (a2a): four all-to-alls forward and four backward per layer") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // tp 1, cp 2: Q / output buffers (T / cp) a d e = 16 * 4 * 16 * 2 = 2,048 bytes, K / V
  // 16 * 2 * 16 * 2 = 1,024; 2 forward + 2 backward each per layer: 4 * 4 layers * 4 = 64.
  PlanOptions options;
  options.cp_comm = CpComm::kA2a;
  const PlanEstimate estimate =
      estimate_plan(model, cluster, with_cp(make_layout(1, 1, 1, 1, 4), 2), options);
  REQUIRE(estimate.rejection_code == "");
  const Entry q = find_entry(estimate, "cp: Ulysses all-to-alls of Q and attention output");
  CHECK(q.message_bytes == 2048);
  CHECK(q.calls == 64);
  const Entry kv = find_entry(estimate, "cp: Ulysses all-to-alls of K and V");
  CHECK(kv.message_bytes == 1024);
  CHECK(kv.calls == 64);
}

TEST_CASE("ring overlap: exposed = (cp - 1) max(0, one send - one step's attention)") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // tp 1, cp 2 on one node (NVLink). K/V chunk 2 * 16 * 2 * 16 * 2 = 2,048 bytes; one send
  // 2048 / (300e9 * 0.75) + 2e-6 s. Attention forward of the rank: the causal half of
  // 4 T s a d = 4 * 16 * 32 * 4 * 16 = 131,072 FLOPs at 312e12 * 0.55 (flash attention, the
  // default); one ring step does half of it; flash's backward is 2.5 x its forward.
  const Layout layout = with_cp(make_layout(1, 1, 1, 1, 4), 2);
  const double send =
      2048.0 / (cluster.intra_node_bytes_per_second * cluster.efficiency.collective_efficiency) +
      cluster.intra_node_latency_seconds;
  const double step =
      65536.0 / (cluster.gpu.peak_bf16_flops_per_second * cluster.efficiency.attention_efficiency) /
      2.0;
  const CpAttentionComm comm = cp_attention_comm(model, cluster, layout, PlanOptions{});
  // Relative 1e-12: the same doubles summed in another order.
  CHECK(comm.forward_exposed_seconds == doctest::Approx(send - step).epsilon(1e-12).scale(0));
  CHECK(comm.backward_exposed_seconds ==
        doctest::Approx(2.0 * send - 2.5 * step).epsilon(1e-12).scale(0));
}

TEST_CASE("ring overlap: Llama 3 405B at 128K context hides the ring") {
  const models::TransformerConfig base = models::load_model("llama3-405b");
  models::TransformerConfig model = base;
  model.seq_length = 131072;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  // tp 8, cp 16: each cp rank on its own node. K/V chunk 2 * 8192 * (8 / 8) * 128 * 2 =
  // 4,194,304 bytes over the NIC; a ring step's attention, the causal half of 4 * 8192 *
  // 131072 * 128 * 128 / 8 FLOPs, / 16 at the attention efficiency. The step outlasts the
  // send: nothing exposed.
  Layout layout = with_cp(make_layout(8, 1, 1, 1, 1), 16);
  const double send = 4194304.0 / (cluster.inter_node_bytes_per_second_per_gpu *
                                   cluster.efficiency.collective_efficiency) +
                      cluster.inter_node_latency_seconds;
  const double step =
      0.5 * 4.0 * 8192.0 * 131072.0 * 128.0 * 128.0 / 8.0 /
      (cluster.gpu.peak_bf16_flops_per_second * cluster.efficiency.attention_efficiency) / 16.0;
  REQUIRE(step > send);
  const CpAttentionComm comm = cp_attention_comm(model, cluster, layout, PlanOptions{});
  REQUIRE(comm.calls.size() == 2);
  CHECK(comm.calls[0].message_bytes == 4194304);
  CHECK(comm.forward_exposed_seconds == 0.0);
  CHECK(comm.backward_exposed_seconds == 0.0);
}

TEST_CASE("gradients are reduced and ZeRO-sharded over dp x cp") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // tp 2, cp 2, dp 2 (8 GPUs), ZeRO 1: the gradient group has dp cp = 4 ranks. Stage
  // parameters per rank (collective_inventory_test's count, pp 1): 4 layers * 23,168 +
  // embedding and LM-head shards 2 * 8,192 + final norm 64 = 109,120 = 4 * 27,280, so the
  // reduce-scatter covers 109,120 gradients unpadded, in fp32 (Megatron's default under bf16:
  // 4 bytes each), and each rank updates 27,280.
  Layout layout = with_cp(make_layout(2, 1, 2, 1, 8), 2);
  layout.zero = 1;
  const PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.rejection_code == "");
  int64_t reduce_scatter_bytes = 0;
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    if (traffic.group == CommGroup::kDp) {
      CHECK(traffic.group_size == 4);
      if (traffic.kind == CollectiveKind::kReduceScatter) {
        reduce_scatter_bytes += traffic.total_message_bytes();
      }
    }
  }
  CHECK(reduce_scatter_bytes == 109120 * 4);
  CHECK(zero_shard_count(layout, 109120) == 27280);
  CHECK(zero_shard_count(layout, 10) == 3);  // ceil(10 / 4), not ceil(10 / dp) = 5
}

TEST_CASE("context-parallel validity rules name the rule and the values") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Validity v = check_layout(model, cluster, 3, with_cp(make_layout(1, 1, 1, 1, 4), 3));
  CHECK(v.code == "cp_seq");
  CHECK(v.reason == "seq_length not divisible by 2*cp (32 % 6)");
  v = check_layout(model, cluster, 8, with_cp(make_layout(1, 1, 1, 1, 4), 2));
  CHECK(v.code == "gpus");
  CHECK(v.reason == "tp*cp*pp*dp must equal the GPU count (1*2*1*1 != 8)");
  Layout placed = with_cp(make_layout(1, 1, 1, 1, 4), 2);
  placed.placement = Placement::kTpPpDp;
  CHECK(check_layout(model, cluster, 2, placed).code == "cp_placement");
  PlanOptions options;
  options.cp_comm = CpComm::kA2a;
  v = check_cp_options(model, with_cp(make_layout(2, 1, 1, 1, 4), 2), options);
  CHECK(v.code == "cp_kv_heads");
  CHECK(v.reason == "num_kv_heads not divisible by tp*cp for cp_comm a2a (2 % 4)");
  options = PlanOptions{};
  options.flash_attention = false;
  v = check_cp_options(model, with_cp(make_layout(1, 1, 1, 1, 4), 2), options);
  CHECK(v.code == "cp_flash_attention");
  CHECK(v.reason == "cp > 1 needs flash attention (cp 2)");
  CHECK(estimate_plan(model, cluster, with_cp(make_layout(1, 1, 1, 1, 4), 2), options)
            .rejection_code == "cp_flash_attention");
}

TEST_CASE("plan file: cp and cp_comm written only when not the default") {
  const Layout plain = make_layout(1, 1, 2, 1, 4);
  CHECK_FALSE(layout_to_json(plain).contains("cp"));
  CHECK_FALSE(options_to_json(PlanOptions{}).contains("cp_comm"));
  const Layout cp = with_cp(plain, 2);
  const nlohmann::json json = layout_to_json(cp);
  CHECK(json.at("cp") == 2);
  CHECK(layout_from_json(json, "p.json") == cp);
  PlanOptions options;
  options.cp_comm = CpComm::kA2a;
  CHECK(options_to_json(options).at("cp_comm") == "a2a");
  CHECK(options_from_json(options_to_json(options), "p.json").cp_comm == CpComm::kA2a);
  // A plan without context parallelism reads and writes back byte for byte, with no cp keys.
  Plan plan;
  plan.model = models::load_model("tiny");
  plan.cluster = models::load_cluster("dgx-a100-80gb");
  plan.layout = plain;
  plan.num_gpus = 2;
  const std::string text = plan_to_json(plan, nullptr).dump(2);
  CHECK(text.find("\"cp") == std::string::npos);
  CHECK(plan_to_json(plan_from_json(nlohmann::json::parse(text), "p.json"), nullptr).dump(2) ==
        text);
  plan.layout = cp;
  plan.num_gpus = 4;
  CHECK(plan_from_json(plan_to_json(plan, nullptr), "p.json") == plan);
  nlohmann::json bad = json;
  bad["cp"] = 0;
  CHECK(test::input_error([&] { layout_from_json(bad, "p.json"); }) ==
        "p.json: layout: cp: must be between 1 and 10000000 (0)");
  nlohmann::json bad_options = options_to_json(options);
  bad_options["cp_comm"] = "ring";
  CHECK(test::input_error([&] { options_from_json(bad_options, "p.json"); }) ==
        "p.json: options: cp_comm: unknown cp_comm, expected p2p or a2a (ring)");
}

}  // namespace
}  // namespace meshplan::planner
