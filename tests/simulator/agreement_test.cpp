// Simulated against analytic step time (planner::estimate_plan) on preset models and clusters.
// With communication costs zero both see the same durations, so gpipe and 1F1B must agree to
// rounding: the planner's closed form sum_s (f_s + b_s) + (m - 1) max_s (f_s + b_s) is the
// makespan of a flow shop of identical jobs, which the replay of the op lists reproduces.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "meshplan/dp_buckets.h"
#include "meshplan/models.h"
#include "meshplan/simulator.h"
#include "relative_error.h"

namespace meshplan::simulator {
namespace {

planner::Plan preset_plan(const char* model, const char* cluster, int64_t tp, int64_t pp,
                          int64_t dp, int64_t vpp, int64_t global_batch,
                          planner::ScheduleKind schedule) {
  planner::Plan plan;
  plan.model = models::load_model(model);
  plan.cluster = models::load_cluster(cluster);
  plan.layout.tp = tp;
  plan.layout.pp = pp;
  plan.layout.dp = dp;
  plan.layout.vpp = vpp;
  plan.layout.global_batch = global_batch;
  plan.layout.schedule = schedule;
  plan.layout.sequence_parallel = tp > 1;
  plan.layout.zero = 1;
  plan.num_gpus = plan.layout.num_gpus();
  return plan;
}

planner::Plan zero3_plan(const char* model, const char* cluster, int64_t tp, int64_t pp, int64_t dp,
                         int64_t vpp, int64_t global_batch, planner::ScheduleKind schedule) {
  planner::Plan plan = preset_plan(model, cluster, tp, pp, dp, vpp, global_batch, schedule);
  plan.layout.zero = 3;
  return plan;
}

// Replays `plan` without communication and checks the replay is at most the planner's closed
// form and within `tolerance` (relative) of it.
void check_replay_at_most_bound(const planner::Plan& plan, double tolerance) {
  SimulationOptions options;
  options.zero_communication = true;
  const SimulationResult result = simulate_plan(plan, options, "test");
  MESSAGE("simulated - analytic: " << result.step_time_s - result.analytic_step_time_s << " s of "
                                   << result.analytic_step_time_s);
  CHECK(result.step_time_s <= result.analytic_step_time_s);
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < tolerance);
}

// Replays `plan` with communication and checks it within `tolerance` (relative) of the planner.
void check_agrees(const planner::Plan& plan, double tolerance) {
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "test");
  MESSAGE("simulated " << result.step_time_s << " s, analytic " << result.analytic_step_time_s);
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < tolerance);
}

}  // namespace

TEST_CASE("agreement: zero communication, gpipe and 1f1b equal the planner's closed form") {
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 64, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 64, ScheduleKind::kGpipe),
      preset_plan("llama3-70b", "dgx-h100", 8, 4, 8, 1, 128, ScheduleKind::kOneFOneB),
  };
  SimulationOptions options;
  options.zero_communication = true;
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    const SimulationResult result = simulate_plan(plan, options, "test");
    // 1e-9 relative: the bound; the two sum the same doubles in different orders.
    CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-9);
    for (const TaskRecord& task : result.tasks) {
      if (is_communication(task.kind)) {
        REQUIRE(task.end_seconds == task.start_seconds);  // zero communication is zero
      }
    }
  }
}

planner::Plan with_stage_layers(planner::Plan plan, std::vector<int64_t> stage_layers) {
  plan.layout.stage_layers = std::move(stage_layers);
  return plan;
}

TEST_CASE("agreement: zero communication, uneven stages, slowest last: equal to the closed form") {
  // Stages of unequal length replay with their own durations (the planner's chunk costs).
  // GPipe: two flow shops, sum_s (f_s + b_s) + (m - 1)(max_s f_s + max_s b_s), for any stage
  // lengths (7/9/9/7: the LM-head stage is slowest forward, an inner one backward). 1F1B:
  // sum_s (f_s + b_s) + (m - 1) max_s (f_s + b_s) when the slowest stage is the last (its m
  // micro-batches follow the whole fill and precede the whole drain). Splits: Megatron-Core
  // first/last ones.
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      with_stage_layers(preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kGpipe),
                        {9, 9, 9, 5}),
      with_stage_layers(preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kGpipe),
                        {7, 9, 9, 7}),
      with_stage_layers(
          preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 7, 4, 1, 64, ScheduleKind::kGpipe),
          {13, 14, 14, 14, 14, 14, 13}),
      with_stage_layers(
          preset_plan("llama3-70b", "dgx-h100", 8, 3, 8, 1, 128, ScheduleKind::kOneFOneB),
          {26, 27, 27}),
      with_stage_layers(
          preset_plan("llama3-8b", "dgx-h100", 1, 2, 2, 1, 64, ScheduleKind::kOneFOneB), {12, 20}),
  };
  SimulationOptions options;
  options.zero_communication = true;
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    const SimulationResult result = simulate_plan(plan, options, "test");
    // 1e-9 relative, as for even stages: the same doubles summed in different orders.
    CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-9);
  }
}

