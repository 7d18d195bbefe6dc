// The per-step collective inventory (planner/collective_inventory.cpp, returned in
// PlanEstimate::collectives) against counts derived by hand from Megatron-LM's communication:
//   tensor parallel, no SP (Shoeybi et al. 2019, Fig. 3-4): per layer and micro-batch two
//     all-reduces of the hidden states forward (g after attention and MLP) and two backward (f);
//     the vocab-parallel embedding all-reduces its output, the LM head its input gradient, and
//     the vocab-parallel cross-entropy all-reduces max logit, target logit and sum of exp (fp32
//     per token);
//   tensor parallel with SP (Korthikanti et al. 2022, Sec. 4.2.2): each forward all-reduce
//     becomes an all-gather (before QKV / MLP-in) plus a reduce-scatter (after attention-out /
//     MLP-out); backward re-gathers the saved inputs (two more all-gathers per layer); the
//     embedding reduce-scatters forward and all-gathers its output gradient backward (each
//     vocabulary shard's weight gradient needs every token); the LM head gathers its input forward
//     and backward and reduce-scatters its input gradient; norms' partial gradients are all-reduced
//     once a step;
//   pipeline: one send per forward (activation) and per backward (gradient) across a stage
//     boundary, counted from the schedule's op list: with 1F1B stage 0 sends m activations and
//     the last stage m gradients; tied embeddings all-reduce their gradient first <-> last stage;
//   data parallel: ZeRO 0 all-reduces the stage's gradients once a step; ZeRO 1 reduce-scatters
//     them and all-gathers the updated parameters (Rajbhandari et al. 2020, Sec. 7.2.1); ZeRO 2
//     reduce-scatters every micro-batch's gradients (it keeps only its partition, Sec. 5.2).
//
// The case: the tiny preset (4 layers, h 64, a 4, g 2, d 16, f 176 SwiGLU, V 256, s 32, RMSNorm,
// untied) on 8 GPUs, tp 2, pp 2, dp 2, micro-batch 1, global batch 8: m = 8 / (2 * 1) = 4
// micro-batches, 2 layers per stage, bf16 (e = 2) on dgx-a100-80gb.
// Hidden-state message: s b h e = 32 * 1 * 64 * 2 = 4,096 bytes.
// Parameters per rank of stage 0: per layer sharded (Q, K, V, O, gate-up, down)
//   (64 * 128 + 64 * 64 + 64 * 352 + 176 * 64) / 2 = 46,080 / 2 = 23,040, replicated two
//   RMSNorms 128: 23,168 per layer, 46,336 for two; embedding shard 128 * 64 = 8,192: 54,528.
// Last stage: 46,336 + final norm 64 + LM head shard 8,192 = 54,592.
// Megatron (the default framework) reduces gradients in fp32 under bf16 training: 4 bytes per
// gradient over dp (grad_reduce_dtype); parameters move in bf16.

#include <doctest/doctest.h>

#include <map>
#include <tuple>

#include "meshplan/cost_model.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

struct Totals {
  int64_t calls = 0;
  int64_t bytes = 0;  // sum of message_bytes * calls
};
bool operator==(const Totals& a, const Totals& b) {
  return a.calls == b.calls && a.bytes == b.bytes;
}

using Key = std::tuple<int64_t, CollectiveKind, CommGroup>;

std::map<Key, Totals> totals_by_stage_kind_group(const PlanEstimate& estimate) {
  std::map<Key, Totals> totals;
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    Totals& t = totals[{traffic.stage, traffic.kind, traffic.group}];
    t.calls += traffic.calls_per_step;
    t.bytes += traffic.total_message_bytes();
  }
  return totals;
}

PlanEstimate tiny_estimate(const Layout& layout, bool tied = false) {
  models::TransformerConfig model = models::load_model("tiny");
  model.tied_embeddings = tied;
  const PlanEstimate estimate = estimate_plan(model, models::load_cluster("dgx-a100-80gb"), layout);
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  return estimate;
}

constexpr auto kAR = CollectiveKind::kAllReduce;
constexpr auto kAG = CollectiveKind::kAllGather;
constexpr auto kRS = CollectiveKind::kReduceScatter;
constexpr auto kSend = CollectiveKind::kSendRecv;
constexpr auto kTp = CommGroup::kTp;
constexpr auto kPp = CommGroup::kPp;
constexpr auto kDp = CommGroup::kDp;

