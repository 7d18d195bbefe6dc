// meshplan calibrate's report (calibrate_report.h).

#include "meshplan/calibrate_report.h"

#include <fmt/format.h>

#include "meshplan/cost_model.h"

namespace meshplan::reports {

namespace {

using executor::CollectiveSample;
using executor::GemmSample;

void write_gemm(const GemmSample& s, double predicted_seconds, std::string* row,
                nlohmann::json* record) {
  if (row != nullptr) {
    *row += fmt::format("{:>9} {:>8} {:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>9.1f}\n", s.m, s.n, s.k,
                        s.seconds * 1e6, s.flops_per_second() / 1e9, predicted_seconds * 1e6,
                        100 * (predicted_seconds - s.seconds) / s.seconds);
  }
  if (record != nullptr) {
    *record = {{"m", s.m},
               {"n", s.n},
               {"k", s.k},
               {"time_s", s.seconds},
               {"flops_per_second", s.flops_per_second()},
               {"predicted_time_s", predicted_seconds}};
  }
}

void write_collective(const CollectiveSample& s, int64_t num_ranks, std::string* row,
                      nlohmann::json* record) {
  const double algbw = s.algbw_bytes_per_second() / 1e9;
  const double busbw = algbw * executor::bus_bandwidth_factor(s.kind, num_ranks);
  if (row != nullptr) {
    *row += fmt::format("{:>15} {:>12} {:>10} {:>6} {:>10.2f} {:>8.3f} {:>8.3f} {:>7}\n",
                        executor::to_string(s.kind), s.size_bytes, s.count, "float",
                        s.seconds * 1e6, algbw, busbw, s.num_wrong);
  }
  if (record != nullptr) {
    *record = {{"collective", executor::to_string(s.kind)},
               {"size_bytes", s.size_bytes},
               {"count", s.count},
               {"time_s", s.seconds},
               {"algbw_gb_per_s", algbw},
               {"busbw_gb_per_s", busbw},
               {"wrong", s.num_wrong}};
  }
}

}  // namespace

bool calibration_outputs_correct(const executor::Measurements& measurements) {
  for (const CollectiveSample& s : measurements.collectives) {
    if (s.num_wrong != 0) {
      return false;
    }
  }
  return true;
}

Report calibrate_report(const executor::Measurements& m, const executor::CalibrationFit& fit) {
  Report report;
  std::string& t = report.table;
  t += fmt::format("# meshplan calibrate: {} ranks (MPI + Eigen, fp32)\n#\n", m.num_ranks);
  t += "# GEMM out (m, n) = inp (m, k) weight (n, k)^T, the executor's linear_forward, slowest "
       "rank; predicted = planner::gemm_seconds with the fitted profile\n";
  t += fmt::format("#{:>8} {:>8} {:>8} {:>12} {:>12} {:>12} {:>9}\n", "m", "n", "k", "time",
                   "achieved", "predicted", "error");
  t += fmt::format("#{:>8} {:>8} {:>8} {:>12} {:>12} {:>12} {:>9}\n", "", "", "", "(us)",
                   "(GFLOP/s)", "(us)", "(%)");
  nlohmann::json gemm = nlohmann::json::array();
  for (const GemmSample& s : m.gemm) {
    const double predicted = planner::gemm_seconds(
        fit.cluster, static_cast<double>(s.m), static_cast<double>(s.n), static_cast<double>(s.k));
    write_gemm(s, predicted, &t, &gemm.emplace_back());
  }
  t += fmt::format(
      "#\n# triad a = b + s c, 3 x {} fp32 per rank, all ranks at once: {:.3f} GB/s "
      "per rank\n#\n",
      m.triad.elements, m.triad.bytes_per_second() / 1e9);
  t += "# collectives (MPI), nccl-tests columns and busbw factors (doc/PERFORMANCE.md)\n";
  t += fmt::format("#{:>14} {:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "collective", "size",
                   "count", "type", "time", "algbw", "busbw", "#wrong");
  t += fmt::format("#{:>14} {:>12} {:>10} {:>6} {:>10} {:>8} {:>8} {:>7}\n", "", "(B)",
                   "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
  nlohmann::json collectives = nlohmann::json::array();
  double busbw_sum = 0;
  for (const CollectiveSample& s : m.collectives) {
    write_collective(s, m.num_ranks, &t, &collectives.emplace_back());
    busbw_sum += collectives.back()["busbw_gb_per_s"].get<double>();
  }
  const bool correct = calibration_outputs_correct(m);
  t += fmt::format("# Out of bounds values : {} {}\n", correct ? 0 : 1, correct ? "OK" : "FAILED");
  t += fmt::format(
      "# Avg bus bandwidth    : {:.3f} GB/s\n#\n",
      m.collectives.empty() ? 0.0 : busbw_sum / static_cast<double>(m.collectives.size()));
  t += fmt::format(
      "# fit: GEMM rms error {:.1f}% over {} shapes; collectives rms error {:.1f}% "
      "over {} points\n",
      fit.gemm_rms_error_pct, m.gemm.size(), fit.collective_rms_error_pct,
      fit.num_collective_points);
  for (const std::string& note : fit.notes) {
    t += "# note: " + note + "\n";
  }
  report.json = {{"format", "meshplan calibrate"},
                 {"num_ranks", m.num_ranks},
                 {"gemm", gemm},
                 {"triad",
                  {{"elements", m.triad.elements},
                   {"time_s", m.triad.seconds},
                   {"bytes_per_second", m.triad.bytes_per_second()}}},
                 {"collectives", collectives},
                 {"fit",
                  {{"gemm_rms_error_pct", fit.gemm_rms_error_pct},
                   {"collective_rms_error_pct", fit.collective_rms_error_pct},
                   {"notes", fit.notes}}},
                 {"profile", models::cluster_to_json(fit.cluster)}};
  return report;
}

}  // namespace meshplan::reports