TEST_CASE(
    "agreement: zero communication, uneven 1f1b with a slower inner stage: at most the form") {
  // When a stage before the last is the slowest, 1F1B's cooldown backwards on it overlap the
  // later stages' last round trip, which the flow-shop form counts in full: the replay is
  // shorter, by at most one micro-batch's f + b through the other stages.
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      with_stage_layers(
          preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kOneFOneB),
          {7, 9, 9, 7}),
      with_stage_layers(
          preset_plan("llama3-8b", "dgx-h100", 1, 2, 2, 1, 64, ScheduleKind::kOneFOneB), {20, 12}),
      with_stage_layers(
          preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 7, 4, 1, 64, ScheduleKind::kOneFOneB),
          {13, 14, 14, 14, 14, 14, 13}),
  };
  SimulationOptions options;
  options.zero_communication = true;
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    const SimulationResult result = simulate_plan(plan, options, "test");
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    double sum = 0, slowest = 0;  // one micro-batch through every stage; the slowest stage
    for (const planner::StageEstimate& stage : estimate.stages) {
      const double f_plus_b =
          stage.chunks[0].forward_seconds() + stage.chunks[0].backward_seconds();
      sum += f_plus_b;
      slowest = std::max(slowest, f_plus_b);
    }
    MESSAGE("simulated - analytic: " << result.step_time_s - result.analytic_step_time_s << " s of "
                                     << result.analytic_step_time_s);
    // Equal when the slowest stage is on the critical path throughout: up to rounding, as the
    // two sum the same times in another order.
    CHECK(result.step_time_s <= result.analytic_step_time_s * (1.0 + 1e-12));
    CHECK(result.analytic_step_time_s - result.step_time_s <= sum - slowest);
  }
}

TEST_CASE("agreement: zero communication, interleaved and zb-h1 are at most the planner's bound") {
  // The planner's interleaved form (m v + p - 1) c takes c from the heaviest stage for every
  // chunk, and its zb-h1 form m max_s(F+B+W) + (p - 1) max_s(F+B-W) the heaviest stage for
  // every slot; the embedding and LM-head chunks are heavier than the rest, so the replay is
  // shorter. With uniform chunks the replay equals both forms exactly (pipeline_replay_test).
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 2, 64, ScheduleKind::kInterleaved),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 64, ScheduleKind::kZbH1),
      preset_plan("llama3-70b", "dgx-h100", 8, 4, 8, 1, 128, ScheduleKind::kZbH1),
  };
  // Measured 0.4% (interleaved) and 0.7% (zb-h1) below; 1% bounds the heavy end chunks.
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    check_replay_at_most_bound(plan, 0.01);
  }
}

TEST_CASE(
    "agreement: zero communication, interleaved micro-batch groups N != pp at most the bound") {
  // Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage N (Layout::
  // microbatch_group): with uniform chunks the op lists' makespan is (m v + p - 1) chunk slots for
  // every N Megatron accepts (schedule_test), so the planner keeps that form; the heavier
  // embedding and LM-head chunks make the replay shorter, as for N = pp above. m = 96 / 4 = 24 on
  // pp 8: N 12 and 24 (24 % N = 0) and 16 (24 % 16 = 8 >= pp). Measured 0.15% (N = pp), 0.05%
  // (12) and 0.10% (16) below the form; 1% bounds it, as for N = pp above. N = m = 24 (every
  // micro-batch in one group) runs each chunk's 24 micro-batches back to back, so the last
  // stage's LM-head chunk (its cross-entropy counted pass by pass since 2026-11-23) stays on the
  // path: 0.27% above the form, not below it; within 1% either way.
  using planner::ScheduleKind;
  for (int64_t group : {0, 12, 16, 24}) {
    planner::Plan plan =
        preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 2, 96, ScheduleKind::kInterleaved);
    plan.layout.microbatch_group = group;
    CAPTURE(planner::describe(plan.layout));
    if (group == 24) {
      SimulationOptions options;
      options.zero_communication = true;
      const SimulationResult result = simulate_plan(plan, options, "test");
      CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.01);
    } else {
      check_replay_at_most_bound(plan, 0.01);
    }
  }
}

