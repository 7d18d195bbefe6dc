#pragma once
// Executes one stage's op list from the shared schedule generator, in order, for one step:
// forwards, backwards (whole, or B and W for zero-bubble schedules) and the transfers between
// stages. Sends never block (MPI_Isend, completed at the end of the op list); receives block.
// Nothing here decides the order of work: it is the list's.

#include <cstdint>
#include <functional>
#include <vector>

#include "data_source.h"
#include "gradient_sync.h"
#include "meshplan/schedule.h"
#include "model_chunk.h"

namespace meshplan::executor {

struct PipelineStep {
  const planner::PipelineSchedule& schedule;
  const std::vector<ModelChunk>& chunks;  // [vpp]
  const TokenSource& data;
  GradientSync& sync;
  const RankContext& ctx;
  int stage = 0;
  int64_t first_sample = 0;  // global index of this data-parallel rank's first sample this step
  // Around each op that reads `chunk`'s weights (F, B): ZeRO 1 waits for the chunk's parameter
  // gathers before it; ZeRO 3 gathers the chunk's parameters before it and frees them after.
  std::function<void(int chunk)> acquire_weights;
  std::function<void(int chunk)> release_weights;
  bool scatter_gather = false;  // options.scatter_gather_pipeline with tp > 1, no sequence parallel
};

/// Runs the op list of `step.stage`; returns the sum of the token losses of the micro-batches
/// whose last virtual stage is on this rank (0 elsewhere).
double run_pipeline_step(const PipelineStep& step);

/// MPI tag of a transfer to virtual stage `receiver` of micro-batch `micro_batch`: unique within
/// a step. Throws InputError when the largest tag of the schedule exceeds MPI_TAG_UB.
int transfer_tag(int64_t micro_batch, int receiver, bool gradient, int num_virtual_stages);
void check_tag_range(const planner::PipelineSchedule& schedule);

}  // namespace meshplan::executor
