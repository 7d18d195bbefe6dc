#pragma once
// What the --emit tests share: plans, each target's text parsed back, the frameworks' own names.

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "meshplan/emit.h"

namespace meshplan::reports::emit_test {

inline planner::Plan make_plan(const std::string& model, const std::string& cluster,
                               const planner::Layout& layout) {
  planner::Plan plan;
  plan.model = models::load_model(model);
  plan.cluster = models::load_cluster(cluster);
  plan.layout = layout;
  plan.num_gpus = layout.num_gpus();
  REQUIRE(planner::check_layout(plan.model, plan.cluster, plan.num_gpus, layout, true).ok());
  return plan;
}

// The flags after "pretrain_gpt.py \": "--flag value" or "--flag" (value ""), one per line.
inline std::map<std::string, std::string> megatron_flags(const std::string& script) {
  std::map<std::string, std::string> flags;
  std::istringstream lines(script.substr(script.find("pretrain_gpt.py \\\n")));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.rfind("  --", 0) == 0) {
    std::istringstream words(line);
    std::string flag, value;
    words >> flag >> value;
    REQUIRE_MESSAGE(flags.count(flag) == 0, "flag given twice: " << flag);
    flags[flag] = value == "\\" ? "" : value;
  }
  CHECK(line == "  \"$@\"");  // the user's flags come last
  return flags;
}

// The "--flag" lines of tests/data/emit/<list_file>, a parser's flag names.
inline std::set<std::string> parser_flags(const std::string& list_file) {
  std::ifstream file(std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/emit/" + list_file);
  std::set<std::string> names;
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("--", 0) == 0) {
      names.insert(line);
    }
  }
  return names;
}

inline std::set<std::string> megatron_parser_flags() {
  return parser_flags("megatron_arguments_flags.txt");
}

// The TOML subset the torchtitan writer emits: [section], key = integer | true | false | "text",
// '#' comments. Keys come back as "section.key", values as written (strings unquoted).
inline std::map<std::string, std::string> parse_toml(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream lines(text);
  std::string section;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    if (line[0] == '[') {
      REQUIRE(line.back() == ']');
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t equals = line.find(" = ");
    REQUIRE_MESSAGE(equals != std::string::npos, line);
    std::string value = line.substr(equals + 3);
    if (value.front() == '"') {
      REQUIRE(value.back() == '"');
      value = value.substr(1, value.size() - 2);
    }
    values[section + "." + line.substr(0, equals)] = value;
  }
  return values;
}

// Every key the writer may emit, as torchtitan's JobConfig dataclasses name them (job_config.py:
// class Model, Training, Parallelism, ActivationCheckpoint, Compile, Optimizer, Float8Linear).
inline const std::set<std::string> kTorchtitanKeys = {
    "model.name", "model.flavor", "model.converters", "training.local_batch_size",
    "training.global_batch_size", "training.seq_len", "training.mixed_precision_param",
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.tensor_parallel_degree", "parallelism.enable_async_tensor_parallel",
    "parallelism.pipeline_parallel_degree", "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size", "parallelism.module_fqns_per_model_part",
    "parallelism.context_parallel_degree", "activation_checkpoint.mode", "compile.enable",
    "compile.components", "optimizer.implementation", "optimizer.weight_decay",
    // class Float8Linear, [quantize.linear.float8]
    "quantize.linear.float8.enable_fsdp_float8_all_gather",
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.float8.filter_fqns"};

// The plan as costed for `framework`: each target emits only plans costed for its own
// framework (the refusal has its own test below).
inline planner::Plan costed_for(planner::Plan plan, planner::Framework framework) {
  plan.options.framework = framework;
  return plan;
}

// The target's refusal of `plan` costed for the target's framework (slurm: as given).
inline std::string error_of(planner::Plan plan, EmitTarget target, const std::string& path = "") {
  if (const std::optional<planner::Framework> framework = target_framework(target)) {
    plan.options.framework = *framework;
  }
  try {
    emit_launch_config(plan, target, path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace meshplan::reports::emit_test