TEST_CASE("agreement: zero communication, uneven interleaved and zb-h1 at most the bound") {
  // The same forms with the slowest stage's times for every slot; uneven stages leave the
  // others lighter, so the replay is shorter. Measured here: 0.80% (zb-h1 7/9/9/7), 0.90%
  // (zb-h1 9/9/9/5) and 1.62% (interleaved vpp 2, 6/10/10/6) below; 3% bounds that gap.
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      with_stage_layers(preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kZbH1),
                        {7, 9, 9, 7}),
      with_stage_layers(preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kZbH1),
                        {9, 9, 9, 5}),
      with_stage_layers(
          preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 2, 64, ScheduleKind::kInterleaved),
          {6, 10, 10, 6}),
  };
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    check_replay_at_most_bound(plan, 0.03);
  }
}

TEST_CASE("agreement: zero communication, embedding/loss-accounted chunks at most the bound") {
  // Llama 3's split on a 30-layer copy of llama3-8b: 7/8/8/7 on pp 4, 8 slots per stage, the
  // first chunk of stage 0 and the last of stage 3 one layer short (vpp 8: embedding alone,
  // LM head and loss alone). Each chunk replays with its own duration; the planner's form
  // (m v + p - 1) c takes c = the heaviest stage over v for every slot, so the replay is
  // shorter: measured 0.78% (vpp 2), 0.57% (vpp 4), 0.46% (vpp 8); 3% bounds that gap.
  using planner::ScheduleKind;
  for (int64_t vpp : {2, 4, 8}) {
    planner::Plan plan = with_stage_layers(
        preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, vpp, 64, ScheduleKind::kInterleaved),
        {7, 8, 8, 7});
    plan.model.num_layers = 30;
    CAPTURE(planner::describe(plan.layout));
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    REQUIRE(estimate.feasible);
    CHECK(estimate.stages[0].chunks[0].num_layers == 8 / vpp - 1);
    CHECK(estimate.stages[3].chunks[static_cast<size_t>(vpp - 1)].num_layers == 8 / vpp - 1);
    check_replay_at_most_bound(plan, 0.03);
  }
}

TEST_CASE(
    "agreement: zero communication, memory-shifted pipeline-layout chunks at most the bound") {
  // The search's memory-shifted split (planner memory_shifted_splits, k = 1) of llama3-8b's 32
  // layers on pp 4: 7/8/8/9, each stage's layers over its vpp chunks evenly, longer chunks last
  // (stage 0's first chunk one short, stage 3's last one long). Each chunk replays with its
  // own duration; the planner's (m v + p - 1) c with c the heaviest stage over v bounds it.
  using planner::ScheduleKind;
  for (int64_t vpp : {2, 4, 8}) {
    const planner::Plan plan = with_stage_layers(
        preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, vpp, 64, ScheduleKind::kInterleaved),
        {7, 8, 8, 9});
    CAPTURE(planner::describe(plan.layout));
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    REQUIRE(estimate.feasible);
    CHECK(estimate.stages[0].chunks[0].num_layers == 8 / vpp - 1);
    CHECK(estimate.stages[3].chunks[static_cast<size_t>(vpp - 1)].num_layers == 8 / vpp + 1);
    check_replay_at_most_bound(plan, 0.03);
  }
}

