#include "tensor_parallel.h"

#include <algorithm>

namespace meshplan::executor {

const float* gather_sequence(const RankContext& ctx, const float* local, Tensor* scratch, int C) {
  const ShardDims& d = ctx.dims;
  if (!d.sequence_parallel) {
    return local;
  }
  *scratch = ctx.tensor(static_cast<int64_t>(d.N) * C);
  ctx.groups.all_gather(CommGroup::kTp, scratch->data(), local,
                        static_cast<int64_t>(d.N_local) * C);
  return scratch->data();
}

Tensor reduce_partial_sums(const RankContext& ctx, Tensor partial, int C) {
  const ShardDims& d = ctx.dims;
  if (d.tp == 1) {
    return partial;
  }
  if (!d.sequence_parallel) {
    ctx.groups.all_reduce_sum(CommGroup::kTp, partial.data(), partial.size());
    return partial;
  }
  Tensor local = ctx.tensor(static_cast<int64_t>(d.N_local) * C);
  ctx.groups.reduce_scatter(CommGroup::kTp, local.data(), partial.data(),
                            static_cast<int64_t>(d.N_local) * C);
  return local;
}

Tensor copy_rows(const RankContext& ctx, const float* src, int rows, int C) {
  Tensor copy = ctx.tensor(static_cast<int64_t>(rows) * C);
  std::copy(src, src + copy.size(), copy.data());
  return copy;
}

}  // namespace meshplan::executor
