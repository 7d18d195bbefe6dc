#pragma once
// Hand-built simulation inputs for tests: every duration is chosen by the test, the op lists
// come from the planner's schedule generator.

#include "meshplan/schedule.h"
#include "meshplan/simulator.h"

namespace meshplan::simulator::testing {

/// Uniform stages: each chunk takes `forward` and `backward` seconds of compute (for split
/// schedules, `backward` is B and `weight` is W), no communication, no optimizer, dp = 1.
inline SimulationInput uniform_input(planner::ScheduleKind kind, int64_t pp, int64_t vpp,
                                     int64_t num_micro_batches, double forward, double backward,
                                     double weight = 0) {
  SimulationInput input;
  input.layout.pp = pp;
  input.layout.vpp = vpp;
  input.layout.schedule = kind;
  input.layout.global_batch = num_micro_batches;
  input.schedule = planner::generate_schedule(kind, pp, vpp, num_micro_batches);
  input.gpus_per_node = 8;
  for (int64_t s = 0; s < pp; ++s) {
    StageCosts stage;
    for (int64_t c = 0; c < vpp; ++c) {
      planner::ChunkCost chunk;
      chunk.forward_compute_seconds = forward;
      if (kind == planner::ScheduleKind::kZbH1) {
        chunk.backward_input_compute_seconds = backward;
        chunk.backward_weight_compute_seconds = weight;
      } else {
        chunk.backward_input_compute_seconds = backward;
      }
      stage.chunks.push_back(chunk);
    }
    input.stages.push_back(stage);
  }
  return input;
}

}  // namespace meshplan::simulator::testing