TEST_CASE("agreement: multi-token prediction on the last stage, with and without communication") {
  // DeepSeek-V3's MTP module (mtp_num_layers 1) on tiny-moe: the last stage's chunk carries one
  // more MoE layer, eh_proj and a second head; the replay reads the planner's chunk costs.
  planner::Plan plan =
      preset_plan("tiny-moe", "dgx-h100", 2, 2, 2, 1, 8, planner::ScheduleKind::kOneFOneB);
  plan.model.mtp_num_layers = 1;
  SimulationOptions options;
  options.zero_communication = true;
  const SimulationResult result = simulate_plan(plan, options, "test");
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-9);
  check_agrees(plan, 0.10);
  planner::Plan without = plan;
  without.model.mtp_num_layers = 0;
  CHECK(simulate_plan(plan, options, "test").step_time_s >
        simulate_plan(without, options, "test").step_time_s);
  // Interleaved (vpp 2): the depth sits in the last virtual chunk, one MoE layer beside the
  // chunk's one, which makes it the heaviest chunk; the closed form stays a bound.
  planner::Plan interleaved =
      preset_plan("tiny-moe", "dgx-h100", 2, 2, 2, 2, 8, planner::ScheduleKind::kInterleaved);
  interleaved.model.mtp_num_layers = 1;
  check_replay_at_most_bound(interleaved, 0.15);
}

TEST_CASE("agreement: with communication, simulated within 10% of analytic on presets") {
  // The bound; the README explains the remaining differences (overlap, contention).
  using planner::ScheduleKind;
  const planner::Plan plans[] = {
      preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 1, 64, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 64, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 2, 64, ScheduleKind::kInterleaved),
      preset_plan("llama3-70b", "dgx-h100", 8, 4, 8, 1, 128, ScheduleKind::kOneFOneB),
      preset_plan("llama2-7b", "dgx-a100-80gb", 2, 1, 32, 1, 256, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 64, ScheduleKind::kZbH1),
      zero3_plan("llama2-7b", "dgx-a100-80gb", 2, 1, 32, 1, 256, ScheduleKind::kOneFOneB),
  };
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    for (bool all_ranks : {false, true}) {
      CAPTURE(all_ranks);
      SimulationOptions options;
      options.all_ranks = all_ranks;
      const SimulationResult result = simulate_plan(plan, options, "test");
      CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.10);
    }
  }
}

TEST_CASE("agreement: overlapped interleaved sends (overlap_p2p_comm) within 10% of analytic") {
  // With overlap_p2p_comm the replay posts every Megatron send as a buffered isend and waits
  // for its receive only where the op list needs it, which is what the option does in the
  // steady state; the planner charges the warm-up, cool-down, fill and drain transfers
  // (overlapped_transfer_seconds). Without it each receive is late (late_receives): the
  // transfer starts when the receiver gets there, which can only delay the step.
  // Across nodes (pp 8 over 32 nodes at tp 8) and within one (pp 4, tp 1, 4 GPUs a replica).
  using planner::ScheduleKind;
  planner::Plan plans[] = {
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 2, 64, ScheduleKind::kInterleaved),
      preset_plan("llama3-8b", "dgx-h100", 1, 4, 2, 2, 64, ScheduleKind::kInterleaved),
  };
  for (planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    const SimulationResult exposed = simulate_plan(plan, SimulationOptions{}, "test");
    plan.options.overlap_p2p_comm = true;
    const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "test");
    CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.10);
    CHECK(relative(exposed.step_time_s, exposed.analytic_step_time_s) < 0.10);
    CHECK(result.analytic_step_time_s < exposed.analytic_step_time_s);
    CHECK(result.step_time_s < exposed.step_time_s);
  }
}

}  // namespace meshplan::simulator

namespace meshplan::simulator {

TEST_CASE("agreement: ZeRO-3, the planner's best GPT-3 175B plan on 1,024 A100s") {
  // meshplan plan --model gpt3-175b --cluster dgx-a100-80gb --gpus 1024 --global-batch 1536
  // ranks tp 4, pp 1, dp 256, micro-batch 3, ZeRO-3 first; the replay gathers and reduces
  // layer by layer, the planner hides a micro-batch's gathers behind its compute.
  planner::Plan plan = zero3_plan("gpt3-175b", "dgx-a100-80gb", 4, 1, 256, 1, 1536,
                                  planner::ScheduleKind::kOneFOneB);
  plan.layout.micro_batch = 3;
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "test");
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.10);  // the bound
}

TEST_CASE("agreement: FSDP ZeRO-3 with its root unit, Llama-3 8B on 64 A100s") {
  // The torchtitan A100 benchmark's data-parallel layout (validation/public_runs.json): dp 64,
  // micro-batch 1, here 2 micro-batches per replica, its wrapping stated as the run states it
  // (fsdp_head_in_root): the untied embedding and LM head (1.05e9 parameters) are the root
  // unit, gathered first and reduced last in the replay as in the planner's closed form.
  planner::Plan plan =
      zero3_plan("llama3-8b", "dgx-a100-80gb", 1, 1, 64, 1, 128, planner::ScheduleKind::kOneFOneB);
  plan.options.framework = planner::Framework::kFsdp;
  plan.options.fsdp_head_in_root = true;
  plan.layout.recompute = planner::Recompute::kFull;
  check_agrees(plan, 0.10);
}

