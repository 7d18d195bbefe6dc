// overlap_moe_expert_parallel_comm (Megatron-Core's EP all-to-all overlap, "combined 1F1B";
// docs/research/ep-a2a-overlap.md): the two-stream replay of one merged layer pair against hand
// traces, the pp 1 step (m - 1 merged pairs), the plan file and the refusals.

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"
#include "meshplan/schedule.h"
#include "model_shape.h"

namespace meshplan::planner {
namespace {

EpOverlapLayer moe_layer(double a2a_seconds) {
  EpOverlapLayer layer;
  layer.attention_forward_seconds = 3;
  layer.mlp_forward_seconds = 2;
  layer.attention_backward_seconds = 6;
  layer.mlp_backward_seconds = 4;
  layer.dispatch_seconds = a2a_seconds;
  layer.combine_seconds = a2a_seconds;
  return layer;
}

Plan tiny_moe_plan() {
  Plan plan;
  plan.model = models::load_model("tiny-moe");
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout.dp = 2;
  plan.layout.ep = 2;
  plan.layout.global_batch = 8;  // micro-batch 1, dp 2: m = 4
  plan.num_gpus = 2;
  plan.options.framework = Framework::kMegatron;
  return plan;
}

}  // namespace

TEST_CASE("ep overlap: short all-to-alls hide entirely behind the other micro-batch's compute") {
  // Node by node (comm: combine_bwd, dispatch_fwd, dispatch_bwd, combine_fwd; comp: attn_fwd,
  // mlp_bwd, mlp_fwd, attn_bwd), a2a 1: combine_bwd [0,1], attn_fwd [0,3], mlp_bwd [3,7],
  // dispatch_fwd [3,4], dispatch_bwd [7,8], mlp_fwd [7,9], combine_fwd [9,10], attn_bwd [9,15]:
  // the compute stream's 3 + 4 + 2 + 6 = 15, against 19 in sequence.
  const std::vector<EpOverlapLayer> one{moe_layer(1)};
  CHECK(ep_overlap_layers_seconds(one, one) == 15.0);
}

TEST_CASE("ep overlap: long all-to-alls leave the communication stream on the critical path") {
  // a2a 5: combine_bwd [0,5], attn_fwd [0,3], mlp_bwd [5,9], dispatch_fwd [5,10], dispatch_bwd
  // [10,15], mlp_fwd [10,12], combine_fwd [15,20], attn_bwd [15,21]: 21, against 35.
  const std::vector<EpOverlapLayer> one{moe_layer(5)};
  CHECK(ep_overlap_layers_seconds(one, one) == 21.0);
}

TEST_CASE("ep overlap: a side without layers runs the other's nodes in sequence") {
  const std::vector<EpOverlapLayer> one{moe_layer(1)};
  // Forward alone: 3 + 1 + 2 + 1; backward alone: 1 + 4 + 1 + 6.
  CHECK(ep_overlap_layers_seconds(one, {}) == 7.0);
  CHECK(ep_overlap_layers_seconds({}, one) == 12.0);
  // A dense layer has no all-to-all: beside an MoE layer's backward it only adds compute.
  EpOverlapLayer dense;
  dense.attention_forward_seconds = 5;
  dense.attention_backward_seconds = 10;
  // combine_bwd [0,1], dense fwd [0,5], mlp_bwd [5,9], dispatch_bwd [9,10], attn_bwd [10,16].
  CHECK(ep_overlap_layers_seconds({dense}, one) == 16.0);
}

TEST_CASE("ep overlap: an MTP layer's post-process opens its backward and closes its forward") {
  EpOverlapLayer mtp = moe_layer(1);
  mtp.post_forward_seconds = 2;
  mtp.post_backward_seconds = 3;
  // post_bwd [0,3], combine_bwd [3,4], attn_fwd [3,6], mlp_bwd [6,10], dispatch_fwd [6,7],
  // dispatch_bwd [10,11], mlp_fwd [10,12], combine_fwd [12,13], attn_bwd [12,18], post_fwd
  // [18,20]: 20, against 9 + 15 in sequence.
  const std::vector<EpOverlapLayer> one{mtp};
  CHECK(ep_overlap_layers_seconds(one, one) == 20.0);
  CHECK(ep_overlap_layers_seconds(one, {}) == 9.0);
  CHECK(ep_overlap_layers_seconds({}, one) == 15.0);
  ChunkCost chunk;
  chunk.ep_overlap_layers = one;
  CHECK(ep_overlap_pair_saved_seconds(chunk, chunk) == 4.0);
  // A decoder layer's post-process is a no-op node: no wait is added (the trace above, 15).
  CHECK(ep_overlap_layers_seconds({moe_layer(1)}, {moe_layer(1)}) == 15.0);
}

TEST_CASE("ep overlap: the MTP depth is the chunk's last node, its extra work in its own nodes") {
  Plan plan = tiny_moe_plan();
  plan.options.overlap_moe_expert_parallel_comm = true;
  const ChunkCost without =
      estimate_plan(plan.model, plan.cluster, plan.layout, plan.options).stages.at(0).chunks.at(0);
  plan.model.mtp_num_layers = 1;
  const PlanEstimate estimate = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(estimate.feasible);
  const ChunkCost& with = estimate.stages.at(0).chunks.at(0);
  REQUIRE(with.ep_overlap_layers.size() == without.ep_overlap_layers.size() + 1);
  const EpOverlapLayer& decoder_last = with.ep_overlap_layers.at(3);
  const EpOverlapLayer& mtp = with.ep_overlap_layers.back();
  CHECK(decoder_last.post_forward_seconds == 0.0);
  CHECK(mtp.post_forward_seconds > 0.0);
  CHECK(mtp.dispatch_seconds == decoder_last.dispatch_seconds);
  CHECK(mtp.mlp_forward_seconds == decoder_last.mlp_forward_seconds);
  CHECK(mtp.attention_forward_seconds > decoder_last.attention_forward_seconds);  // eh_proj
  // Every second the depth adds to the chunk is in its node, forward and backward.
  const auto forward = [](const ChunkCost& c) {
    return c.forward_compute_seconds + c.forward_tp_comm_seconds + c.forward_cp_comm_seconds +
           c.forward_ep_comm_seconds;
  };
  const auto backward = [](const ChunkCost& c) {
    return c.backward_input_compute_seconds + c.backward_weight_compute_seconds +
           c.backward_tp_comm_seconds + c.backward_cp_comm_seconds + c.backward_ep_comm_seconds;
  };
  CHECK(forward(with) - forward(without) ==
        doctest::Approx(mtp.attention_forward_seconds + mtp.mlp_forward_seconds +
                        mtp.dispatch_seconds + mtp.combine_seconds + mtp.post_forward_seconds)
            .epsilon(1e-12)
            .scale(0));
  CHECK(backward(with) - backward(without) ==
        doctest::Approx(mtp.attention_backward_seconds + mtp.mlp_backward_seconds +
                        mtp.dispatch_seconds + mtp.combine_seconds + mtp.post_backward_seconds)
            .epsilon(1e-12)
            .scale(0));
}

TEST_CASE("ep overlap: pp 1 step saves m - 1 merged pairs, and off stays as before") {
  Plan plan = tiny_moe_plan();
  const PlanEstimate off = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(off.feasible);
  CHECK(off.stages.at(0).chunks.at(0).ep_overlap_saved_seconds == 0.0);
  plan.options.overlap_moe_expert_parallel_comm = true;
  const PlanEstimate on = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(on.feasible);
  const ChunkCost& chunk = on.stages.at(0).chunks.at(0);
  const double saved = chunk.ep_overlap_saved_seconds;
  CHECK(saved > 0);
  // At most every backward and forward all-to-all of the pair (3 MoE layers x 4, token count
  // gathers aside), and never more than the pair's compute could hide.
  const double a2a = moe_all_to_all_seconds(plan.model, plan.cluster, plan.layout, 0);
  CHECK(saved <= 3 * 4 * a2a * (1 + 1e-12));
  const ChunkCost& chunk_off = off.stages.at(0).chunks.at(0);
  CHECK(chunk.forward_seconds() == chunk_off.forward_seconds());
  CHECK(chunk.backward_seconds() == chunk_off.backward_seconds());
  // m = 4: the first forward and the last backward alone, 3 merged pairs.
  CHECK(off.step_time_s - on.step_time_s == doctest::Approx(3.0 * saved).epsilon(1e-12).scale(0));
}

TEST_CASE("ep overlap: stored only when on, read back, refused where Megatron refuses it") {
  Plan plan = tiny_moe_plan();
  CHECK_FALSE(plan_to_json(plan, {}).at("options").contains("overlap_moe_expert_parallel_comm"));
  plan.options.overlap_moe_expert_parallel_comm = true;
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("overlap_moe_expert_parallel_comm") == true);
  const Plan back = plan_from_json(json, "p.json");
  CHECK(back.options.overlap_moe_expert_parallel_comm);
  CHECK(back == plan);
  nlohmann::json bad = json;
  bad["options"]["overlap_moe_expert_parallel_comm"] = "on";
  CHECK_THROWS_WITH_AS(plan_from_json(bad, "p.json"),
                       doctest::Contains("p.json: options: overlap_moe_expert_parallel_comm"),
                       InputError);