TEST_CASE("inventory, tp 2 pp 2 dp 2, no SP, ZeRO 0, 1F1B") {
  const PlanEstimate estimate = tiny_estimate(make_layout(2, 2, 2, 1, 8));
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(estimate);
  const std::map<Key, Totals> expected = {
      // Stage 0: 2 forward + 2 backward all-reduces * 2 layers * 4 micro-batches = 32, plus the
      // embedding's 4: 36 of 4,096 bytes = 147,456.
      {{0, kAR, kTp}, {36, 147'456}},
      // 1F1B stage 0 sends one activation per micro-batch: 4 of 4,096 bytes.
      {{0, kSend, kPp}, {4, 16'384}},
      // ZeRO 0: one all-reduce of the stage's fp32 gradients, 54,528 parameters * 4 bytes.
      {{0, kAR, kDp}, {1, 218'112}},
      // Last stage: 32 layer all-reduces, 4 LM-head input-gradient all-reduces of 4,096 bytes,
      // 3 * 4 = 12 cross-entropy all-reduces of s b * 4 = 128 bytes: 48 calls,
      // 36 * 4,096 + 12 * 128 = 148,992 bytes.
      {{1, kAR, kTp}, {48, 148'992}},
      // The last stage sends one gradient per micro-batch.
      {{1, kSend, kPp}, {4, 16'384}},
      {{1, kAR, kDp}, {1, 218'368}},  // 54,592 * 4 bytes
  };
  CHECK(totals == expected);
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    CAPTURE(traffic.what);
    // Group sizes follow the layout.
    CHECK(traffic.group_size == 2);
    // The time per call is the ring model's for that group's placement (tp-dp-pp: tp ranks
    // adjacent, dp ranks tp = 2 apart, pp ranks tp * dp = 4 apart).
    const int64_t stride = traffic.group == kTp ? 1 : traffic.group == kDp ? 2 : 4;
    CHECK(traffic.seconds_per_call == collective_seconds(models::load_cluster("dgx-a100-80gb"),
                                                         traffic.kind, traffic.message_bytes,
                                                         traffic.group_size, stride));
  }
}

TEST_CASE("inventory, tp 2 pp 2 dp 2, sequence parallel, ZeRO 1, 1F1B") {
  Layout layout = make_layout(2, 2, 2, 1, 8);
  layout.sequence_parallel = true;
  layout.zero = 1;
  const PlanEstimate estimate = tiny_estimate(layout);
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(estimate);
  const std::map<Key, Totals> expected = {
      // Per layer and micro-batch: forward 2 all-gathers + 2 reduce-scatters, backward
      // 2 + 2 re-gather all-gathers and 2 reduce-scatters, each of the full 4,096-byte tensor
      // (nccl-tests size): all-gathers 6 * 2 * 4 = 48, reduce-scatters 4 * 2 * 4 = 32.
      // + the embedding's output-gradient all-gather per micro-batch: 52.
      {{0, kAG, kTp}, {52, 52 * 4'096}},
      // + the embedding's reduce-scatter per micro-batch: 36.
      {{0, kRS, kTp}, {36, 36 * 4'096}},
      // Replicated RMSNorm gains of two layers, 2 * 128 = 256 parameters, 512 bytes, once.
      {{0, kAR, kTp}, {1, 512}},
      // Sequence-parallel sends carry 1/t of the tensor: 2,048 bytes.
      {{0, kSend, kPp}, {4, 4 * 2'048}},
      // ZeRO 1: reduce-scatter the fp32 gradients, 54,528 * 4 bytes, all-gather the bf16
      // parameters, 54,528 * 2 bytes.
      {{0, kRS, kDp}, {1, 218'112}},
      {{0, kAG, kDp}, {1, 109'056}},
      // Last stage: 48 layer all-gathers + LM-head input gathers forward and backward (2 * 4):
      // 56; 32 layer reduce-scatters + 4 LM-head input-gradient reduce-scatters: 36.
      {{1, kAG, kTp}, {56, 56 * 4'096}},
      {{1, kRS, kTp}, {36, 36 * 4'096}},
      // Norm gradients: 256 + final norm 64 = 320 parameters, 640 bytes, once; cross-entropy:
      // 12 all-reduces of 128 bytes.
      {{1, kAR, kTp}, {13, 640 + 12 * 128}},
      {{1, kSend, kPp}, {4, 4 * 2'048}},
      {{1, kRS, kDp}, {1, 218'368}},
      {{1, kAG, kDp}, {1, 109'184}},
  };
  CHECK(totals == expected);
}

TEST_CASE("inventory: ZeRO 3 gathers every micro-batch and layer, forward and backward") {
  // Rajbhandari et al. 2020, Sec. 7.2.2, as PyTorch FSDP runs it with one unit per transformer
  // block: each layer's parameters all-gathered before its forward and again before its
  // backward, its gradients reduce-scattered after its backward, every micro-batch. Stage 0
  // holds 2 layers: m L = 4 * 2 = 8 reduce-scatters, 2 m L = 16 all-gathers. Its 54,528
  // parameters (a multiple of dp = 2, so no padding) are 109,056 bytes, 54,528 per layer.
  Layout layout = make_layout(2, 2, 2, 1, 8);
  layout.zero = 3;
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(tiny_estimate(layout));
  CHECK(totals.at({0, kRS, kDp}) == Totals{8, 8 * 54'528});
  CHECK(totals.at({0, kAG, kDp}) == Totals{16, 16 * 54'528});
}

TEST_CASE("inventory: FSDP under pipelining gathers and reduces once per chunk a step") {
  // The layout above under framework fsdp (torchtitan: sequence parallel with tp): pipelining
  // keeps each chunk gathered from its first forward and defers the reduce-scatters to its last
  // backward (zero3_gathers_once_per_step), so stage 0's 2 layer units and its root unit (the
  // embedding) are all-gathered once and reduce-scattered once a step, not per micro-batch: 3
  // calls each, one round of dp_buckets' chunk lists.
  Layout layout = make_layout(2, 2, 2, 1, 8);
  layout.zero = 3;
  layout.sequence_parallel = true;
  PlanOptions options;
  options.framework = Framework::kFsdp;
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
  REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
  const DpBuckets buckets = dp_buckets(model, cluster, layout, options, 0);
  REQUIRE(total_calls(buckets.chunk_root_param) == 1);
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(estimate);
  CHECK(totals.at({0, kRS, kDp}) ==
        Totals{3, total_bytes(buckets.chunk_grad) + total_bytes(buckets.chunk_root_grad)});
  CHECK(totals.at({0, kAG, kDp}) ==
        Totals{3, total_bytes(buckets.chunk_param) + total_bytes(buckets.chunk_root_param)});
}

TEST_CASE("inventory: small buckets, one call per bucket") {
  // ZeRO 1, buckets of 10,000 bytes: dp blocks of 2 fp32 gradients = 8 bytes divide it, so
  // stage 0's 54,528 * 4 = 218,112 gradient bytes go in 21 full buckets and one of 8,112 bytes,
  // reduce-scattered once a step; the same elements' bf16 parameters, 21 buckets of 5,000 bytes
  // and one of 4,056 (109,056 bytes), all-gathered once.
  Layout layout = make_layout(2, 2, 2, 1, 8);
  layout.zero = 1;
  PlanOptions options;
  options.bucket_bytes = 10'000;
  const PlanEstimate estimate = estimate_plan(
      models::load_model("tiny"), models::load_cluster("dgx-a100-80gb"), layout, options);
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(estimate);
  CHECK(totals.at({0, kRS, kDp}) == Totals{22, 218'112});
  CHECK(totals.at({0, kAG, kDp}) == Totals{22, 109'056});
}

TEST_CASE("inventory: pipeline sends counted from the op lists of each schedule") {
  // GPipe: like 1F1B, m activations from the first stage and m gradients from the last.
  Layout layout = make_layout(2, 2, 2, 1, 8);
  layout.schedule = ScheduleKind::kGpipe;
  std::map<Key, Totals> totals = totals_by_stage_kind_group(tiny_estimate(layout));
  CHECK(totals.at({0, kSend, kPp}).calls == 4);
  CHECK(totals.at({1, kSend, kPp}).calls == 4);

  // Interleaved, vpp 2 (1 layer per chunk): virtual stage v = c * pp + s. Stage 0 holds v 0 and
  // 2: both send activations onward (2m), v 2 also sends gradients back to v 1 (m): 3m = 12.
  // Stage 1 holds v 1 and 3: v 1 sends activations to v 2 and gradients to v 0, v 3 (the last)
  // sends gradients to v 2: 3m = 12.
  layout.schedule = ScheduleKind::kInterleaved;
  layout.vpp = 2;
  totals = totals_by_stage_kind_group(tiny_estimate(layout));
  CHECK(totals.at({0, kSend, kPp}).calls == 12);
  CHECK(totals.at({1, kSend, kPp}).calls == 12);
}

TEST_CASE("inventory: tied embeddings all-reduce their gradient between first and last stage") {
  // Megatron-LM's embedding group {first stage, last stage}: one all-reduce of the embedding
  // shard's gradient per step, V/t h e = 128 * 64 * 2 = 16,384 bytes, on both stages.
  const PlanEstimate estimate = tiny_estimate(make_layout(2, 2, 2, 1, 8), /*tied=*/true);
  const std::map<Key, Totals> totals = totals_by_stage_kind_group(estimate);
  CHECK(totals.at({0, kAR, CommGroup::kEmbedding}) == Totals{1, 16'384});
  CHECK(totals.at({1, kAR, CommGroup::kEmbedding}) == Totals{1, 16'384});
  // With pp 1 the embedding and head are one tensor: no such all-reduce.
  const PlanEstimate one_stage = tiny_estimate(make_layout(2, 1, 4, 1, 8), /*tied=*/true);
  for (const CollectiveTraffic& traffic : one_stage.collectives) {
    CHECK(traffic.group != CommGroup::kEmbedding);
  }
}

TEST_CASE("inventory: nothing to communicate on one GPU") {
  CHECK(tiny_estimate(make_layout(1, 1, 1, 1, 4)).collectives.empty());
}

}  // namespace
}  // namespace meshplan::planner
