// reject_other_input_kind: a plan file given as --model is named as one, not reported as the
// model's "unknown field".

#include "meshplan/input_kind.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "hf_config.h"
#include "meshplan/errors.h"

namespace meshplan {

namespace {

// What `json` recognisably is, by its `format` field or its signature fields.
std::optional<InputKind> recognised_kind(const nlohmann::json& json) {
  if (!json.is_object()) {
    return std::nullopt;
  }
  const auto format = json.find("format");
  if (format != json.end() && format->is_string()) {
    const auto& text = format->get_ref<const std::string&>();
    if (text == kPlanFileFormat) {
      return InputKind::kPlan;
    }
    if (text == kRunsFileFormat) {
      return InputKind::kRuns;
    }
  }
  const auto gpu = json.find("gpu");
  if (gpu != json.end() && gpu->is_object() && json.contains("gpus_per_node")) {
    return InputKind::kCluster;
  }
  if ((json.contains("num_layers") && json.contains("hidden_size")) || models::is_hf_config(json)) {
    return InputKind::kModel;
  }
  return std::nullopt;
}

std::string_view what_it_is(InputKind kind) {
  switch (kind) {
    case InputKind::kModel:
      return "a model description";
    case InputKind::kCluster:
      return "a cluster description";
    case InputKind::kPlan:
      return "a meshplan plan file";
    case InputKind::kRuns:
      return "a published-runs file";
  }
  return "?";
}

std::string_view what_is_taken(InputKind kind) {
  switch (kind) {
    case InputKind::kModel:
      return "--model takes a preset name, a meshplan model JSON or a Hugging Face config.json";
    case InputKind::kCluster:
      return "--cluster takes a preset name or a cluster JSON (a preset's form, or calibrate "
             "--out)";
    case InputKind::kPlan:
      return "this command takes a plan file written by plan --save-plan";
    case InputKind::kRuns:
      return "validate takes a runs file (\"format\": \"meshplan published runs\")";
  }
  return "?";
}

}  // namespace

void reject_other_input_kind(const nlohmann::json& json, InputKind expected,
                             const std::string& source) {
  std::string found;
  if (const std::optional<InputKind> kind = recognised_kind(json); kind && *kind != expected) {
    found = std::string(what_it_is(*kind));
  } else if (!kind && json.is_object()) {
    // Another meshplan file (simulate --json, compare --json, execute --json, ...).
    const auto format = json.find("format");
    if (format != json.end() && format->is_string() &&
        format->get_ref<const std::string&>().starts_with("meshplan ")) {
      found = fmt::format("a \"{}\" file", format->get_ref<const std::string&>());
    }
  }
  if (!found.empty()) {
    throw InputError(fmt::format("{}: {}, not {}: {}", source, found, what_it_is(expected),
                                 what_is_taken(expected)));
  }
}

}  // namespace meshplan