  const auto code = [](const Plan& p) {
    return check_moe_a2a_overlap(p.model, p.layout, p.options).code;
  };
  CHECK(code(plan).empty());
  Plan fsdp = plan;
  fsdp.options.framework = Framework::kFsdp;
  CHECK(code(fsdp) == "moe_a2a_overlap");
  CHECK(check_moe_a2a_overlap(fsdp.model, fsdp.layout, fsdp.options)
            .reason.find("overlap_moe_expert_parallel_comm: framework fsdp") == 0);
  Plan ep1 = plan;
  ep1.layout.ep = 1;
  CHECK(code(ep1) == "moe_a2a_overlap");
  Plan dense = plan;
  dense.model = models::load_model("tiny");
  dense.layout.ep = 1;
  CHECK(code(dense) == "moe_a2a_overlap");
  Plan full = plan;
  full.layout.recompute = Recompute::kFull;
  CHECK(code(full) == "moe_a2a_overlap");
  Plan moe_module = plan;
  moe_module.layout.recompute = Recompute::kSelective;
  moe_module.layout.recompute_modules = kRecomputeMoe;
  CHECK(code(moe_module) == "moe_a2a_overlap");
  Plan pp2 = plan;
  pp2.layout.pp = 2;
  CHECK(code(pp2) == "moe_a2a_overlap");  // 1F1B at pp 2: Megatron asserts vpp
  CHECK(check_moe_a2a_overlap(pp2.model, pp2.layout, pp2.options)
            .reason.find("overlap_moe_expert_parallel_comm: pp 2 with schedule 1f1b") == 0);
  for (const ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kZbH1}) {
    Plan other = pp2;
    other.layout.schedule = kind;
    CHECK(code(other) == "moe_a2a_overlap");
  }
  Plan interleaved = pp2;
  interleaved.layout.schedule = ScheduleKind::kInterleaved;
  interleaved.layout.vpp = 2;
  CHECK(code(interleaved).empty());
  Plan zero2 = plan;
  zero2.layout.zero = 2;
  CHECK(code(zero2) == "moe_a2a_overlap");
  // The estimate reports the refusal as a rejection naming the option.
  const PlanEstimate refused = estimate_plan(full.model, full.cluster, full.layout, full.options);
  CHECK_FALSE(refused.feasible);
  CHECK(refused.rejection_code == "moe_a2a_overlap");
  // A plan file stating it with full recompute is an error naming the option.
  nlohmann::json full_json = json;
  full_json["layout"]["recompute"] = "full";
  CHECK_THROWS_WITH_AS(plan_from_json(full_json, "p.json"),
                       doctest::Contains("overlap_moe_expert_parallel_comm: recompute full"),
                       InputError);
}