TEST_CASE(
    "agreement: FSDP hybrid sharding, each reduce-scatter followed by its replica all-reduce") {
  // GPT-3 175B on 1,536 A100s under fsdp, tp 1, pp 1, dp 1,536 as 4 replicas of a 384-rank shard
  // group (plan --framework fsdp --tp 1 --pp 1 ranks it first): the replay gathers and reduces
  // layer by layer over the shard group, each reduction's time its reduce-scatter plus the
  // all-reduce of its shard over the replicas (DpBucket::replicate_seconds), as the planner's.
  planner::Plan plan = zero3_plan("gpt3-175b", "dgx-a100-80gb", 1, 1, 1536, 1, 1536,
                                  planner::ScheduleKind::kOneFOneB);
  plan.options.framework = planner::Framework::kFsdp;
  plan.layout.recompute = planner::Recompute::kFull;
  planner::set_dp_shard(plan.layout, 384);
  check_agrees(plan, 0.02);
}

TEST_CASE("agreement: DeepSpeed ZeRO-3, gradients in one reduce bucket, exposed as a whole") {
  // GPT-2 124M on 16 A100s, dp 16, one micro-batch of 2 per replica: the stage's 124M
  // gradients fit one reduce_bucket_size (5e8) bucket, which DeepSpeed reduce-scatters after
  // the backward (stage3.py independent_gradient_partition_epilogue), beside no compute. The
  // replay releases the bucket at the op's end; the planner exposes the last bucket, not a
  // module's share of the reduction (it did before, 15.6% under the replay).
  planner::Plan plan =
      zero3_plan("gpt2-124m", "dgx-a100-80gb", 1, 1, 16, 1, 32, planner::ScheduleKind::kOneFOneB);
  plan.options.framework = planner::Framework::kDeepSpeed;
  plan.layout.micro_batch = 2;
  const planner::PlanEstimate estimate =
      planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
  const SimulationResult result = simulate_plan(plan, SimulationOptions{}, "test");
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 1e-3);
  // The one bucket: 124,439,808 gradients padded to whole blocks of 16, 2 bytes each.
  const int64_t bucket_bytes = (124'439'808 + 15) / 16 * 16 * 2;
  const double bucket_seconds =
      planner::collective_seconds(plan.cluster, planner::CollectiveKind::kReduceScatter,
                                  bucket_bytes, /*group_size=*/16, /*stride=*/1);
  CHECK(estimate.breakdown.dp_comm_exposed_seconds > bucket_seconds);
  // Two micro-batches of 1: the second forward's gathers wait for the first backward's
  // reduce-scatter (sharded_pass_boundaries), as the planner charges each micro-batch's first
  // gather and last bucket (without the boundary the replay was 15% faster here).
  plan.layout.micro_batch = 1;
  const SimulationResult two = simulate_plan(plan, SimulationOptions{}, "test");
  CHECK(relative(two.step_time_s, two.analytic_step_time_s) < 0.01);
}

