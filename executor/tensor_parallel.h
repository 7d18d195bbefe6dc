#pragma once
// Megatron-LM's tensor-parallel conjugate operators on the residual stream (Shoeybi et al.
// 2019, Sec. 3, Fig. 3: f and g), and their sequence-parallel forms (Korthikanti et al. 2022,
// Sec. 4.2.2, Fig. 5: g becomes a reduce-scatter, g-bar an all-gather along the sequence).
// Rows are sequence-first, so a sequence shard is a contiguous block of rows.
//
// Shape letters: N = T B rows of a micro-batch, N_local = its rows on this rank (N / tp under
// sequence parallelism, else N), C channels.

#include <vector>

#include "memory_tracker.h"
#include "process_groups.h"
#include "shard_dims.h"

namespace meshplan::executor {

/// What the mixture-of-experts layers report over a step (moe_layer.h).
struct MoeStats {
  double aux_loss = 0;                 // load-balancing losses, in loss units (weighted)
  std::vector<int64_t> routed_counts;  // E local token counts per router forward, in call order
};

/// What the layers need to run on this rank: sizes, groups and the allocator.
struct RankContext {
  const ShardDims& dims;
  ProcessGroups& groups;
  MemoryTracker& memory;
  MoeStats* moe = nullptr;  // where the MoE layers report; nullptr: nowhere

  Tensor tensor(int64_t size) const { return Tensor(&memory, size); }
};

/// The full rows (N, C) of a residual-stream tensor (N_local, C): all-gathered into `scratch`
/// under sequence parallelism, else `local` itself (no communication).
const float* gather_sequence(const RankContext& ctx, const float* local, Tensor* scratch, int C);

/// Partial sums (N, C) of a row-parallel (or vocab-parallel) output, reduced over tp to the
/// residual rows (N_local, C): reduce-scatter under sequence parallelism, all-reduce otherwise,
/// nothing with tp = 1.
Tensor reduce_partial_sums(const RankContext& ctx, Tensor partial, int C);

/// Copy of `rows` rows of `src` (.., C), as a new tracked tensor.
Tensor copy_rows(const RankContext& ctx, const float* src, int rows, int C);

}  // namespace meshplan::executor