TEST_CASE("ep overlap, interleaved: one more warm-up forward, the steady pairs merged") {
  // pp 2, vpp 2, m 4 (N = pp = 2): schedule table (mb, chunk) = (0,0) (1,0) (0,1) (1,1) (2,0)
  // (3,0) (2,1) (3,1); backward k runs table[k]'s micro-batch on chunk 1 - table[k].chunk.
  // Warm-up 2 (pp - s - 1) + (vpp - 1) N + 1 (schedules.py get_pp_rank_microbatches, d98e8a64,
  // the "one extra micro-batch" with overlap_moe_expert_parallel_comm): 5 on stage 0, 3 on 1.
  CHECK(warmup_forward_ops(ScheduleKind::kInterleaved, 2, 2, 4, 0, 0, true) == 5);
  CHECK(warmup_forward_ops(ScheduleKind::kInterleaved, 2, 2, 4, 1, 0, true) == 3);
  CHECK(warmup_forward_ops(ScheduleKind::kInterleaved, 2, 2, 4, 1, 0, false) == 2);
  CHECK(warmup_forward_ops(ScheduleKind::kInterleaved, 2, 2, 2, 0, 0, true) == 4);  // capped m v
  const PipelineSchedule compute =
      generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4, false, 0, true);
  // Stage 1: F(0,0) F(1,0) F(0,1), then (forward 3 + i, backward i) merged, then 3 backwards.
  struct Expected {
    OpKind kind;
    int64_t micro_batch, chunk, merged_chunk;
  };
  const OpKind F = OpKind::kForward, B = OpKind::kBackward;
  const std::vector<Expected> stage1{{F, 0, 0, -1}, {F, 1, 0, -1}, {F, 0, 1, -1}, {F, 1, 1, 1},
                                     {B, 0, 1, 1},  {F, 2, 0, 1},  {B, 1, 1, 0},  {F, 3, 0, 0},
                                     {B, 0, 0, 0},  {F, 2, 1, 0},  {B, 1, 0, 1},  {F, 3, 1, 1},
                                     {B, 2, 1, 1},  {B, 3, 1, -1}, {B, 2, 0, -1}, {B, 3, 0, -1}};
  REQUIRE(compute.stages.at(1).size() == stage1.size());
  for (size_t i = 0; i < stage1.size(); ++i) {
    CAPTURE(i);
    const PipelineOp& op = compute.stages[1][i];
    CHECK(op.kind == stage1[i].kind);
    CHECK(op.micro_batch == stage1[i].micro_batch);
    CHECK(op.chunk == stage1[i].chunk);
    CHECK(op.merged_chunk == stage1[i].merged_chunk);
  }
  // A merged pair waits for both inputs, then sends both outputs: stage 0's first pair,
  // F(3,0) (virtual stage 0: no receive) with B(0,1) (virtual stage 2).
  const PipelineSchedule schedule =
      generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4, true, 0, true);
  const std::vector<PipelineOp>& ops = schedule.stages.at(0);
  const auto first = std::find_if(ops.begin(), ops.end(),
                                  [](const PipelineOp& op) { return op.merged_chunk >= 0; });
  REQUIRE(first != ops.begin());
  const std::vector<OpKind> around{OpKind::kRecvGradient, OpKind::kForward, OpKind::kBackward,
                                   OpKind::kSendActivation, OpKind::kSendGradient};
  for (size_t i = 0; i < around.size(); ++i) {
    CHECK((first - 1 + static_cast<std::ptrdiff_t>(i))->kind == around[i]);
  }
  CHECK((first - 1)->micro_batch == 0);
  CHECK((first - 1)->chunk == 1);
  // Off: the plain interleaved lists, nothing merged.
  for (const auto& stage : generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4).stages) {
    for (const PipelineOp& op : stage) {
      CHECK(op.merged_chunk == -1);
    }
  }
}