TEST_CASE("agreement: DeepSpeed ZeRO-3 with tp, gathered module by module, layer by layer") {
  // Llama-3 70B on 1,024 H100s, tp 8, dp 128, micro-batch 2, sequence parallel, no recompute
  // (one of `plan --framework deepspeed`'s five best). Each layer's four module gathers (8.4 ms)
  // take longer than its forward compute (8.2 ms) but not than its compute and tp
  // communication (11.0 ms). The replay was +2.87%: it issued the gathers module-major (all 80
  // layers' query_key_value first), not layer by layer (planner::calls_in_order), and ran an
  // op's tp communication after all its layers' compute, not after each (+0.79% with the
  // first fixed alone).
  planner::Plan plan =
      zero3_plan("llama3-70b", "dgx-h100", 8, 1, 128, 1, 1024, planner::ScheduleKind::kOneFOneB);
  plan.options.framework = planner::Framework::kDeepSpeed;
  plan.layout.micro_batch = 2;
  plan.layout.recompute = planner::Recompute::kNone;
  SimulationOptions options;  // DeepSpeed's reduce_bucket_size, as `simulate` takes the plan's
  options.bucket_bytes = planner::dp_bucket_bytes(plan.cluster, plan.layout, plan.options);
  CHECK(options.bucket_bytes == 1'000'000'000);
  const SimulationResult result = simulate_plan(plan, options, "test");
  MESSAGE("simulated " << result.step_time_s << " s, analytic " << result.analytic_step_time_s);
  CHECK(relative(result.step_time_s, result.analytic_step_time_s) < 0.005);
}

TEST_CASE("agreement: PyTorch pipelining receives late, every transfer waited for") {
  // GPT-3 175B on 1,024 A100s under fsdp, tp 8, pp 8, dp 16, interleaved vpp 12, ZeRO 0 (one of
  // `plan --framework fsdp`'s five best): torch's schedules post each receive just before
  // waiting for it, so a transfer moves once its receiver is there, as the planner's
  // (m v + p - 1) exposed activation and gradient transfers have it (exposed_transfer_seconds).
  // With the data moving as soon as it was sent the replay was 3.70% faster.
  planner::Plan plan = preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 16, 12, 1536,
                                   planner::ScheduleKind::kInterleaved);
  plan.options.framework = planner::Framework::kFsdp;
  plan.layout.zero = 0;
  check_agrees(plan, 0.01);
}

TEST_CASE("agreement: Megatron's interleaved schedule without overlap_p2p_comm receives late") {
  // GPT-3 175B on 1,024 A100s, tp 4, pp 8, dp 32, vpp 12, ZeRO 1, --overlap-p2p-comm off (one of
  // `plan --overlap-p2p-comm off`'s five best): every receive is part of a call waited for at
  // once, none posted ahead, so the data moves when the receiver gets there (late_receives).
  // With the data moving as soon as it was sent the replay was 3.49% faster (16.51 s against
  // 17.11 s); now +0.22%.
  planner::Plan plan = preset_plan("gpt3-175b", "dgx-a100-80gb", 4, 8, 32, 12, 1536,
                                   planner::ScheduleKind::kInterleaved);
  plan.options.overlap_p2p_comm = false;
  check_agrees(plan, 0.01);
}

TEST_CASE("agreement: Megatron-FSDP ZeRO-2 with pp > 1 waits for each chunk's reduce-scatter") {
  // GPT-3 175B on 1,024 A100, tp 4, pp 4, dp 64, interleaved vpp 24 (one layer a chunk), mb 2:
  // each chunk's backward ends by waiting for its layer's reduce-scatter (megatron_fsdp.py
  // _root_post_backward, one root per chunk), in the replay as in the planner (the run past the
  // backward, m x vpp times). meshplan's executor lets the next op run beside it.
  planner::Plan plan = preset_plan("gpt3-175b", "dgx-a100-80gb", 4, 4, 64, 24, 1536,
                                   planner::ScheduleKind::kInterleaved);
  plan.layout.zero = 2;
  plan.layout.micro_batch = 2;
  const SimulationResult waits = simulate_plan(plan, SimulationOptions{}, "test");
  CHECK(relative(waits.step_time_s, waits.analytic_step_time_s) < 0.10);  // the bound
  plan.options.framework = planner::Framework::kMeshplan;
  const SimulationResult beside = simulate_plan(plan, SimulationOptions{}, "test");
  CHECK(relative(beside.step_time_s, beside.analytic_step_time_s) < 0.10);
  // The waits cost at least one layer's reduce-scatter per chunk op, m x vpp = 12 x 24 of them
  // (tp 4: 453e6 parameters a layer; a bf16 reduce-scatter over the 64-rank dp group, its
  // ranks tp = 4 apart, two per node).
  const int64_t layer_parameters = 12 * int64_t{12288} * 12288 / 4;
  const double layer_seconds = planner::collective_seconds(
      plan.cluster, planner::CollectiveKind::kReduceScatter, layer_parameters * 2,
      /*group_size=*/64, /*stride=*/4);
  MESSAGE("waits " << waits.step_time_s << " s, beside " << beside.step_time_s << " s, layer "
                   << layer_seconds << " s");
  CHECK(waits.step_time_s - beside.step_time_s > 0.8 * 12 * 24 * layer_seconds);
}

