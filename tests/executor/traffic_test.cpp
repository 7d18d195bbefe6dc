// Collective calls and message bytes of one step, per (stage, kind, group), against the
// planner's inventory (estimate_plan(...).collectives). Runs under real mpirun; every rank compares
// its own counts and rank 0 checks the gathered verdicts.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <mpi.h>

#include <map>

#include "meshplan/cost_model.h"
#include "shard_dims.h"
#include "tiny_plan.h"
#include "trainer.h"

namespace meshplan::executor {
namespace {

using planner::CollectiveKind;
using planner::CommGroup;
using testing::make_layout;

// Planner totals for `stage` per (kind, group): message_bytes * calls_per_step, calls_per_step.
TrafficCounts predicted_traffic(const planner::Plan& plan, int stage) {
  TrafficCounts totals;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  for (const planner::CollectiveTraffic& c : estimate.collectives) {
    if (c.stage == stage) {
      totals[{c.kind, c.group}].bytes += c.total_message_bytes();
      totals[{c.kind, c.group}].calls += c.calls_per_step;
    }
  }
  return totals;
}

// The all-to-all bytes this rank sends over one step, from the router's assignments alone
// (Trainer::moe_stats, E token counts per router forward, in call order, the same on every ep
// rank of the stage): the dispatch and the combine's backward send every routed row of this
// rank's tokens (N k rows), the combine and the dispatch's backward send back the rows of every
// ep rank's tokens routed to this rank's experts. A recomputed layer routes again in its
// recomputed forward (one more dispatch and combine, the same rows), the backward runs once.
int64_t routed_all_to_all_bytes(const Trainer& trainer, const planner::Plan& plan) {
  const std::vector<int64_t>& counts = trainer.moe_stats().routed_counts;
  MPI_Comm ep = trainer.groups().comm(CommGroup::kEp);
  int ep_size = 0;
  int ep_rank = 0;
  MPI_Comm_size(ep, &ep_size);
  MPI_Comm_rank(ep, &ep_rank);
  const int n = static_cast<int>(counts.size());
  std::vector<int64_t> all(counts.size() * static_cast<size_t>(ep_size));
  MPI_Allgather(counts.data(), n, MPI_INT64_T, all.data(), n, MPI_INT64_T, ep);
  const int64_t E = plan.model.num_experts;
  const int64_t local_experts = E / ep_size;
  int64_t rows = 0;
  for (int64_t call = 0; call * E < n; call++) {
    for (int64_t e = 0; e < E; e++) {
      rows += counts[static_cast<size_t>(call * E + e)];
    }
    for (int64_t r = 0; r < ep_size; r++) {
      for (int64_t le = 0; le < local_experts; le++) {
        rows += all[static_cast<size_t>(r * n + call * E + ep_rank * local_experts + le)];
      }
    }
  }
  // The logged forwards are each MoE layer's and each recomputed one's (or MoE block's) again; only
  // the former have a backward, whose rows are theirs. When the stage recomputes all of its MoE
  // layers or none, every layer is logged equally often: rows x (forwards + originals) / forwards,
  // exact.
  int64_t originals = 0;
  int64_t forwards = 0;
  for (int64_t chunk = 0; chunk < plan.layout.vpp; ++chunk) {
    const planner::LayerRange range =
        planner::chunk_layers(plan.model, plan.layout, trainer.stage(), chunk);
    originals += range.num_moe(plan.model);
    forwards += range.num_moe(plan.model) +
                planner::recomputed_layers(plan.layout, range).num_moe(plan.model);
    // --recompute-modules moe routes each MoE block again too.
    if (plan.layout.recompute == planner::Recompute::kSelective &&
        planner::recomputes_module(plan.layout, planner::kRecomputeMoe)) {
      forwards += range.num_moe(plan.model);
    }
  }
  REQUIRE((forwards == originals || forwards == 2 * originals));
  return rows * (forwards + originals) / forwards * plan.model.hidden_size * 4;  // fp32 rows
}

// Checks this rank's measured calls and bytes per (kind, group) against the planner's inventory
// (the all-to-all bytes against routed_all_to_all_bytes, and their ep-group sum against ep times
// the planner's balanced figure); returns them.
TrafficCounts check_traffic(const models::TransformerConfig& model, const planner::Layout& layout,
                            const planner::PlanOptions& options = {}) {
  int world_size = 0;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  REQUIRE(world_size == layout.num_gpus());
  planner::Plan plan = testing::make_plan(model, layout);
  plan.options = options;
  validate_plan_for_executor(plan, model.name);
  Trainer trainer(plan, make_synthetic_source(model.vocab_size), AdamWConfig{}, MPI_COMM_WORLD);
  const StepOutcome outcome = trainer.train_step();
  trainer.wait_pending();  // the overlapped parameter gathers write into the trainer's buffers
  TrafficCounts expected = predicted_traffic(plan, trainer.stage());
  std::string verdict;
  const auto all_to_all = std::make_pair(CollectiveKind::kAllToAll, CommGroup::kEp);
  if (expected.count(all_to_all) > 0) {
    // The planner's bytes assume balanced routing; summed over the ep group they are exact.
    const int64_t measured = outcome.traffic.at(all_to_all).bytes;
    int64_t group_sum = 0;
    MPI_Allreduce(&measured, &group_sum, 1, MPI_INT64_T, MPI_SUM,
                  trainer.groups().comm(CommGroup::kEp));
    if (group_sum != plan.layout.ep * expected[all_to_all].bytes) {
      verdict += fmt::format("rank {}: ep group all-to-all {} B, planner {} x {} B; ", rank,
                             group_sum, plan.layout.ep, expected[all_to_all].bytes);
    }
    if (rank == 0) {
      MESSAGE("rank 0 all-to-all bytes: measured " << measured << ", planner (balanced) "
                                                   << expected[all_to_all].bytes);
    }
    expected[all_to_all].bytes = routed_all_to_all_bytes(trainer, plan);
  }
  std::map<std::pair<CollectiveKind, CommGroup>, std::pair<Traffic, Traffic>> both;
  for (const auto& [key, traffic] : outcome.traffic) {
    both[key].first = traffic;
  }
  for (const auto& [key, traffic] : expected) {
    both[key].second = traffic;
  }
  for (const auto& [key, pair] : both) {
    if (pair.first.bytes != pair.second.bytes || pair.first.calls != pair.second.calls) {
      verdict += fmt::format(
          "rank {} stage {} {} {}: measured {} B in {} calls, predicted {} B in "
          "{} calls; ",
          rank, trainer.stage(), planner::to_string(key.first), planner::to_string(key.second),
          pair.first.bytes, pair.first.calls, pair.second.bytes, pair.second.calls);
    }
  }
  // Gather the verdicts on rank 0.
  const int length = static_cast<int>(verdict.size());
  std::vector<int> lengths(static_cast<size_t>(world_size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(static_cast<size_t>(world_size), 0);
  for (int r = 1; r < world_size; r++) {
    offsets[r] = offsets[r - 1] + lengths[r - 1];
  }
  std::string all(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
  MPI_Gatherv(verdict.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
              MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    CAPTURE(planner::describe(layout));
    CHECK(all == "");
  }
  return outcome.traffic;
}

planner::Layout sp(planner::Layout layout) {
  layout.sequence_parallel = true;
  return layout;
}

models::TransformerConfig tiny_tied_learned() {
  models::TransformerConfig m = models::load_model("tiny");
  m.name = "tiny-tied";
  m.tied_embeddings = true;
  m.positions = models::Positions::kLearned;
  m.max_position_embeddings = 32;
  m.norm = models::Norm::kLayerNorm;
  m.attention_output_bias = true;
  m.mlp_bias = true;
  return m;
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: cp2 ring, and with full recompute") {
    planner::Layout layout = make_layout(1, 1, 1);
    layout.cp = 2;
    const TrafficCounts counts = check_traffic(models::load_model("tiny"), layout);
    // m = 16 / 2 = 8 micro-batches, 4 layers: K/V 2 * 32 = 64 sends, dK/dV 32, each
    // 2 (T / cp) B (g / t) d e = 2 * 16 * 2 * 2 * 16 * 4 = 8,192 bytes.
    const Traffic ring = counts.at({CollectiveKind::kSendRecv, CommGroup::kCp});
    CHECK(ring.calls == 96);
    CHECK(ring.bytes == 96 * 8192);
    layout.recompute = planner::Recompute::kFull;
    check_traffic(models::load_model("tiny"), layout);
    // Megatron's block method, 1 of 4 layers: only layer 0's ring runs forward again, 8 x 1 more
    // K/V sends than without recompute (full recompute: 8 x 4).
    layout.recompute_layers = 1;
    const TrafficCounts block = check_traffic(models::load_model("tiny"), layout);
    CHECK(block.at({CollectiveKind::kSendRecv, CommGroup::kCp}).calls == 96 + 8);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2") {
    check_traffic(models::load_model("tiny"), make_layout(2, 1, 1));
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 sequence parallel, full recompute") {
    planner::Layout layout = sp(make_layout(2, 1, 1));
    layout.recompute = planner::Recompute::kFull;
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 distributed saved activations") {
    // Full recompute, each block's input split over tp after its forward and all-gathered
    // before its recompute: one more tp all-gather of T h e per block and micro-batch.
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = planner::Recompute::kFull;
    planner::PlanOptions options;
    const TrafficCounts whole = check_traffic(models::load_model("tiny"), layout, options);
    options.distribute_saved_activations = true;
    const TrafficCounts split = check_traffic(models::load_model("tiny"), layout, options);
    // tiny: 4 blocks, m = 16 / 2 = 8 micro-batches of 2 x 32 tokens x 64 channels x 4 bytes =
    // 16,384 B.
    const std::pair<CollectiveKind, CommGroup> tp_gather = {CollectiveKind::kAllGather,
                                                            CommGroup::kTp};
    const Traffic before = whole.count(tp_gather) ? whole.at(tp_gather) : Traffic{};
    CHECK(split.at(tp_gather).calls - before.calls == 4 * 8);
    CHECK(split.at(tp_gather).bytes - before.bytes == 4 * 8 * 16384);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 block recompute, 3 of 4 layers") {
    // Megatron's block method: only the first 3 blocks run their forward (and its two
    // all-reduces) again, and with distributed saved activations only they gather their input.
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_layers = 3;
    planner::PlanOptions options;
    options.distribute_saved_activations = true;
    const TrafficCounts counts = check_traffic(models::load_model("tiny"), layout, options);
    // 8 micro-batches of 16,384 B hidden states: 3 x 8 gathers.
    CHECK(counts.at({CollectiveKind::kAllGather, CommGroup::kTp}).calls == 3 * 8);
    layout.sequence_parallel = true;
    options.distribute_saved_activations = false;
    check_traffic(models::load_model("tiny"), layout, options);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 uniform recompute in groups of 3") {
    // Megatron's uniform method: blocks 0-2 and block 3 are the two checkpointed groups, so
    // with distributed saved activations two inputs are gathered per micro-batch, not four;
    // every block's forward (and its two all-reduces) still runs again.
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_group_layers = 3;
    planner::PlanOptions options;
    options.distribute_saved_activations = true;
    const TrafficCounts counts = check_traffic(models::load_model("tiny"), layout, options);
    CHECK(counts.at({CollectiveKind::kAllGather, CommGroup::kTp}).calls == 2 * 8);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 recompute modules mlp") {
    // --recompute-modules mlp: each block's MLP runs its forward again before its backward,
    // with its output all-reduce (tiny: 4 blocks, 8 micro-batches of 16,384 B).
    planner::Layout layout = make_layout(2, 1, 1);
    layout.recompute = planner::Recompute::kSelective;
    const std::pair<CollectiveKind, CommGroup> ar = {CollectiveKind::kAllReduce, CommGroup::kTp};
    const TrafficCounts core = check_traffic(models::load_model("tiny"), layout);
    layout.recompute_modules = planner::kRecomputeMlp;
    const TrafficCounts mlp = check_traffic(models::load_model("tiny"), layout);
    CHECK(mlp.at(ar).calls - core.at(ar).calls == 4 * 8);
    CHECK(mlp.at(ar).bytes - core.at(ar).bytes == 4 * 8 * 16'384);
  }
  TEST_CASE("collective calls and bytes match the planner: MoE ep2, recompute modules") {
    // moe_act and layernorm rebuild the experts' activation and the pre-MLP norm locally: no
    // collective more, the all-to-alls as without them.
    planner::Layout layout = make_layout(1, 1, 2);
    layout.ep = 2;
    layout.recompute = planner::Recompute::kSelective;
    layout.recompute_modules =
        planner::kRecomputeCoreAttn | planner::kRecomputeMoeAct | planner::kRecomputeLayernorm;
    const TrafficCounts counts = check_traffic(models::load_model("tiny-moe"), layout);
    // m = 4 micro-batches, 3 MoE layers: dispatch and combine forward and backward.
    CHECK(counts.at({CollectiveKind::kAllToAll, CommGroup::kEp}).calls == 3 * 4 * 4);
  }
  TEST_CASE("collective calls and bytes match the planner: MoE ep2, recompute module moe") {
    // moe re-runs each MoE block's forward before its backward: dispatch and combine again,
    // and the dispatcher's token-count all-gather.
    planner::Layout layout = make_layout(1, 1, 2);
    layout.ep = 2;
    layout.recompute = planner::Recompute::kSelective;
    layout.recompute_modules = planner::kRecomputeCoreAttn | planner::kRecomputeMoe;
    const TrafficCounts counts = check_traffic(models::load_model("tiny-moe"), layout);
    // m = 4 micro-batches, 3 MoE layers: 2 forward, 2 again, 2 backward each.
    CHECK(counts.at({CollectiveKind::kAllToAll, CommGroup::kEp}).calls == 3 * 6 * 4);
  }
  TEST_CASE("collective calls and bytes match the planner: MoE ep2, block recompute 1 of 4") {
    // tiny-moe's dense layer 0 recomputed, its MoE layers 1-3 kept: no MoE layer routes again,
    // where full recompute routes each twice. (With 2 of 4, MoE layer 1 alone routes again:
    // the equivalence test runs it; the row count above needs every MoE layer alike.)
    planner::Layout layout = make_layout(1, 1, 2);
    layout.ep = 2;
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_layers = 1;
    const TrafficCounts counts = check_traffic(models::load_model("tiny-moe"), layout);
    // m = 16 / (2 x 2) = 4 micro-batches: 3 forwards x 2 + 3 backwards x 2 = 12 a batch.
    CHECK(counts.at({CollectiveKind::kAllToAll, CommGroup::kEp}).calls == 12 * 4);
  }
  TEST_CASE("collective calls and bytes match the planner: pp2 zb-h1, tied embeddings") {
    planner::Layout layout = make_layout(1, 2, 1);
    layout.schedule = planner::ScheduleKind::kZbH1;
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE("collective calls and bytes match the planner: pp2 with a 3/1 layer split") {
    planner::Layout layout = make_layout(1, 2, 1);
    layout.stage_layers = {3, 1};
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE("collective calls and bytes match the planner: dp2 ZeRO-0 and ZeRO-1") {
    check_traffic(models::load_model("tiny"), make_layout(1, 1, 2));
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 1;
    check_traffic(models::load_model("tiny"), layout);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: q/k norms tp2, and tp2 sp") {
    // tiny with qk_norm: each tp rank normalises its own heads, so the two gains' gradients are
    // partial and summed over tp once a step even without sequence parallelism.
    models::TransformerConfig model = models::load_model("tiny");
    model.name = "tiny-qk-norm";
    model.qk_norm = true;
    const std::pair<CollectiveKind, CommGroup> ar = {CollectiveKind::kAllReduce, CommGroup::kTp};
    const TrafficCounts plain = check_traffic(models::load_model("tiny"), make_layout(2, 1, 1));
    const TrafficCounts with_norms = check_traffic(model, make_layout(2, 1, 1));
    // One all-reduce more: 4 layers x 2 gains x head_dim 16 x 4 bytes = 512 bytes.
    CHECK(with_norms.at(ar).calls - plain.at(ar).calls == 1);
    CHECK(with_norms.at(ar).bytes - plain.at(ar).bytes == 4 * 2 * 16 * 4);
    // Under sequence parallelism they join the replicated-parameter message: no call more,
    // 512 bytes more in it.
    const TrafficCounts plain_sp =
        check_traffic(models::load_model("tiny"), sp(make_layout(2, 1, 1)));
    const TrafficCounts with_norms_sp = check_traffic(model, sp(make_layout(2, 1, 1)));
    CHECK(with_norms_sp.at(ar).calls == plain_sp.at(ar).calls);
    CHECK(with_norms_sp.at(ar).bytes - plain_sp.at(ar).bytes == 4 * 2 * 16 * 4);
  }
}

// tiny-tied as GPT-NeoX's parallel block: one tp reduction per layer forward.
models::TransformerConfig tiny_parallel_block() {
  models::TransformerConfig m = tiny_tied_learned();
  m.name = "tiny-parallel";
  m.parallel_residual = true;
  return m;
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: parallel block tp2, and sp, recompute") {
    // Without sequence parallelism: m = 8 micro-batches, 4 layers, one forward all-reduce and
    // two backward per layer, plus the embedding's and the LM head's: 8 (4 + 8 + 2) = 112 calls
    // of T B h e = 32 * 2 * 64 * 4 = 16,384 bytes; and the vocab-parallel loss's three per
    // micro-batch (max, sum of exponentials, target logit) of T B fp32 = 256 bytes: 24 calls.
    // A sequential block has 8 (8 + 8 + 2) + 24 = 168.
    const TrafficCounts counts = check_traffic(tiny_parallel_block(), make_layout(2, 1, 1));
    const Traffic all_reduce = counts.at({CollectiveKind::kAllReduce, CommGroup::kTp});
    CHECK(all_reduce.calls == 112 + 24);
    CHECK(all_reduce.bytes == 112 * 16384 + 24 * 256);
    check_traffic(tiny_parallel_block(), sp(make_layout(2, 1, 1)));
    planner::Layout layout = sp(make_layout(2, 1, 1));
    layout.recompute = planner::Recompute::kFull;
    check_traffic(tiny_parallel_block(), layout);
  }
}

planner::Layout with_ep(planner::Layout layout, int64_t ep) {
  layout.ep = ep;
  return layout;
}

planner::PlanOptions with_aux_loss() {
  planner::PlanOptions options;
  options.moe_aux_loss_coeff = 0.02;  // Mixtral's router_aux_loss_coef
  return options;
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: MoE ep2, and with full recompute") {
    const models::TransformerConfig model = models::load_model("tiny-moe");
    planner::Layout layout = with_ep(make_layout(1, 1, 2), 2);
    const TrafficCounts counts = check_traffic(model, layout, with_aux_loss());
    // m = 16 / (2 x 2) = 4 micro-batches, 3 MoE layers: 4 all-to-alls and 1 count all-gather
    // of 2 ranks x 4 experts x 8 B each per layer and micro-batch.
    CHECK(counts.at({CollectiveKind::kAllToAll, CommGroup::kEp}).calls == 4 * 3 * 4);
    CHECK(counts.at({CollectiveKind::kAllGather, CommGroup::kEp}).calls == 3 * 4);
    CHECK(counts.at({CollectiveKind::kAllGather, CommGroup::kEp}).bytes == 3 * 4 * 64);
    layout.recompute = planner::Recompute::kFull;
    check_traffic(model, layout);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("collective calls and bytes match the planner: MoE ep2 x dp2, ep2 x pp2") {
    const models::TransformerConfig model = models::load_model("tiny-moe");
    const TrafficCounts counts = check_traffic(model, with_ep(make_layout(1, 1, 4), 2));
    // Expert data parallel 4 / 2: one all-reduce of the rank's 2 of 4 experts of the 3 MoE
    // layers, 2 x 3 x (2 x 96 + 96) x 64 SwiGLU weights of 4 B.
    const Traffic experts = counts.at({CollectiveKind::kAllReduce, CommGroup::kExpertDp});
    CHECK(experts.calls == 1);
    CHECK(experts.bytes == 2 * 3 * (2 * 96 + 96) * 64 * 4);
    check_traffic(model, with_ep(make_layout(1, 2, 2), 2), with_aux_loss());
    models::TransformerConfig shared = model;  // a shared expert's weights reduce over dp 4
    shared.num_shared_experts = 1;
    shared.shared_expert_ffn_hidden_size = 96;
    check_traffic(shared, with_ep(make_layout(1, 1, 4), 2), with_aux_loss());
  }
  TEST_CASE("collective calls and bytes match the planner: gpt-oss's MoE parts, ep2 x dp2") {
    // tiny-moe with the router's bias (replicated, over dp 4 with the dense gradients) and each
    // expert's biases, 2 x 96 (fc1, gated) + 64 (fc2), reduced over expert dp 2 with its weights.
    models::TransformerConfig model = models::load_model("tiny-moe");
    model.name = "tiny-oss-moe";
    model.activation = models::Activation::kQuickGeglu;
    model.glu_linear_offset = 1.0;
    model.activation_clamp_value = 0.2;
    model.attention_sinks = true;
    model.router_bias = true;
    model.mlp_bias = true;
    const TrafficCounts counts = check_traffic(model, with_ep(make_layout(1, 1, 4), 2));
    const Traffic experts = counts.at({CollectiveKind::kAllReduce, CommGroup::kExpertDp});
    CHECK(experts.calls == 1);
    CHECK(experts.bytes == 2 * 3 * ((2 * 96 + 96) * 64 + 2 * 96 + 64) * 4);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: gpt-oss's sinks, tp2, tp2 sp, dp2") {
    // The sinks are split with the heads: each tp rank's gradient is whole, so tp carries no
    // message more than tiny's; over dp they ride in the gradient buckets.
    models::TransformerConfig model = models::load_model("tiny");
    model.name = "tiny-sinks";
    model.attention_sinks = true;
    model.activation = models::Activation::kQuickGeglu;
    model.glu_linear_offset = 1.0;
    model.activation_clamp_value = 0.2;
    const std::pair<CollectiveKind, CommGroup> tp_ar = {CollectiveKind::kAllReduce, CommGroup::kTp};
    const TrafficCounts plain = check_traffic(models::load_model("tiny"), make_layout(2, 1, 1));
    const TrafficCounts sinks = check_traffic(model, make_layout(2, 1, 1));
    CHECK(sinks.at(tp_ar).calls == plain.at(tp_ar).calls);
    CHECK(sinks.at(tp_ar).bytes == plain.at(tp_ar).bytes);
    check_traffic(model, sp(make_layout(2, 1, 1)));
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_traffic(model, zero1);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("collective calls and bytes match the planner: MLA with experts, ep2 x pp2") {
    models::TransformerConfig model = models::load_model("tiny-mla");
    const models::TransformerConfig moe = models::load_model("tiny-moe");
    model.num_experts = moe.num_experts;
    model.experts_per_token = moe.experts_per_token;
    model.expert_ffn_hidden_size = moe.expert_ffn_hidden_size;
    model.first_dense_layers = moe.first_dense_layers;
    check_traffic(model, with_ep(make_layout(1, 2, 2), 2), with_aux_loss());
  }
}

TEST_SUITE("mpi8") {
  TEST_CASE("collective calls and bytes match the planner: MoE cp2 x ep2 x pp2, balancing loss") {
    planner::Layout layout = with_ep(make_layout(1, 2, 2), 2);
    layout.cp = 2;
    const TrafficCounts counts =
        check_traffic(models::load_model("tiny-moe"), layout, with_aux_loss());
    // Stage 0 holds the dense layer 0 and MoE layer 1, stage 1 MoE layers 2 and 3: the token
    // counts (4 x 8 B) are all-reduced over cp at each MoE layer's forward, m = 16 / (2 x 2) = 4
    // micro-batches, so 4 or 8 calls.
    const Traffic balance = counts.at({CollectiveKind::kAllReduce, CommGroup::kCp});
    CHECK((balance.calls == 4 || balance.calls == 8));
    CHECK(balance.bytes == balance.calls * 32);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("collective calls and bytes match the planner: MLA tp2, and with full recompute") {
    const models::TransformerConfig model = models::load_model("tiny-mla");
    planner::Layout layout = make_layout(2, 1, 1);
    const TrafficCounts counts = check_traffic(model, layout);
    // Independently of the planner: m = 16 / 2 = 8 micro-batches of T B = 32 x 2 = 64 tokens,
    // 4 layers. Forward: the attention and MLP outputs' all-reduces, 64 x 64 x 4 B = 16,384 B;
    // backward: the MLP input's (16,384 B) and the query latent's (64 x 32 x 4 = 8,192 B), the kv
    // latent's (64 x 16 x 4 = 4,096 B) and the rotary key's (64 x 8 x 4 = 2,048 B) instead of
    // QKV's; the vocab-parallel embedding's and the head's input gradient's (16,384 B each)
    // and 3 cross-entropy reductions of 64 x 4 B.
    const Traffic all_reduce = counts.at({CollectiveKind::kAllReduce, CommGroup::kTp});
    CHECK(all_reduce.calls == 8 * (4 * (2 + 4) + 2 + 3));
    CHECK(all_reduce.bytes ==
          8 * (4 * (3 * 16'384 + 8'192 + 4'096 + 2'048) + 2 * 16'384 + 3 * 256));
    layout.recompute = planner::Recompute::kFull;
    check_traffic(model, layout);
  }
  TEST_CASE("collective calls and bytes match the planner: MLA tp2 sequence parallel, recompute") {
    const models::TransformerConfig model = models::load_model("tiny-mla");
    planner::Layout layout = sp(make_layout(2, 1, 1));
    const TrafficCounts counts = check_traffic(model, layout);
    // Independently of the planner, per micro-batch of 64 tokens (8 of them), 4 B elements,
    // gathered sizes: per layer the forward all-gathers the query latent (64 x 32 x 4 = 8,192 B),
    // the kv latent (4,096 B), the rotary key (2,048 B) and the MLP input (16,384 B); the
    // backward the attention's and MLP's output gradients (16,384 B each), the MLP input again
    // and the two latents again: 9 calls, 92,160 B. Reduce-scatters: the attention and MLP
    // outputs (16,384 B each), then the MLP input's and the three MLA inputs' gradients: 6
    // calls, 63,488 B. Plus the embedding's reduce-scatter and output-gradient all-gather, and
    // the head's two input all-gathers and input-gradient reduce-scatter (16,384 B each).
    const Traffic gathers = counts.at({CollectiveKind::kAllGather, CommGroup::kTp});
    CHECK(gathers.calls == 8 * (4 * 9 + 1 + 2));
    CHECK(gathers.bytes == 8 * (4 * 92'160 + 3 * 16'384));
    const Traffic scatters = counts.at({CollectiveKind::kReduceScatter, CommGroup::kTp});
    CHECK(scatters.calls == 8 * (4 * 6 + 1 + 1));
    CHECK(scatters.bytes == 8 * (4 * 63'488 + 2 * 16'384));
    // The tp-replicated parameters' gradients, once a step: per layer two norms (2 x 64), W_DQ
    // (64 x 32), the q norm (32), W_DKV (64 x 24), the kv norm (16): 3,760; 4 layers and the
    // final norm (64): 15,104 x 4 B; beside 8 x 3 cross-entropy all-reduces of 64 x 4 B.
    const Traffic all_reduce = counts.at({CollectiveKind::kAllReduce, CommGroup::kTp});
    CHECK(all_reduce.calls == 1 + 8 * 3);
    CHECK(all_reduce.bytes == 15'104 * 4 + 8 * 3 * 256);
    layout.recompute = planner::Recompute::kFull;
    check_traffic(model, layout);
    // Block method, 1 of 4: layer 0's forward gathers (latents, rotary key, MLP input) again.
    layout.recompute_layers = 1;
    const TrafficCounts block = check_traffic(model, layout);
    CHECK(block.at({CollectiveKind::kAllGather, CommGroup::kTp}).calls == gathers.calls + 8 * 4);
    layout.recompute_layers = 0;
    layout.recompute = planner::Recompute::kSelective;
    check_traffic(model, layout);
    models::TransformerConfig uncompressed = model;  // W_Q reads the hidden state (r_q = 0)
    uncompressed.q_lora_rank = 0;
    check_traffic(uncompressed, sp(make_layout(2, 1, 1)));
    check_traffic(uncompressed, make_layout(2, 1, 1));
  }
  TEST_CASE("collective calls and bytes match the planner: MLA tp2 recompute modules") {
    // --recompute-modules mla_up_proj: before the attention's backward the two up projections
    // gather their latents again (8,192 + 4,096 B per layer and micro-batch, as counted above),
    // the rotary key is kept; layernorm rebuilds the input norm with no collective; mlp re-runs
    // each dense MLP's input all-gather and output reduce-scatter (16,384 B each).
    const models::TransformerConfig model = models::load_model("tiny-mla");
    planner::Layout layout = sp(make_layout(2, 1, 1));
    layout.recompute = planner::Recompute::kSelective;
    const TrafficCounts core = check_traffic(model, layout);
    layout.recompute_modules =
        planner::kRecomputeCoreAttn | planner::kRecomputeMlaUpProj | planner::kRecomputeLayernorm;
    const TrafficCounts up = check_traffic(model, layout);
    const std::pair<CollectiveKind, CommGroup> ag = {CollectiveKind::kAllGather, CommGroup::kTp};
    const std::pair<CollectiveKind, CommGroup> rs = {CollectiveKind::kReduceScatter,
                                                     CommGroup::kTp};
    CHECK(up.at(ag).calls - core.at(ag).calls == 8 * 4 * 2);
    CHECK(up.at(ag).bytes - core.at(ag).bytes == 8 * 4 * (8'192 + 4'096));
    CHECK(up.at(rs).calls == core.at(rs).calls);
    layout.recompute_modules |= planner::kRecomputeMlp;
    const TrafficCounts mlp = check_traffic(model, layout);
    CHECK(mlp.at(ag).bytes - up.at(ag).bytes == 8 * 4 * 16'384);
    CHECK(mlp.at(rs).calls - up.at(rs).calls == 8 * 4);
    CHECK(mlp.at(rs).bytes - up.at(rs).bytes == 8 * 4 * 16'384);
    models::TransformerConfig uncompressed = model;  // the queries re-read the hidden state
    uncompressed.q_lora_rank = 0;
    check_traffic(uncompressed, layout);
    layout.sequence_parallel = false;  // no latent gathers; the MLP's all-reduce again
    check_traffic(uncompressed, layout);
    check_traffic(model, layout);
  }
  TEST_CASE("collective calls and bytes match the planner: MLA cp2 ring, unpadded value heads") {
    planner::Layout layout = make_layout(1, 1, 1);
    layout.cp = 2;
    const TrafficCounts counts = check_traffic(models::load_model("tiny-mla"), layout);
    // m = 8 micro-batches, 4 layers: 32 K/V sends forward, 32 backward, 32 dK/dV, each
    // (T / cp) B a (d + d_v) e = 16 x 2 x 4 x (24 + 16) x 4 = 20,480 B (value heads 16 wide, not
    // the 24 they are padded to for the attention core).
    const Traffic ring = counts.at({CollectiveKind::kSendRecv, CommGroup::kCp});
    CHECK(ring.calls == 96);
    CHECK(ring.bytes == 96 * 20'480);
  }
  TEST_CASE("collective calls and bytes match the planner: MLA dp2 ZeRO-1, pp2 3/1 split") {
    const models::TransformerConfig model = models::load_model("tiny-mla");
    planner::Layout zero1 = make_layout(1, 1, 2);
    zero1.zero = 1;
    check_traffic(model, zero1);
    planner::Layout split = make_layout(1, 2, 1);
    split.stage_layers = {3, 1};
    check_traffic(model, split);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("ZeRO-2 reduce-scatters the padded gradients once per micro-batch") {
    planner::Layout layout = make_layout(1, 1, 2);  // micro-batch 2, global batch 16
    layout.zero = 2;
    const models::TransformerConfig tiny = models::load_model("tiny");
    const TrafficCounts traffic = check_traffic(tiny, layout);
    // Independently of the planner's inventory: m = 16 / (2 x 2) = 4 micro-batches per rank,
    // each reduce-scattering the whole buffer of N = count_parameters(tiny) elements, padded to
    // ceil(N / 2) x 2, 4 bytes each; the updated parameters are all-gathered once.
    const int64_t n = models::count_parameters(tiny).total;
    const int64_t padded_bytes = (n + 1) / 2 * 2 * 4;
    CHECK(traffic.at({CollectiveKind::kReduceScatter, CommGroup::kDp}).bytes == 4 * padded_bytes);
    CHECK(traffic.at({CollectiveKind::kAllGather, CommGroup::kDp}).bytes == padded_bytes);
    CHECK(traffic.count({CollectiveKind::kAllReduce, CommGroup::kDp}) == 0);
  }
  TEST_CASE("ZeRO-3 gathers each layer's parameters before every forward and backward") {
    planner::Layout layout = make_layout(1, 1, 2);
    layout.zero = 3;
    const models::TransformerConfig tiny = models::load_model("tiny");
    const TrafficCounts traffic = check_traffic(tiny, layout);
    // As FSDP with one unit per layer (4 layers): m = 4 micro-batches each reduce-scatter the
    // padded buffer in 4 calls; the parameters are gathered, in 4 calls, before each of the 4
    // forwards and 4 backwards, and not after the optimizer step.
    const int64_t n = models::count_parameters(tiny).total;
    const int64_t padded_bytes = (n + 1) / 2 * 2 * 4;
    CHECK(traffic.at({CollectiveKind::kReduceScatter, CommGroup::kDp}).bytes == 4 * padded_bytes);
    CHECK(traffic.at({CollectiveKind::kReduceScatter, CommGroup::kDp}).calls == 4 * 4);
    CHECK(traffic.at({CollectiveKind::kAllGather, CommGroup::kDp}).bytes == 8 * padded_bytes);
    CHECK(traffic.at({CollectiveKind::kAllGather, CommGroup::kDp}).calls == 8 * 4);
    // Under Megatron's block method (2 of 4 layers) the recompute runs inside the backward,
    // whose gather it uses: the same dp traffic.
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_layers = 2;
    const TrafficCounts block = check_traffic(tiny, layout);
    CHECK(block.at({CollectiveKind::kAllGather, CommGroup::kDp}).calls == 8 * 4);
    CHECK(block.at({CollectiveKind::kReduceScatter, CommGroup::kDp}).calls == 4 * 4);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("a small options.bucket_bytes splits the dp reductions into that many calls") {
    // plan --bucket-mb 0.01: bucket_bytes = floor(0.01 x 2^20) = 10485 B, a full bucket whole
    // fp32 elements (10,484 B; ZeRO: whole blocks of dp = 2 elements, 10,480 B). The tiny
    // model's N = count_parameters(tiny).total fp32 gradients (4 N B) go in ceil(4 N / 10484)
    // calls, full buckets and the remainder, the same bytes as one call. ZeRO 1 pads to
    // ceil(N / 2) x 2 and all-gathers in the same buckets; ZeRO 2 reduce-scatters them every
    // micro-batch (m = 4). check_traffic compares every call with the planner's inventory too.
    // The plan's framework is the executor's own (meshplan): under Megatron, ZeRO 2 reduces one
    // FSDP unit (layer) per call whatever the bucket size (checked at the end).
    planner::PlanOptions options;
    options.framework = planner::Framework::kMeshplan;
    options.bucket_bytes = 10485;
    const models::TransformerConfig tiny = models::load_model("tiny");
    const int64_t n = models::count_parameters(tiny).total;
    const int64_t bytes = 4 * n;
    const TrafficCounts zero0 = check_traffic(tiny, make_layout(1, 1, 2), options);
    const Traffic all_reduce = zero0.at({CollectiveKind::kAllReduce, CommGroup::kDp});
    CHECK(all_reduce.calls == (bytes + 10483) / 10484);
    CHECK(all_reduce.calls > 1);
    CHECK(all_reduce.bytes == bytes);
    planner::Layout layout = make_layout(1, 1, 2);
    const int64_t padded_bytes = (n + 1) / 2 * 2 * 4;
    const int64_t calls = (padded_bytes + 10479) / 10480;
    for (int zero : {1, 2}) {
      layout.zero = zero;
      const TrafficCounts sharded = check_traffic(tiny, layout, options);
      const int64_t rounds = zero == 2 ? 4 : 1;
      const Traffic reduce = sharded.at({CollectiveKind::kReduceScatter, CommGroup::kDp});
      CHECK(reduce.calls == rounds * calls);
      CHECK(reduce.bytes == rounds * padded_bytes);
      const Traffic gather = sharded.at({CollectiveKind::kAllGather, CommGroup::kDp});
      CHECK(gather.calls == calls);
      CHECK(gather.bytes == padded_bytes);
    }
    options.framework = planner::Framework::kMegatron;
    layout.zero = 2;
    const TrafficCounts units = check_traffic(tiny, layout, options);
    CHECK(units.at({CollectiveKind::kReduceScatter, CommGroup::kDp}).calls == 4 * tiny.num_layers);
    CHECK(units.at({CollectiveKind::kAllGather, CommGroup::kDp}).calls == tiny.num_layers);
  }
}

TEST_SUITE("mpi2") {
  TEST_CASE("a deepspeed plan's ZeRO 1-2 buckets are all-reduced, as the planner counts them") {
    // DeepSpeed all-reduces each ZeRO 1-2 bucket (planner::zero_grad_all_reduce): the whole
    // padded buffer, once a step at ZeRO 1 and every micro-batch at ZeRO 2 (m = 4 here), and no
    // reduce-scatter; the parameter all-gather is unchanged. check_traffic also compares every
    // (kind, group) with the planner's inventory.
    planner::PlanOptions options;
    options.framework = planner::Framework::kDeepSpeed;
    const models::TransformerConfig tiny = models::load_model("tiny");
    const int64_t padded_bytes = (models::count_parameters(tiny).total + 1) / 2 * 2 * 4;
    planner::Layout layout = make_layout(1, 1, 2);
    for (int zero : {1, 2}) {
      CAPTURE(zero);
      layout.zero = zero;
      const TrafficCounts traffic = check_traffic(tiny, layout, options);
      const int64_t rounds = zero == 2 ? layout.num_micro_batches() : 1;
      CHECK(traffic.at({CollectiveKind::kAllReduce, CommGroup::kDp}).bytes ==
            rounds * padded_bytes);
      CHECK(traffic.count({CollectiveKind::kReduceScatter, CommGroup::kDp}) == 0);
      CHECK(traffic.at({CollectiveKind::kAllGather, CommGroup::kDp}).bytes == padded_bytes);
    }
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("collective calls and bytes match the planner: cp2 x tp2 sequence parallel, ZeRO-1") {
    planner::Layout layout = sp(make_layout(2, 1, 1));
    layout.cp = 2;
    check_traffic(models::load_model("tiny"), layout);
    layout = make_layout(1, 1, 2);
    layout.cp = 2;
    layout.zero = 1;
    check_traffic(models::load_model("tiny"), layout);
  }
}

TEST_SUITE("mpi4") {
  TEST_CASE("collective calls and bytes match the planner: pp2 interleaved x dp2, ZeRO-2") {
    planner::Layout layout = make_layout(1, 2, 2);
    layout.schedule = planner::ScheduleKind::kInterleaved;
    layout.vpp = 2;
    layout.zero = 2;
    check_traffic(models::load_model("tiny"), layout);
    planner::PlanOptions options;
    options.bucket_bytes = 10485;  // several buckets per chunk share
    check_traffic(models::load_model("tiny"), layout, options);
  }
  TEST_CASE("collective calls and bytes match the planner: pp2 3/1 split x dp2, ZeRO-3") {
    planner::Layout layout = make_layout(1, 2, 2);
    layout.stage_layers = {3, 1};
    layout.zero = 3;
    check_traffic(models::load_model("tiny"), layout);
  }
  TEST_CASE(
      "collective calls and bytes match the planner: pp2 1/3 split x tp2, sequence parallel") {
    planner::Layout layout = make_layout(2, 2, 1);
    layout.stage_layers = {1, 3};
    check_traffic(tiny_tied_learned(), sp(layout));
  }
  TEST_CASE("collective calls and bytes match the planner: dp4 ZeRO-3, small buckets") {
    planner::Layout layout = make_layout(1, 1, 4, 1, 16);
    layout.zero = 3;
    planner::PlanOptions options;
    options.bucket_bytes = 10485;  // ZeRO-3 buckets are per layer: bucket_bytes does not apply
    check_traffic(models::load_model("tiny"), layout, options);
  }
  TEST_CASE(
      "collective calls and bytes match the planner: tp2 x pp2 with pipeline scatter/gather") {
    planner::PlanOptions options;
    options.scatter_gather_pipeline = true;
    check_traffic(models::load_model("tiny"), make_layout(2, 2, 1), options);
  }
}

TEST_SUITE("mpi8") {
  TEST_CASE(
      "collective calls and bytes match the planner: tp2 x pp2 x dp2, interleaved, SP, ZeRO-1") {
    planner::Layout layout = sp(make_layout(2, 2, 2));
    layout.schedule = planner::ScheduleKind::kInterleaved;
    layout.vpp = 2;
    layout.zero = 1;
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE(
      "collective calls and bytes match the planner: tp2 x pp2 x dp2, zb-h1, SP, ZeRO-2, tied") {
    planner::Layout layout = sp(make_layout(2, 2, 2));
    layout.schedule = planner::ScheduleKind::kZbH1;
    layout.zero = 2;
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE(
      "collective calls and bytes match the planner: tp2 x pp2 x dp2, zb-h1, SP, ZeRO-3, tied") {
    planner::Layout layout = sp(make_layout(2, 2, 2));
    layout.schedule = planner::ScheduleKind::kZbH1;
    layout.zero = 3;
    check_traffic(tiny_tied_learned(), layout);
  }
  TEST_CASE("collective calls and bytes match the planner: tp2 x pp2 x dp2, 1f1b, ZeRO-2") {
    planner::Layout layout = make_layout(2, 2, 2);
    layout.zero = 2;
    check_traffic(models::load_model("tiny"), layout);
  }
  TEST_CASE(
      "collective calls and bytes match the planner: tp2 x pp2 x dp2, 1f1b, selective recompute") {
    planner::Layout layout = make_layout(2, 2, 2);
    layout.recompute = planner::Recompute::kSelective;
    check_traffic(tiny_tied_learned(), layout);
  }
}

}  // namespace
}  // namespace meshplan::executor
