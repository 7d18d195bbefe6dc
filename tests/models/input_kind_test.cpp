// models/input_kind.cpp: a file of one kind given where another is expected is named as what
// it is, in one line, by every loader; files of the expected kind pass to the field checks.

#include "meshplan/input_kind.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "input_error.h"
#include "meshplan/models.h"

namespace meshplan {
namespace {

using test::input_error;

const nlohmann::json kPlanFile = {{"format", "meshplan plan"}, {"version", 1}, {"layout", {}}};
const nlohmann::json kRunsFile = {{"format", "meshplan published runs"}, {"runs", {}}};
const nlohmann::json kClusterFile = {{"name", "c"}, {"gpu", {{"name", "g"}}}, {"gpus_per_node", 8}};
const nlohmann::json kModelFile = {{"name", "m"}, {"num_layers", 4}, {"hidden_size", 64}};
const nlohmann::json kHfConfig = {{"model_type", "llama"}, {"num_hidden_layers", 4}};

TEST_CASE("each kind given as another is named, with what the option takes") {
  CHECK(input_error([] { reject_other_input_kind(kPlanFile, InputKind::kModel, "p.json"); }) ==
        "p.json: a meshplan plan file, not a model description: --model takes a preset name, a "
        "meshplan model JSON or a Hugging Face config.json");
  CHECK(input_error([] { reject_other_input_kind(kModelFile, InputKind::kCluster, "m.json"); }) ==
        "m.json: a model description, not a cluster description: --cluster takes a preset name "
        "or a cluster JSON (a preset's form, or calibrate --out)");
  CHECK(input_error([] { reject_other_input_kind(kHfConfig, InputKind::kPlan, "config.json"); }) ==
        "config.json: a model description, not a meshplan plan file: this command takes a plan "
        "file written by plan --save-plan");
  CHECK(input_error([] { reject_other_input_kind(kClusterFile, InputKind::kRuns, "c.json"); }) ==
        "c.json: a cluster description, not a published-runs file: validate takes a runs file "
        "(\"format\": \"meshplan published runs\")");
  CHECK(input_error([] { reject_other_input_kind(kRunsFile, InputKind::kModel, "r.json"); }) ==
        "r.json: a published-runs file, not a model description: --model takes a preset name, a "
        "meshplan model JSON or a Hugging Face config.json");
}

TEST_CASE("another meshplan output is named by its format") {
  const nlohmann::json simulation = {{"format", "meshplan simulation"}, {"step_time_s", 1.0}};
  CHECK(input_error([&] { reject_other_input_kind(simulation, InputKind::kPlan, "s.json"); }) ==
        "s.json: a \"meshplan simulation\" file, not a meshplan plan file: this command takes a "
        "plan file written by plan --save-plan");
}

TEST_CASE("the expected kind, and files recognised as nothing, pass to the field checks") {
  CHECK_NOTHROW(reject_other_input_kind(kPlanFile, InputKind::kPlan, "p.json"));
  CHECK_NOTHROW(reject_other_input_kind(kRunsFile, InputKind::kRuns, "r.json"));
  CHECK_NOTHROW(reject_other_input_kind(kClusterFile, InputKind::kCluster, "c.json"));
  CHECK_NOTHROW(reject_other_input_kind(kModelFile, InputKind::kModel, "m.json"));
  CHECK_NOTHROW(reject_other_input_kind(kHfConfig, InputKind::kModel, "config.json"));
  CHECK_NOTHROW(reject_other_input_kind(nlohmann::json::array(), InputKind::kModel, "a.json"));
  CHECK_NOTHROW(
      reject_other_input_kind(nlohmann::json{{"hidden_size", 64}}, InputKind::kCluster, "h.json"));
}

TEST_CASE("the loaders name a foreign file before any field check") {
  CHECK(input_error([] {
          (void)models::model_from_json(kClusterFile, "c.json");
        }).starts_with("c.json: a cluster description, not a model description"));
  CHECK(input_error([] {
          (void)models::cluster_from_json(kPlanFile, "p.json");
        }).starts_with("p.json: a meshplan plan file, not a cluster description"));
}

}  // namespace
}  // namespace meshplan
