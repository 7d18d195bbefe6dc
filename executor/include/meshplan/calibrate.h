#pragma once
// meshplan calibrate: measures the machine the executor runs on (GEMM throughput of Eigen, a
// STREAM-like triad, MPI collectives over message sizes) and fits the cluster description's
// efficiency parameters to the measurements through the planner's own cost functions
// (planner::gemm_seconds, planner::collective_seconds), so `plan --cluster PROFILE.json` costs
// with what this machine does. CPU ranks (Eigen + MPI) only; no GPU path is built.

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshplan/models.h"

namespace meshplan::executor {

struct CalibrationOptions {
  bool quick = false;                          // smaller grid and sizes, for tests
  int64_t max_message_bytes = 16 * (1 << 20);  // largest collective message (nccl-tests size)
};

struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;  // one product, mean over the repetitions, slowest rank
  double flops_per_second() const { return 2.0 * static_cast<double>(m * n * k) / seconds; }
};

/// STREAM's triad a = b + s c over three arrays of `elements` fp32 values (McCalpin, STREAM
/// benchmark: counts 3 x 4 bytes per element, write-allocate traffic not counted).
struct TriadSample {
  int64_t elements = 0;
  double seconds = 0;  // mean of 5 repetitions, slowest rank, all ranks at once
  double bytes_per_second() const { return 12.0 * static_cast<double>(elements) / seconds; }
};

enum class CalibrationCollective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
std::string to_string(CalibrationCollective kind);

/// nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for
/// all-gather, reduce-scatter and all-to-all, 1 for send/recv.
double bus_bandwidth_factor(CalibrationCollective kind, int64_t num_ranks);

/// One collective at one size. size_bytes is nccl-tests' size: the all-reduce buffer, the
/// gathered output, the reduce-scatter input, a rank's whole all-to-all buffer, the payload sent.
struct CollectiveSample {
  CalibrationCollective kind = CalibrationCollective::kAllReduce;
  int64_t size_bytes = 0;
  int64_t count = 0;      // fp32 elements of that buffer
  double seconds = 0;     // mean per call, slowest rank
  int64_t num_wrong = 0;  // output elements that differ from the exact expected values
  double algbw_bytes_per_second() const { return static_cast<double>(size_bytes) / seconds; }
};

struct Measurements {
  int64_t num_ranks = 1;
  std::vector<GemmSample> gemm;
  TriadSample triad;
  std::vector<CollectiveSample> collectives;
};

/// Collective over `world`: every rank measures at once; the result (slowest rank) on every
/// rank. Throws RuntimeError naming the rank for MPI failures.
Measurements measure_machine(const CalibrationOptions& options, MPI_Comm world);

/// Fitted profile and how well the planner's formulas reproduce the measurements.
struct CalibrationFit {
  models::ClusterConfig cluster;
  double gemm_rms_error_pct = 0;        // planner::gemm_seconds against each GemmSample
  double collective_rms_error_pct = 0;  // planner::collective_seconds against each sample fitted
  int64_t num_collective_points = 0;    // all-reduce, all-gather, reduce-scatter, send/recv
  std::vector<std::string> notes;       // what was kept from the base, what was raised
};

/// Fits `base` (a CPU cluster: precision fp32) to the measurements: gemm_peak_efficiency and
/// gemm_half_efficiency_dim by least squares of peak / achieved = 1/e + (x_half/e) u, u =
/// planner::gemm_inverse_size(m, n, k);
/// hbm_efficiency from the triad; collective_efficiency and the intra-node latency by weighted
/// least squares of the ring time. A fitted efficiency above 1 raises the base's peak (FLOP/s,
/// B/s) instead, efficiency 1. attention_efficiency and the inter-node figures are kept (not
/// measurable here). Throws InputError "<base_source>: precision: ..." for a bf16 base and
/// RuntimeError when a fit is degenerate.
CalibrationFit fit_cluster(const models::ClusterConfig& base, const std::string& base_source,
                           const Measurements& measurements);

}  // namespace meshplan::executor
