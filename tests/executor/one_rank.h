#pragma once
// One executor rank on MPI_COMM_SELF for layer-level tests: a plan of `model` at tp = pp = dp = 1
// (micro-batch 2, global batch 4), its shard dimensions, process groups and memory tracker.

#include <mpi.h>

#include "memory_tracker.h"
#include "process_groups.h"
#include "shard_dims.h"
#include "tensor_parallel.h"
#include "tiny_plan.h"

namespace meshplan::executor::testing {

struct OneRank {
  explicit OneRank(const models::TransformerConfig& model)
      : plan(make_plan(model, make_layout(1, 1, 1, /*micro_batch=*/2, 4))),
        dims(make_shard_dims(plan, 0)),
        groups(plan.layout, false, MPI_COMM_SELF, 60.0) {}

  RankContext context() { return RankContext{dims, groups, memory}; }

  planner::Plan plan;
  ShardDims dims;
  ProcessGroups groups;
  MemoryTracker memory;
};

}  // namespace meshplan::executor::testing
