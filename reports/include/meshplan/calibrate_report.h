#pragma once
// meshplan calibrate's tables (nccl-tests layout: names line, units line, '#' before every
// non-data line, fixed-width right-aligned columns, a footer with the average bus bandwidth and
// OK / FAILED) and JSON record, each row and record written by one function.

#include "meshplan/calibrate.h"
#include "meshplan/reports.h"

namespace meshplan::reports {

/// The GEMM, triad and collective tables and the fit's errors; JSON {"format": "meshplan
/// calibrate", "num_ranks", "gemm": [{"m", "n", "k", "time_s", "flops_per_second",
/// "predicted_time_s"}], "triad": {"elements", "time_s", "bytes_per_second"}, "collectives":
/// [{"collective", "size_bytes", "count", "time_s", "algbw_gb_per_s", "busbw_gb_per_s",
/// "wrong"}], "fit": {"gemm_rms_error_pct", "collective_rms_error_pct", "notes"}, "profile"}.
/// GB/s = 1e9 B/s, as nccl-tests prints.
Report calibrate_report(const executor::Measurements& measurements,
                        const executor::CalibrationFit& fit);

/// Whether every collective's output was exact (the footer's OK).
bool calibration_outputs_correct(const executor::Measurements& measurements);

}  // namespace meshplan::reports