TEST_CASE("ep overlap, interleaved: replay of the merged lists against a hand trace") {
  // pp 2, vpp 2, m 4, forward 1, backward 2, every merged pair 1 shorter (3 - 1 = 2), transfers
  // free. Stage 0: F(0,0) [0,1] F(1,0) [1,2]; stage 1: F(0,0) [1,2] F(1,0) [2,3]; stage 0:
  // F(0,1) [2,3] F(1,1) [3,4] F(2,0) [4,5]; stage 1: F(0,1) [3,4], pair F(1,1)+B(0,1) [4,6];
  // stage 0 pair F(3,0)+B(0,1) waits for B(0,1)'s gradient: [6,8]; stage 1 pair F(2,0)+B(1,1)
  // [6,8], pair F(3,0)+B(0,0) [8,10]; stage 0 pairs F(2,1)+B(1,1) [8,10], F(3,1)+B(0,0)
  // [10,12]; stage 1 pairs F(2,1)+B(1,0) [10,12], F(3,1)+B(2,1) [12,14], B(3,1) [14,16],
  // B(2,0) [16,18], B(3,0) [18,20]; stage 0 B(1,0) [12,14], B(2,1) [14,16], B(3,1) [16,18],
  // B(2,0) [18,20], B(3,0) [20,22].
  const PipelineSchedule schedule =
      generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4, true, 0, true);
  const std::vector<std::vector<double>> one{{1, 1}, {1, 1}};
  CHECK(replay_makespan(schedule, 1, 2, 0, one) == 22.0);
}

