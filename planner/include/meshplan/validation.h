#pragma once
// Predicting published training runs (shared/validation/README.md defines the format).

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

struct ValidationRun {
  std::string id;
  std::string source;
  PlanEstimate predicted;  // layout has the searched dimensions filled in
  double published_step_time_s = 0;
  std::vector<std::string> searched;  // layout fields the source left null
  double error_pct() const {
    return 100.0 * (predicted.step_time_s - published_step_time_s) / published_step_time_s;
  }
};

struct ValidationReport {
  std::vector<ValidationRun> runs;
  double mean_abs_error_pct = 0;
  double max_abs_error_pct = 0;
};

/// The software a source ran decides options the runs file does not state: Megatron-Core
/// (2024) runs use flash attention and overlap gradient reduction, parameter gathering and
/// tensor-parallel communication (as the Megatron-LM README states); the 2021-2022 papers'
/// Megatron-LM had no flash attention, reduced gradients after the backward and
/// scattered/gathered pipeline sends over the tp ranks.
PlanOptions software_options(const std::string& source);

/// Predicts every run with its own model, cluster preset (gpus_per_node and inter-node
/// bandwidth from the run) and layout; null layout fields are searched among layouts that fit.
/// Throws InputError naming the run and field on malformed input.
ValidationReport validate_runs(const nlohmann::json& runs_file, const std::string& source);

}  // namespace meshplan::planner
