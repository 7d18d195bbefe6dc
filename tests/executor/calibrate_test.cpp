// calibrate's fit: measurements generated from known parameters by the closed forms (not by the
// planner's functions) must come back as those parameters; busbw factors as nccl-tests states.
#include "meshplan/calibrate.h"

#include <doctest/doctest.h>

namespace meshplan::executor {
namespace {

// local-cpu's peak: 5e10 FLOP/s per rank (models/presets/clusters/local-cpu.json).
constexpr double kPeak = 5e10;

Measurements synthetic(double efficiency, double half_dim, double latency_seconds,
                       double bus_bytes_per_second) {
  Measurements m;
  m.num_ranks = 4;
  for (int64_t d : {16, 32, 64, 128, 256, 512}) {
    // 2 d^3 FLOPs at peak e / (1 + x_half (1/k + 0.2 (1/m + 1/n))) = e d / (d + 1.4 x_half)
    // for a d-cube (planner/compute_cost.cpp, w = 0.2).
    const double flops = 2.0 * static_cast<double>(d * d * d);
    m.gemm.push_back({d, d, d, flops / (kPeak * efficiency * d / (d + 1.4 * half_dim))});
  }
  m.triad = {1 << 20, 12.0 * (1 << 20) / 4e9};  // 4e9 B/s per rank
  const double n = 4;
  for (int64_t size = 1024; size <= (16 << 20); size *= 4) {
    const double bytes = static_cast<double>(size);
    // Ring (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n-1) steps and 2(n-1)/n of the bytes,
    // all-gather and reduce-scatter (n-1) and (n-1)/n, send/recv 1 and 1.
    m.collectives.push_back(
        {CalibrationCollective::kAllReduce, size, size / 4,
         2 * (n - 1) * latency_seconds + 2 * (n - 1) / n * bytes / bus_bytes_per_second});
    m.collectives.push_back(
        {CalibrationCollective::kAllGather, size, size / 4,
         (n - 1) * latency_seconds + (n - 1) / n * bytes / bus_bytes_per_second});
    m.collectives.push_back(
        {CalibrationCollective::kReduceScatter, size, size / 4,
         (n - 1) * latency_seconds + (n - 1) / n * bytes / bus_bytes_per_second});
    m.collectives.push_back({CalibrationCollective::kSendRecv, size, size / 4,
                             latency_seconds + bytes / bus_bytes_per_second});
    m.collectives.push_back({CalibrationCollective::kAllToAll, size, size / 4, 1.0});  // not fitted
  }
  return m;
}

TEST_CASE("calibrate's fit recovers the parameters the measurements were made with") {
  const models::ClusterConfig base = models::load_cluster("local-cpu");
  // e 0.6, x_half 40, 3 us per step, 2e9 B/s bus bandwidth = 0.4 of local-cpu's 5e9.
  const CalibrationFit fit = fit_cluster(base, "local-cpu", synthetic(0.6, 40, 3e-6, 2e9));
  const models::ComputeEfficiency& e = fit.cluster.efficiency;
  // Exact data, so only rounding separates the fit from the truth.
  CHECK(e.gemm_peak_efficiency == doctest::Approx(0.6).epsilon(1e-9).scale(0));
  CHECK(e.gemm_half_efficiency_dim == doctest::Approx(40).epsilon(1e-9).scale(0));
  CHECK(fit.cluster.gpu.peak_fp32_flops_per_second == kPeak);
  CHECK(e.hbm_efficiency ==
        doctest::Approx(0.4).epsilon(1e-12).scale(0));  // 4e9 of local-cpu's 1e10
  CHECK(fit.cluster.intra_node_latency_seconds == doctest::Approx(3e-6).epsilon(1e-6).scale(0));
  CHECK(e.collective_efficiency == doctest::Approx(0.4).epsilon(1e-9).scale(0));
  CHECK(fit.gemm_rms_error_pct < 1e-6);
  CHECK(fit.collective_rms_error_pct < 1e-6);
  CHECK(fit.num_collective_points == 32);  // 8 sizes (1 KiB..16 MiB, x4) x 4 kinds, no all-to-all
  CHECK(e.attention_efficiency == base.efficiency.attention_efficiency);  // kept
}

TEST_CASE("calibrate raises a peak the machine exceeds instead of an efficiency above 1") {
  const models::ClusterConfig base = models::load_cluster("local-cpu");
  const CalibrationFit fit = fit_cluster(base, "local-cpu", synthetic(1.5, 40, 3e-6, 2e10));
  CHECK(fit.cluster.efficiency.gemm_peak_efficiency == 1);
  CHECK(fit.cluster.gpu.peak_fp32_flops_per_second == doctest::Approx(1.5 * kPeak).scale(0));
  CHECK(fit.cluster.efficiency.collective_efficiency == 1);
  CHECK(fit.cluster.intra_node_bytes_per_second == doctest::Approx(2e10).epsilon(1e-9).scale(0));
}

TEST_CASE("calibrate refuses a bf16 (GPU) base") {
  CHECK_THROWS_WITH_AS(
      fit_cluster(models::load_cluster("dgx-h100"), "dgx-h100", synthetic(0.6, 40, 3e-6, 2e9)),
      "dgx-h100: precision: calibrate measures this machine's CPU ranks in fp32; base it on a CPU "
      "cluster such as local-cpu (bf16)",
      InputError);
}

TEST_CASE("busbw factors: nccl-tests doc/PERFORMANCE.md") {
  CHECK(bus_bandwidth_factor(CalibrationCollective::kAllReduce, 4) == 1.5);  // 2 x 3 / 4
  CHECK(bus_bandwidth_factor(CalibrationCollective::kAllGather, 4) == 0.75);
  CHECK(bus_bandwidth_factor(CalibrationCollective::kReduceScatter, 4) == 0.75);
  CHECK(bus_bandwidth_factor(CalibrationCollective::kAllToAll, 8) == 0.875);
  CHECK(bus_bandwidth_factor(CalibrationCollective::kSendRecv, 8) == 1.0);
}

}  // namespace
}  // namespace meshplan::executor
