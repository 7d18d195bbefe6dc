// meshplan calibrate's fit (calibrate.h): the cluster description's parameters from the
// measurements, through the planner's own cost functions so no formula is restated here.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "meshplan/calibrate.h"
#include "meshplan/cost_model.h"

namespace meshplan::executor {

namespace {

// Least squares of y = a + b x with weights w: returns (a, b).
std::pair<double, double> weighted_line(const std::vector<double>& x, const std::vector<double>& y,
                                        const std::vector<double>& w) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); i++) {
    sw += w[i];
    sx += w[i] * x[i];
    sy += w[i] * y[i];
    sxx += w[i] * x[i] * x[i];
    sxy += w[i] * x[i] * y[i];
  }
  const double det = sw * sxx - sx * sx;
  if (!(std::abs(det) > 0)) {
    throw RuntimeError("calibrate: degenerate fit (all points at one size)");
  }
  return {(sy * sxx - sx * sxy) / det, (sw * sxy - sx * sy) / det};
}

double rms_pct(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double sum = 0;
  for (size_t i = 0; i < predicted.size(); i++) {
    const double error = (predicted[i] - measured[i]) / measured[i];
    sum += error * error;
  }
  return predicted.empty() ? 0 : 100 * std::sqrt(sum / static_cast<double>(predicted.size()));
}

// planner::gemm_seconds: time = 2mnk / (peak e / (1 + x_half u)), u =
// planner::gemm_inverse_size(m, n, k), so peak / achieved = 1/e + (x_half / e) u: a line in u.
void fit_gemm(const Measurements& m, CalibrationFit& fit) {
  models::ClusterConfig& c = fit.cluster;
  std::vector<double> x, y, w;
  for (const GemmSample& s : m.gemm) {
    x.push_back(planner::gemm_inverse_size(static_cast<double>(s.m), static_cast<double>(s.n),
                                           static_cast<double>(s.k)));
    y.push_back(c.gpu.peak_fp32_flops_per_second / s.flops_per_second());
    w.push_back(1.0 / (y.back() * y.back()));  // relative errors
  }
  const auto [a, b] = weighted_line(x, y, w);
  if (!(a > 0)) {
    throw RuntimeError(fmt::format("calibrate: GEMM fit has no asymptote (1/e = {})", a));
  }
  double efficiency = 1.0 / a;
  double half_dim = b / a;
  if (!(half_dim > 0)) {
    fit.notes.push_back(fmt::format(
        "GEMM throughput does not fall for small shapes here (x_half fit {:.3g}); x_half set to 1",
        half_dim));
    half_dim = 1;
  }
  if (efficiency > 1) {
    fit.notes.push_back(fmt::format(
        "GEMM asymptote {:.3g} FLOP/s is above the base's peak {:.3g}: peak raised to it",
        c.gpu.peak_fp32_flops_per_second * efficiency, c.gpu.peak_fp32_flops_per_second));
    c.gpu.peak_fp32_flops_per_second *= efficiency;
    efficiency = 1;
  }
  c.gpu.peak_bf16_flops_per_second = c.gpu.peak_fp32_flops_per_second;  // the CPU computes fp32
  c.efficiency.gemm_peak_efficiency = efficiency;
  c.efficiency.gemm_half_efficiency_dim = half_dim;
  std::vector<double> predicted, measured;
  for (const GemmSample& s : m.gemm) {
    predicted.push_back(planner::gemm_seconds(c, static_cast<double>(s.m), static_cast<double>(s.n),
                                              static_cast<double>(s.k)));
    measured.push_back(s.seconds);
  }
  fit.gemm_rms_error_pct = rms_pct(predicted, measured);
}

void fit_memory(const Measurements& m, CalibrationFit& fit) {
  models::ClusterConfig& c = fit.cluster;
  const double measured = m.triad.bytes_per_second();
  double efficiency = measured / c.gpu.hbm_bytes_per_second;
  if (efficiency > 1) {
    fit.notes.push_back(fmt::format("triad {:.3g} B/s per rank is above the base's {:.3g}: raised",
                                    measured, c.gpu.hbm_bytes_per_second));
    c.gpu.hbm_bytes_per_second = measured;
    efficiency = 1;
  }
  c.efficiency.hbm_efficiency = efficiency;
}

bool planner_models(CalibrationCollective kind, planner::CollectiveKind* planned) {
  switch (kind) {
    case CalibrationCollective::kAllReduce:
      *planned = planner::CollectiveKind::kAllReduce;
      return true;
    case CalibrationCollective::kAllGather:
      *planned = planner::CollectiveKind::kAllGather;
      return true;
    case CalibrationCollective::kReduceScatter:
      *planned = planner::CollectiveKind::kReduceScatter;
      return true;
    case CalibrationCollective::kSendRecv:
      *planned = planner::CollectiveKind::kSendRecv;
      return true;
    case CalibrationCollective::kAllToAll:
      return false;  // the planner issues none
  }
  return false;
}

