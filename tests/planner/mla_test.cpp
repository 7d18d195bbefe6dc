// Multi-head latent attention in the planner against values worked out by hand: where its
// parameters sit under tp (Megatron-Core MLASelfAttention: down projections and latent norms
// duplicated, up projections and output split) and its tp and cp collectives.
//
// The inventory case: the tiny-mla preset (4 layers; h 64, a 4, r_q 32, r_kv 16, d_n 16, d_r 8,
// d_v 16, f 176 SwiGLU, V 256, s 32) on local-cpu (fp32, e = 4 bytes), micro-batch 2, global
// batch 16: T = 2 x 32 = 64 tokens per micro-batch, m = 8 micro-batches at dp 1. Per token the
// query latent is 32 x 4 = 128 B, the kv latent 64 B, the rotary key 32 B: 8,192, 4,096 and
// 2,048 B per micro-batch.

#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "compute_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "model_shape.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

const models::TransformerConfig& tiny_mla() {
  static const models::TransformerConfig model = models::load_model("tiny-mla");
  return model;
}

const CollectiveTraffic& entry(const PlanEstimate& estimate, const char* what) {
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    if (traffic.what == what) {
      return traffic;
    }
  }
  FAIL("no inventory entry " << what);
  return estimate.collectives.front();
}

PlanEstimate estimate(Layout layout) {
  const PlanEstimate e =
      estimate_plan(tiny_mla(), models::load_cluster("local-cpu"), layout, PlanOptions{});
  REQUIRE(e.rejection_code == "");
  return e;
}

}  // namespace

TEST_CASE("deepseek-v3: MLA down projections and latent norms replicated over tp, the rest split") {
  const models::TransformerConfig model = models::load_model("deepseek-v3");
  const LayerParameters dense = layer_parameters(model, 8, /*moe_layer=*/false, 1);
  // Replicated: W_DQ 7168 x 1536 = 11,010,048, q norm 1,536, W_DKV 7168 x (512 + 64) =
  // 4,128,768, kv norm 512, the two RMSNorms 2 x 7168 = 14,336.
  CHECK(dense.replicated == 11'010'048 + 1'536 + 4'128'768 + 512 + 14'336);
  // Split over tp 8: W_UQ 1536 x 128 x 192 = 37,748,736, W_UKV 512 x 128 x (128 + 128) =
  // 16,777,216, W_O 128 x 128 x 7168 = 117,440,512 (DeepSeek-V3's 187.1M attention with the
  // above), and the dense SwiGLU MLP 3 x 7168 x 18432 = 396,361,728.
  CHECK(dense.sharded == (37'748'736 + 16'777'216 + 117'440'512 + 396'361'728) / 8);
}