TEST_CASE("ep overlap, interleaved: a pair of different chunks, and the step's replay") {
  // tiny-moe (dense layer 0, MoE layers 1-3) on pp 2, vpp 2: one layer per chunk, stage 0 holds
  // layers 0 (dense) and 2, stage 1 layers 1 and 3.
  Plan plan = tiny_moe_plan();
  plan.layout.pp = 2;
  plan.layout.vpp = 2;
  plan.layout.schedule = ScheduleKind::kInterleaved;
  plan.num_gpus = 4;
  plan.options.overlap_moe_expert_parallel_comm = true;
  const PlanEstimate on = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(on.feasible);
  const ChunkCost& dense = on.stages.at(0).chunks.at(0);
  const ChunkCost& moe = on.stages.at(0).chunks.at(1);
  REQUIRE(dense.ep_overlap_layers.size() == 1);
  REQUIRE(moe.ep_overlap_layers.size() == 1);
  const EpOverlapLayer& d = dense.ep_overlap_layers[0];
  const EpOverlapLayer& e = moe.ep_overlap_layers[0];
  CHECK(d.dispatch_seconds == 0.0);
  CHECK(e.dispatch_seconds > 0.0);
  // Dense forward beside the MoE backward: combine_bwd runs under the dense forward, the rest of
  // the backward after it (combine_bwd [0, C], dense fwd [0, A], mlp_bwd from max(A, C)):
  // saves min(C, A).
  CHECK(ep_overlap_pair_saved_seconds(dense, moe) ==
        doctest::Approx(std::min(e.combine_seconds, d.attention_forward_seconds))
            .epsilon(1e-12)
            .scale(0));
  // MoE forward beside the dense backward: the forward's nodes in sequence, the dense backward
  // after mlp_fwd on the compute stream beside combine_fwd: saves min(C, dense backward).
  CHECK(ep_overlap_pair_saved_seconds(moe, dense) ==
        doctest::Approx(std::min(e.combine_seconds, d.attention_backward_seconds))
            .epsilon(1e-12)
            .scale(0));
  CHECK(ep_overlap_pair_saved_seconds(moe, moe) == moe.ep_overlap_saved_seconds);
  CHECK(dense.ep_overlap_saved_seconds == 0.0);
  // The pipeline: the interleaved closed form (m v + p - 1) max_s(f_s + b_s) / v plus the
  // merged lists' replay minus the plain lists' replay, both with each stage's own chunk times
  // (the merged pairs shorter by their chunks' pair savings).
  std::vector<std::vector<double>> f(2), b(2);
  std::vector<std::vector<std::vector<double>>> saved(2);
  double max_stage = 0;
  for (size_t s = 0; s < 2; ++s) {
    const std::vector<ChunkCost>& chunks = on.stages.at(s).chunks;
    saved[s].assign(2, std::vector<double>(2));
    double stage = 0;
    for (size_t i = 0; i < 2; ++i) {
      f[s].push_back(chunks[i].forward_seconds());
      b[s].push_back(chunks[i].backward_seconds());
      stage += chunks[i].forward_seconds() + chunks[i].backward_seconds();
      for (size_t j = 0; j < 2; ++j) {
        saved[s][i][j] = ep_overlap_pair_saved_seconds(chunks[i], chunks[j]);
      }
    }
    max_stage = std::max(max_stage, stage);
  }
  const double merged = replay_makespan(
      generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4, true, 0, true), f, b, saved);
  const double plain =
      replay_makespan(generate_schedule(ScheduleKind::kInterleaved, 2, 2, 4), f, b, saved);
  CHECK(merged < plain);
  const StepBreakdown& br = on.breakdown;
  CHECK(
      br.pipeline_compute_seconds + br.bubble_seconds ==
      doctest::Approx((4.0 * 2 + 2 - 1) * max_stage / 2 + merged - plain).epsilon(1e-12).scale(0));
  plan.options.overlap_moe_expert_parallel_comm = false;
  const PlanEstimate off = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(off.feasible);
  CHECK(on.step_time_s < off.step_time_s);
}

}  // namespace meshplan::planner

