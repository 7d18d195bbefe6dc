#pragma once
// Values both sweep outputs (table/JSON and HTML) read from a point. Private to reports/.

#include <string>

#include "meshplan/sweep.h"

namespace meshplan::reports {

/// Memory of the chosen plan's fullest pipeline stage (the one that sets its peak).
const planner::MemoryBreakdown& peak_stage_memory(const planner::PlanEstimate& estimate);

/// A point's cost in whole USD, or "-" when its cluster has no price.
std::string cost_text(const planner::SweepPoint& point);

/// "dgx-h100 x 512": a point's name in footers and chart labels.
std::string point_name(const planner::SweepRequest& request, const planner::SweepPoint& point);

inline constexpr double kSecondsPerDay = 86400.0;

}  // namespace meshplan::reports