TEST_CASE("tiny-mla tp 2: the latents' and rotary key's gradient all-reduces replace QKV's") {
  const PlanEstimate e = estimate(make_layout(2, 1, 1, 2, 16));
  const CollectiveTraffic& q = entry(e, "tp: MLA query latent input-gradient all-reduce");
  CHECK(q.kind == CollectiveKind::kAllReduce);
  CHECK(q.group == CommGroup::kTp);
  CHECK(q.message_bytes == 8'192);
  CHECK(q.calls_per_step == 4 * 8);  // once per layer and micro-batch
  CHECK(entry(e, "tp: MLA kv latent input-gradient all-reduce").message_bytes == 4'096);
  CHECK(entry(e, "tp: MLA rotary key input-gradient all-reduce").message_bytes == 2'048);
  // The dense block's hidden-state pair is left to the MLP: 4 layers x 8 micro-batches.
  CHECK(entry(e, "tp: layer backward all-reduces (QKV in, MLP in)").calls_per_step == 32);
  CHECK(entry(e, "tp: layer forward all-reduces (attention out, MLP out)").calls_per_step == 64);
}

TEST_CASE("tiny-mla tp 2 sequence parallel: latents gathered forward and again for W") {
  Layout layout = make_layout(2, 1, 1, 2, 16);
  layout.sequence_parallel = true;
  const PlanEstimate e = estimate(layout);
  const CollectiveTraffic& q =
      entry(e, "tp: MLA query latent all-gathers (forward, weight-gradient re-gather)");
  CHECK(q.kind == CollectiveKind::kAllGather);
  CHECK(q.message_bytes == 8'192);
  CHECK(q.calls_per_step == 2 * 32);
  CHECK(entry(e, "tp: MLA rotary key all-gather (forward)").calls_per_step == 32);
  CHECK(entry(e, "tp: MLA kv latent input-gradient reduce-scatter").message_bytes == 4'096);
  // The hidden-state all-gathers before QKV are gone; the MLP's stay (one per layer and
  // micro-batch), so do the attention output's reduce-scatters (two pairs' worth).
  CHECK(entry(e, "tp: layer forward all-gathers (QKV in, MLP in)").calls_per_step == 32);
  CHECK(entry(e, "tp: layer forward reduce-scatters (attention out, MLP out)").calls_per_step ==
        64);
  // Full recompute gathers the latents and the rotary key once more per layer and micro-batch.
  layout.recompute = Recompute::kFull;
  const PlanEstimate full = estimate(layout);
  CHECK(entry(full, "tp: MLA query latent all-gathers (forward, weight-gradient re-gather)")
            .calls_per_step == 3 * 32);
  CHECK(entry(full, "tp: MLA rotary key all-gather (forward)").calls_per_step == 2 * 32);
}

TEST_CASE("tiny-mla cp 2: a ring K/V chunk carries the value heads at d_v, not padded") {
  Layout layout = make_layout(1, 1, 1, 2, 16);
  layout.cp = 2;
  const PlanEstimate e = estimate(layout);
  // (T / cp) a (d + d_v) e = 32 x 4 x (24 + 16) x 4 = 20,480 B.
  CHECK(entry(e, "cp: ring K/V sends (forward, backward)").message_bytes == 20'480);
  CHECK(entry(e, "cp: ring dK/dV sends (backward)").message_bytes == 20'480);
}

TEST_CASE("tiny-mla tp 2: the step time costs the collectives the inventory lists") {
  // Per layer and micro-batch at T = 64 tokens, e = 4: the MLP's pair moves the hidden state
  // (64 x 64 x 4 = 16,384 B) each way; the attention's output reduction too, but its input
  // side moves the query latent (8,192 B), the kv latent (4,096 B) and the rotary key (2,048 B)
  // in one call each (add_mla_tensor_parallel), not the hidden state.
  const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  const auto seconds = [&](CollectiveKind kind, int64_t bytes) {
    return collective_seconds(cluster, kind, bytes, 2, 1);
  };
  const auto latents = [&](CollectiveKind kind) {
    return seconds(kind, 8'192) + seconds(kind, 4'096) + seconds(kind, 2'048);
  };
  const auto kAR = CollectiveKind::kAllReduce;
  const auto kAG = CollectiveKind::kAllGather;
  const auto kRS = CollectiveKind::kReduceScatter;
  // One layer's share: a 4-layer and a 3-layer tiny-mla differ by one layer (the embedding's
  // and LM head's collectives are the same in both).
  models::TransformerConfig three = tiny_mla();
  three.num_layers = 3;
  Layout layout = make_layout(2, 1, 1, 2, 16);
  const auto per_layer = [&](const Layout& l) {
    const ChunkCost four_layers = chunk_cost(tiny_mla(), cluster, l, PlanOptions{}, 0, 0);
    const ChunkCost three_layers = chunk_cost(three, cluster, l, PlanOptions{}, 0, 0);
    return std::pair{four_layers.forward_tp_comm_seconds - three_layers.forward_tp_comm_seconds,
                     four_layers.backward_tp_comm_seconds - three_layers.backward_tp_comm_seconds};
  };
  // No sequence parallelism: forward two all-reduces of the hidden state; backward the MLP's
  // and the three latents' input-gradient all-reduces.
  std::pair<double, double> one = per_layer(layout);
  CHECK(one.first == doctest::Approx(2 * seconds(kAR, 16'384)).scale(0));
  CHECK(one.second == doctest::Approx(seconds(kAR, 16'384) + latents(kAR)).scale(0));
  // Sequence parallel: forward gathers the latents and reduce-scatters the attention output;
  // backward gathers the output gradient and reduce-scatters the latents' input gradients; the
  // MLP keeps its pair (costed as one all-reduce of the same volume).
  layout.sequence_parallel = true;
  one = per_layer(layout);
  CHECK(one.first ==
        doctest::Approx(latents(kAG) + seconds(kRS, 16'384) + seconds(kAR, 16'384)).scale(0));
  CHECK(one.second ==
        doctest::Approx(seconds(kAG, 16'384) + latents(kRS) + seconds(kAR, 16'384)).scale(0));
}

}  // namespace meshplan::planner
