#pragma once
// Where gradient and parameter buckets meet the compute timeline.
//
// Gradients come out of the last micro-batch's backward in reverse layer order; we take them
// to come out at a uniform rate in bytes over the compute time of those backward ops (the
// "carriers"): bucket k is complete once the fraction (bytes of buckets 0..k) / (all bytes) of
// that time has run (PyTorch DDP, Li et al. 2020, Sec. 3.2.3: a bucket's all-reduce starts when
// its last gradient is ready). Parameter buckets are needed symmetrically by the first
// micro-batch's forward (Megatron-LM --overlap-param-gather): bucket k before the fraction
// (bytes of buckets 0..k-1) / (all bytes) of the first forwards' compute time has run.

#include <cstdint>
#include <vector>

namespace meshplan::simulator {

struct Piece {
  double seconds = 0;
  std::vector<int32_t> buckets;  // ready at the piece's end (gradients) or needed at its start
};

enum class BucketEdge { kReadyAtEnd, kNeededAtStart };

/// Cuts each carrier (durations in timeline order) at the bucket boundaries. Returns, per
/// carrier, its pieces; their seconds add up to the carrier's (up to rounding). Every bucket
/// is attached to exactly one piece. Precondition: bucket_bytes all positive, carriers
/// non-empty.
std::vector<std::vector<Piece>> split_carriers(const std::vector<double>& carrier_seconds,
                                               const std::vector<int64_t>& bucket_bytes,
                                               BucketEdge edge);

}  // namespace meshplan::simulator

namespace meshplan::simulator {

struct OpPiece {
  double seconds = 0;
  std::vector<int32_t> needs;  // buckets needed before the piece starts
  std::vector<int32_t> ready;  // buckets complete when it ends
};

/// One op cut for ZeRO-3: bucket k of `need_bytes` is needed once the fraction (bytes of
/// buckets 0..k-1) / (all) of the op has run, bucket k of `ready_bytes` is complete once
/// (bytes of 0..k) / (all) has run (uniform rates, as split_carriers). Either list may be
/// empty. Pieces are cut at every such point inside the op.
std::vector<OpPiece> split_op(double seconds, const std::vector<int64_t>& need_bytes,
                              const std::vector<int64_t>& ready_bytes);

}  // namespace meshplan::simulator
