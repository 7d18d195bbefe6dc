#pragma once
// Reports on a simulated step: the table and JSON record, a Chrome trace and a picture of the
// pipeline schedule. Each returns the whole file's text (the caller writes it through an
// OutputSet); the same result gives the same bytes.

#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/simulator.h"

namespace meshplan::reports {

/// A command's terminal table and its --json record, written together from the same values.
struct Report {
  std::string table;
  nlohmann::json json;
};

/// meshplan simulate: per-stage time breakdown and critical path (table: nccl-tests layout;
/// JSON: "format": "meshplan simulation", step_time_s, stages, critical_path).
Report simulation_report(const simulator::SimulationResult& result);

/// Chrome trace event JSON, for Perfetto (ui.perfetto.dev): one process per simulated rank
/// (pid = global rank), one thread per stream that has work, an 'X' slice per task (pieces of
/// one op merged), and a flow arrow ('s' on the sender's transfer, 'f' on the receiver's op that
/// consumes it) for every pipeline transfer. Times in integer nanoseconds ("displayTimeUnit":
/// "ns"); each slice's ts and end are its simulated times rounded to the nanosecond and dur =
/// end - ts, so slices that do not overlap in the simulation do not overlap in the file.
std::string chrome_trace_json(const simulator::SimulationResult& result);

/// SVG of the schedule in the style of the Megatron-LM (Narayanan et al. 2021, Fig. 4) and
/// Zero Bubble (Qi et al. 2023, Fig. 3) figures: one row per pipeline stage (its rank with
/// tp = dp = 0), F / B / W blocks numbered by micro-batch from 1 as in the papers, lighter
/// shades for later model chunks, the optimizer step, and the rank's communication in a thin
/// lane under each row; time on the x axis.
std::string pipeline_svg(const simulator::SimulationResult& result);

}  // namespace meshplan::reports
