#pragma once
// Naming a meshplan input given where another kind was expected (a plan file as --model).

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace meshplan {

/// The "format" field of a plan file (plan --save-plan) and of a published-runs file.
inline constexpr const char* kPlanFileFormat = "meshplan plan";
inline constexpr const char* kRunsFileFormat = "meshplan published runs";

/// The JSON inputs meshplan's commands take.
enum class InputKind {
  kModel,    // --model: a meshplan model description or a Hugging Face config.json
  kCluster,  // --cluster: a cluster description (a preset's form, or calibrate --out)
  kPlan,     // a plan file (plan --save-plan)
  kRuns,     // validate's published-runs file
};

/// Throws InputError "<source>: <what the file is>, not <expected>: <what the option takes>"
/// when `json` is recognisably another kind of meshplan input or output than `expected`: a
/// "format": "meshplan ..." field other than `expected`'s, a cluster's `gpu` object with
/// `gpus_per_node`, or a model's `num_layers` with `hidden_size` (or a Hugging Face config's
/// `architectures` / `model_type`); another "format": "meshplan <kind>" is named "a \"meshplan
/// <kind>\" file". Anything else returns, for the loader's field checks.
void reject_other_input_kind(const nlohmann::json& json, InputKind expected,
                             const std::string& source);

}  // namespace meshplan