namespace meshplan::planner {

TEST_CASE("delay_wgrad_compute: weight gradients leave the backward's all-to-all chain") {
  // moe_layer(3) with weight gradients mlp 2 (of 4), attention 3 (of 6). Merged, without delay:
  // combine_bwd [0,3], attn_fwd [0,3], mlp_bwd [3,7], dispatch_fwd [3,6], dispatch_bwd [7,10]
  // (after mlp_bwd), mlp_fwd [7,9], combine_fwd [10,13], attn_bwd [10,16]: 16.
  EpOverlapLayer layer = moe_layer(3);
  layer.mlp_weight_seconds = 2;
  layer.attention_weight_seconds = 3;
  const std::vector<EpOverlapLayer> one{layer};
  CHECK(ep_overlap_layers_seconds(one, one, false) == 16.0);
  // With delay (issue items 5 and 10): mlp_bwd dgrad [3,5], dispatch_fwd [3,6], mlp wgrad [5,7]
  // on the compute stream outside the chain, dispatch_bwd [6,9] (after dispatch_fwd and the
  // dgrad), mlp_fwd [7,9], combine_fwd [9,12], attn_bwd dgrad [9,12], attention wgrad [12,15].
  CHECK(ep_overlap_layers_seconds(one, one, true) == 15.0);
  // The backward alone: 3 + 4 + 3 + 6 = 16 in sequence; with delay combine_bwd [0,3], mlp dgrad
  // [3,5], its wgrad [5,7] beside dispatch_bwd [5,8], attn dgrad [8,11], wgrad [11,14]: 14.
  CHECK(ep_overlap_layers_seconds({}, one, false) == 16.0);
  CHECK(ep_overlap_layers_seconds({}, one, true) == 14.0);
  // A pair's saving is against the forward in sequence (3 + 3 + 2 + 3 = 11) and the backward
  // alone: 11 + 16 - 16 = 11 without delay, 11 + 14 - 15 = 10 with it.
  ChunkCost chunk;
  chunk.ep_overlap_layers = one;
  CHECK(ep_overlap_pair_saved_seconds(chunk, chunk) == 11.0);
  chunk.ep_overlap_delay_wgrad = true;
  CHECK(ep_overlap_pair_saved_seconds(chunk, chunk) == 10.0);
}

TEST_CASE("delay_wgrad_compute: stored, refused without the overlap, shortens the backward") {
  Plan plan = tiny_moe_plan();
  plan.options.delay_wgrad_compute = true;
  CHECK(check_moe_a2a_overlap(plan.model, plan.layout, plan.options).code == "moe_a2a_overlap");
  CHECK(check_moe_a2a_overlap(plan.model, plan.layout, plan.options)
            .reason.find("delay_wgrad_compute: needs overlap_moe_expert_parallel_comm") == 0);
  plan.options.overlap_moe_expert_parallel_comm = true;
  CHECK(check_moe_a2a_overlap(plan.model, plan.layout, plan.options).ok());
  const nlohmann::json json = plan_to_json(plan, {});
  CHECK(json.at("options").at("delay_wgrad_compute") == true);
  CHECK(plan_from_json(json, "p.json") == plan);
  const PlanEstimate on = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  plan.options.delay_wgrad_compute = false;
  const PlanEstimate off = estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  REQUIRE(on.feasible);
  REQUIRE(off.feasible);
  const ChunkCost& a = on.stages.at(0).chunks.at(0);
  const ChunkCost& b = off.stages.at(0).chunks.at(0);
  // Alone, each backward's all-to-alls shorten by what its weight gradients hide
  // (ep_overlap_layers_seconds with no forward, delay against none).
  std::vector<EpOverlapLayer> reversed(b.ep_overlap_layers.rbegin(), b.ep_overlap_layers.rend());
  const double hidden = ep_overlap_layers_seconds({}, reversed, false) -
                        ep_overlap_layers_seconds({}, reversed, true);
  CHECK(hidden > 0);
  CHECK(a.backward_ep_comm_seconds ==
        doctest::Approx(b.backward_ep_comm_seconds - hidden).epsilon(1e-12).scale(0));
  CHECK(on.step_time_s < off.step_time_s);
}

}  // namespace meshplan::planner