TEST_CASE("agreement: Megatron-FSDP ZeRO-3 with pp > 1, each chunk op a pass of its own") {
  // GPT-3 175B on 1,024 A100, tp 8, pp 2, dp 64, interleaved vpp 24 (two layers a chunk),
  // mb 6, ZeRO 3: every chunk op's forward gathers after the op before it and its backward
  // waits for its reduce-scatters. The planner charged one first gather and one last
  // reduce-scatter a micro-batch until 2026-11-24 (the replay was 26% slower); it now charges
  // them per chunk op.
  planner::Plan plan = zero3_plan("gpt3-175b", "dgx-a100-80gb", 8, 2, 64, 24, 1536,
                                  planner::ScheduleKind::kInterleaved);
  plan.layout.micro_batch = 6;
  check_agrees(plan, 0.05);
}

TEST_CASE("agreement: FSDP under pipelining, gathered once per chunk a step") {
  // Llama-3 8B on 64 H100 under framework fsdp, tp 1, pp 4, dp 16, interleaved vpp 2, batch
  // 256 (m = 16): torchtitan's pipelining gathers each chunk in its first forward and
  // reduce-scatters it after its last backward (zero3_gathers_once_per_step), in the replay as
  // in the planner's closed form.
  planner::Plan plan =
      zero3_plan("llama3-8b", "dgx-h100", 1, 4, 16, 2, 256, planner::ScheduleKind::kInterleaved);
  plan.options.framework = planner::Framework::kFsdp;
  check_agrees(plan, 0.05);
}

TEST_CASE("agreement: Megatron interleaved ZeRO-1, buckets reduced through the cool-down") {
  // GPT-3 175B on 1,024 A100, tp 4, pp 8, dp 32, vpp 12, mb 1, the distributed optimizer: each
  // chunk's bucket is reduce-scattered as its last backward ends, 8 backward ops a chunk apart
  // in the cool-down, and the replay hides all but the last ones behind the drain. The planner
  // hid them behind one micro-batch's backward until 2026-11-24 (replay -4.6%); it now places
  // them in the cool-down as the replay does (estimate.cpp drain_reduce_tail_seconds).
  planner::Plan plan = preset_plan("gpt3-175b", "dgx-a100-80gb", 4, 8, 32, 12, 1536,
                                   planner::ScheduleKind::kInterleaved);
  plan.layout.zero = 1;
  plan.options.overlap_p2p_comm = true;  // `plan`'s default under megatron
  check_agrees(plan, 0.02);
}

TEST_CASE("agreement: Megatron-FSDP ZeRO-3 with pp > 1, each backward gathers beside no compute") {
  // Llama 3 405B at 128K on 16,384 H100: tp 8, cp 32, pp 2, dp 32, interleaved vpp 63 (one
  // layer a chunk), mb 2, ZeRO 3, m = 2. Every chunk op is a pass of one unit: its forward's
  // gather, its backward's gather (the forward released the unit and no other root prefetches
  // it) and its backward's reduce-scatter run beside no compute. The planner left the
  // backward's gather out until 2026-11-24 (replay +15.6%), then charged it (-1.1%).
  planner::Plan plan =
      zero3_plan("llama3-405b", "dgx-h100", 8, 2, 32, 63, 128, planner::ScheduleKind::kInterleaved);
  plan.model.seq_length = 131072;
  plan.layout.cp = 32;
  plan.layout.micro_batch = 2;
  plan.num_gpus = plan.layout.num_gpus();
  REQUIRE(plan.num_gpus == 16384);
  check_agrees(plan, 0.05);
}

TEST_CASE("agreement: meshplan's ZeRO-2 stream behind a run of interleaved backwards") {
  // Llama 3 405B on 16,384 H100 under --framework meshplan: tp 8, pp 16, dp 128, interleaved
  // vpp 8 on 7/8x14/7, mb 1, ZeRO 2 (m = 16). Every stage runs its forwards first and its 128
  // backwards after, 112 of them one backward apart, and each backward's 26 MB reduce-scatters
  // (40 ms) outlast it (29 ms): the stream ends 1.4 s after the last backward. Until
  // 2026-11-24 the planner hid each micro-batch's reduce-scatters behind the next forward and
  // backward (replay +16%; -1.5% with the queue, +0.7% once the parameter all-gather also
  // hides behind the warm-up's forwards).
  planner::Plan plan = preset_plan("llama3-405b", "dgx-h100", 8, 16, 128, 8, 2048,
                                   planner::ScheduleKind::kInterleaved);
  plan.layout.zero = 2;
  plan.layout.stage_layers = {7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7};
  plan.options.framework = planner::Framework::kMeshplan;
  check_agrees(plan, 0.03);
}