// The planner's ring time is latency x steps + wire bytes / (bandwidth x efficiency): its two
// basis terms are read from planner::collective_seconds itself (latency 1 s with unlimited
// bandwidth, then no latency at 1 B/s), and (latency, 1 / (bandwidth x efficiency)) fitted by
// least squares of the relative error.
void fit_collectives(const Measurements& m, CalibrationFit& fit) {
  models::ClusterConfig& c = fit.cluster;
  if (m.num_ranks < 2) {
    fit.notes.push_back("one rank: no collective measured, intra-node figures kept");
    return;
  }
  models::ClusterConfig steps_only = c, wire_only = c;
  steps_only.intra_node_latency_seconds = 1;
  steps_only.intra_node_bytes_per_second = 1e30;
  steps_only.efficiency.collective_efficiency = 1;
  wire_only.intra_node_latency_seconds = 0;
  wire_only.intra_node_bytes_per_second = 1;
  wire_only.efficiency.collective_efficiency = 1;
  const int64_t n = std::min<int64_t>(m.num_ranks, c.gpus_per_node);
  // Normal equations of min sum ((L s + u w - t) / t)^2.
  double ss = 0, sw = 0, ww = 0, st = 0, wt = 0;
  std::vector<std::tuple<planner::CollectiveKind, int64_t, double>> points;
  for (const CollectiveSample& s : m.collectives) {
    planner::CollectiveKind kind{};
    if (!planner_models(s.kind, &kind)) {
      continue;
    }
    const double steps = planner::collective_seconds(steps_only, kind, s.size_bytes, n, 1);
    const double wire = planner::collective_seconds(wire_only, kind, s.size_bytes, n, 1);
    const double inv = 1.0 / s.seconds;
    ss += steps * steps * inv * inv;
    sw += steps * wire * inv * inv;
    ww += wire * wire * inv * inv;
    st += steps * inv;
    wt += wire * inv;
    points.emplace_back(kind, s.size_bytes, s.seconds);
  }
  const double det = ss * ww - sw * sw;
  double latency = (st * ww - wt * sw) / det;
  double inverse_bandwidth = (ss * wt - sw * st) / det;
  if (!(latency >= 0)) {
    latency = 0;
    inverse_bandwidth = wt / ww;
    fit.notes.push_back("collective latency fit below 0: latency 0, bandwidth refitted");
  }
  if (!(inverse_bandwidth > 0)) {
    throw RuntimeError("calibrate: collective fit has no bandwidth term");
  }
  const double bandwidth = 1.0 / inverse_bandwidth;
  c.intra_node_latency_seconds = latency;
  double efficiency = bandwidth / c.intra_node_bytes_per_second;
  if (efficiency > 1) {
    fit.notes.push_back(
        fmt::format("collective bandwidth {:.3g} B/s is above the base's intra-node {:.3g}: raised",
                    bandwidth, c.intra_node_bytes_per_second));
    c.intra_node_bytes_per_second = bandwidth;
    efficiency = 1;
  }
  c.efficiency.collective_efficiency = efficiency;
  std::vector<double> predicted, measured;
  for (const auto& [kind, bytes, seconds] : points) {
    predicted.push_back(planner::collective_seconds(c, kind, bytes, n, 1));
    measured.push_back(seconds);
  }
  fit.collective_rms_error_pct = rms_pct(predicted, measured);
  fit.num_collective_points = static_cast<int64_t>(points.size());
}

}  // namespace

CalibrationFit fit_cluster(const models::ClusterConfig& base, const std::string& base_source,
                           const Measurements& measurements) {
  if (base.precision != models::Precision::kFp32) {
    throw InputError(fmt::format(
        "{}: precision: calibrate measures this machine's CPU ranks in fp32; base it on a CPU "
        "cluster such as local-cpu ({})",
        base_source, models::to_string(base.precision)));
  }
  CalibrationFit fit;
  fit.cluster = base;
  fit_gemm(measurements, fit);
  fit_memory(measurements, fit);
  fit_collectives(measurements, fit);
  fit.notes.push_back(
      "kept from the base: attention_efficiency, inter-node bandwidth and latency, memory size");
  models::ClusterConfig& c = fit.cluster;
  c.name = "calibrated-" + base.name;
  c.source = fmt::format(
      "meshplan calibrate on {} ranks, based on {}: GEMM (Eigen, fp32) peak {:.4g} FLOP/s, "
      "e_max {:.4g}, x_half {:.4g} (rms error {:.1f}%); triad {:.4g} B/s per rank; collectives "
      "(MPI) latency {:.3g} s, bus bandwidth {:.4g} B/s (rms error {:.1f}%). {}.",
      measurements.num_ranks, base.name, c.gpu.peak_fp32_flops_per_second,
      c.efficiency.gemm_peak_efficiency, c.efficiency.gemm_half_efficiency_dim,
      fit.gemm_rms_error_pct, measurements.triad.bytes_per_second(), c.intra_node_latency_seconds,
      c.intra_node_bytes_per_second * c.efficiency.collective_efficiency,
      fit.collective_rms_error_pct, fit.notes.back());
  models::validate_cluster(c, "calibrated profile");
  return fit;
}

}  // namespace meshplan::executor
