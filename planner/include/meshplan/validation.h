#pragma once
// Predicting published training runs (validation/README.md defines the format).

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/plan_file.h"

namespace meshplan::planner {

/// What a published run ran on, where the run states it (`framework` in the runs file): the
/// framework it is costed under (memory accounting, the layouts the search may pick).
inline constexpr const char* kValidationFrameworks[] = {"megatron", "deepspeed", "fsdp"};

struct ValidationRun {
  std::string id;
  std::string source;
  std::string framework;        // megatron, deepspeed or fsdp; empty where the run does not say
  PlanOptions options;          // the run's `options` (others at their defaults), else guessed
  bool options_stated = false;  // true: from the run's `options`; false: from `source`
  /// Where neither `framework` nor `options` is stated: what decided the framework and options
  /// costed (guess_software's basis, e.g. "deepspeed (named; dated 2022: 2021-22 defaults)").
  std::string software_guess;
  bool used_for_parameters = false;         // the efficiency parameters were chosen on this run
  bool used_for_parameters_stated = false;  // the run has the key (version 2 on)
  std::optional<PlanEstimate> predicted;    // layout has the searched dimensions filled in
  /// The predicted layout as a plan file states it (`validate --plans` writes it, for
  /// `explain` and `simulate`); set exactly when `predicted` is.
  std::optional<Plan> plan;
  std::string not_predicted_reason;  // one line; set exactly when `predicted` is empty
  /// Set when meshplan's memory estimate puts every layout the run states over its GPUs' memory
  /// though the run ran: `predicted` is then the stated layout with the least memory (its step
  /// time predicted all the same) and this line says by how much the estimate is over.
  std::string memory_miss;
  double published_step_time_s = 0;
  std::vector<std::string> searched;  // layout fields the source left null
  /// 100 (predicted - published) / published; precondition: `predicted`.
  double error_pct() const {
    return 100.0 * (predicted.value().step_time_s - published_step_time_s) / published_step_time_s;
  }
};

/// |error| over a subset of the predicted runs (0 when the subset is empty).
struct ErrorSummary {
  size_t num_predicted = 0;
  double mean_abs_error_pct = 0;
  double max_abs_error_pct = 0;
};

struct ValidationReport {
  std::vector<ValidationRun> runs;  // in the file's order, predicted or not
  size_t num_not_predicted = 0;     // runs with no feasible layout: validation failures
  size_t num_memory_misses = 0;     // predicted runs with memory_miss: validation failures too
  double mean_abs_error_pct = 0;    // over the predicted runs (0 when none is)
  double max_abs_error_pct = 0;
  /// Whether any run states used_for_parameters; when none does (every version-1 file), which
  /// runs chose the efficiency parameters is unknown and chosen_on/held_out say nothing.
  bool parameters_marked = false;
  ErrorSummary chosen_on;  // predicted runs with used_for_parameters
  ErrorSummary held_out;   // the other predicted runs
};

/// The options a source's text implies with nothing known of its layout: the first candidate of
/// guess_software (software_guess.h), e.g. Megatron-Core (2024) runs with flash attention and
/// overlapped gradient reduction, parameter gathering and tensor-parallel communication (as the
/// Megatron-LM README states), the 2021-22 papers' Megatron-LM with none of them, scattered and
/// gathered pipeline sends and 16-bit gradient reduction.
PlanOptions software_options(const std::string& source);

/// Predicts every run with its own model, cluster preset (gpus_per_node and inter-node
/// bandwidth from the run), layout and options; null layout fields are searched among layouts
/// that fit. A run that meshplan's memory estimate puts over its GPUs' memory in every layout its
/// fields allow is predicted in the one with the least memory and marked (memory_miss,
/// num_memory_misses): the run ran, so the stated layout fit and its step time is still a
/// prediction to check. A well-formed run with no layout to cost otherwise (a framework that
/// cannot run it, uneven pipeline stages) is not predicted: it keeps the reason and counts in
/// num_not_predicted, and the other runs are still predicted. Accepts runs-file versions 1 and 2.
/// Throws InputError naming the run and field on malformed input (unknown option keys and
/// frameworks included).
ValidationReport validate_runs(const nlohmann::json& runs_file, const std::string& source);

}  // namespace meshplan::planner