TEST_CASE(
    "agreement: an interleaved stage needs each chunk's gathered parameters at its first "
    "forward") {
  // Llama 3 70B on 1,024 H100 under --framework meshplan: tp 4, pp 2, dp 128, interleaved vpp
  // 10, mb 1, ZeRO 2 (m = 8). The step's parameter all-gather (0.65 s in 25 MiB buckets) runs
  // from the step's start; chunk c's buckets are needed as its first forward starts, after
  // c N forward ops of the warm-up. Until 2026-11-24 the planner let it hide behind one
  // micro-batch's forward only (0.35 s over the 10 chunks), exposing 0.30 s the replay does
  // not (-3.9%).
  planner::Plan plan = preset_plan("llama3-70b", "dgx-h100", 4, 2, 128, 10, 1024,
                                   planner::ScheduleKind::kInterleaved);
  plan.layout.zero = 2;
  plan.options.framework = planner::Framework::kMeshplan;
  check_agrees(plan, 0.02);
}

TEST_CASE("agreement: one rank per stage equals every rank on symmetric plans") {
  // The ranks of a stage run identical op lists with identical durations, and a
  // representative's NIC weight (ranks of its stage on its node) puts the same load on each
  // NIC as the expanded ranks do, so both modes give the same step time to the bit.
  using planner::ScheduleKind;
  planner::Plan tp_pp_dp =
      preset_plan("llama2-7b", "dgx-a100-80gb", 2, 4, 8, 1, 64, ScheduleKind::kOneFOneB);
  tp_pp_dp.layout.placement = planner::Placement::kTpPpDp;
  const planner::Plan plans[] = {
      preset_plan("llama3-70b", "dgx-h100", 8, 4, 8, 1, 128, ScheduleKind::kOneFOneB),
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 2, 64, ScheduleKind::kInterleaved),
      preset_plan("llama2-7b", "dgx-a100-80gb", 2, 4, 8, 1, 64, ScheduleKind::kZbH1),
      tp_pp_dp,
  };
  for (const planner::Plan& plan : plans) {
    CAPTURE(planner::describe(plan.layout));
    SimulationOptions options;
    const SimulationResult representative = simulate_plan(plan, options, "test");
    options.all_ranks = true;
    const SimulationResult every = simulate_plan(plan, options, "test");
    CHECK(every.ranks.size() == static_cast<size_t>(plan.layout.num_gpus()));
    CHECK(every.step_time_s == representative.step_time_s);
  }
}

TEST_CASE("agreement: distributed saved activations, a tp all-gather before each recompute") {
  // GPT-3 175B on 256 A100s, tp 8, pp 8, dp 4, 1F1B, full recompute without sequence
  // parallelism (Megatron-LM --distribute-saved-activations): the replay takes each chunk's
  // exposed tp time, the all-gathers included, from the planner's chunk costs (measured
  // 2026-11-24: 19.150 s simulated, 19.324 s analytic, -0.90%).
  planner::Plan plan =
      preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 4, 1, 256, planner::ScheduleKind::kOneFOneB);
  plan.layout.sequence_parallel = false;
  plan.layout.recompute = planner::Recompute::kFull;
  plan.options.distribute_saved_activations = true;
  check_agrees(plan, 0.02);
}

TEST_CASE("agreement: Megatron's block method, 2 of each stage's 12 layers recomputed") {
  // GPT-3 175B on 1,024 A100s, tp 8, pp 8, dp 16, micro-batch 1, 1F1B, sequence parallelism,
  // --recompute-layers 2: the replay takes each chunk's costs, the partial recompute included,
  // from the planner (measured 2026-11-24: 26.665 s simulated, 26.696 s analytic, -0.12%).
  planner::Plan plan = preset_plan("gpt3-175b", "dgx-a100-80gb", 8, 8, 16, 1, 2048,
                                   planner::ScheduleKind::kOneFOneB);
  plan.layout.recompute = planner::Recompute::kFull;
  plan.layout.recompute_layers = 2;
  check_agrees(plan, 0.01);
}

}  // namespace meshplan::simulator
