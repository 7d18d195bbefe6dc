// meshplan validate: predict published runs, nothing fitted per run.

#include "meshplan/validation.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"

namespace meshplan::planner {

PlanOptions software_options(const std::string& source) {
  PlanOptions options;
  const bool megatron_core = source.find("Megatron-Core") != std::string::npos;
  options.flash_attention = megatron_core;
  options.overlap_grad_reduce = megatron_core;
  options.overlap_param_gather = megatron_core;
  options.overlap_tp_comm = megatron_core;
  // Megatron-LM of 2021-22 split pipeline sends by default (its
  // --no-scatter-gather-tensors-in-pipeline turned it off); Megatron-Core runs use sequence
  // parallelism, which shards the sends anyway.
  options.scatter_gather_pipeline = !megatron_core;
  return options;
}

namespace {

models::TransformerConfig run_model(const nlohmann::json& json, const std::string& where) {
  models::TransformerConfig model;
  model.name = where;
  model.num_layers = require_int(json, "num_layers", where);
  model.hidden_size = require_int(json, "hidden_size", where);
  model.num_attention_heads = require_int(json, "num_attention_heads", where);
  model.num_kv_heads = require_int(json, "num_kv_heads", where);
  model.ffn_hidden_size = require_int(json, "ffn_hidden_size", where);
  model.vocab_size = require_int(json, "vocab_size", where);
  model.seq_length = require_int(json, "seq_length", where);
  model.max_position_embeddings = model.seq_length;
  if (model.num_attention_heads > 0) {
    model.head_dim = model.hidden_size / model.num_attention_heads;
  }
  // The model format's own parsers: same spellings and error text as a model file.
  model.activation = models::parse_activation(json, where);
  model.norm = models::parse_norm(json, where);
  model.positions = models::parse_positions(json, where);
  model.tied_embeddings = require_bool(json, "tied_embeddings", where);
  // GPT-style models (LayerNorm) carry biases on every projection; Llama-style ones none.
  const bool biases = model.norm == models::Norm::kLayerNorm;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = biases;
  models::validate_model(model, where);
  return model;
}

template <typename T, typename Parse>
std::optional<T> optional_field(const nlohmann::json& layout, const std::string& field,
                                std::vector<std::string>& searched, Parse parse) {
  if (!layout.contains(field) || layout.at(field).is_null()) {
    searched.push_back(field);
    return std::nullopt;
  }
  return parse(field);
}

}  // namespace

ValidationReport validate_runs(const nlohmann::json& runs_file, const std::string& source) {
  if (!runs_file.is_object() || !runs_file.contains("runs") || !runs_file.at("runs").is_array()) {
    throw InputError(fmt::format("{}: runs: missing or not a list", source));
  }
  ValidationReport report;
  double sum_abs = 0;
  size_t index = 0;
  for (const nlohmann::json& run_json : runs_file.at("runs")) {
    const std::string where = fmt::format("{}: runs[{}]", source, index++);
    ValidationRun run;
    run.id = require_string(run_json, "id", where);
    run.source = require_string(run_json, "source", where);
    const std::string run_where = fmt::format("{}: runs[{}]", source, run.id);
    for (const char* field : {"model", "hardware", "layout", "published"}) {
      if (!run_json.contains(field) || !run_json.at(field).is_object()) {
        throw InputError(fmt::format("{}: {}: missing or not an object", run_where, field));
      }
    }
    const models::TransformerConfig model = run_model(run_json.at("model"), run_where + ": model");
    const nlohmann::json& hardware = run_json.at("hardware");
    const std::string hardware_where = run_where + ": hardware";
    models::ClusterConfig cluster;
    const std::string cluster_name = require_string(hardware, "cluster", hardware_where);
    try {
      cluster = models::load_cluster(cluster_name);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: cluster: {}", hardware_where, e.what()));
    }
    cluster.gpus_per_node = require_int(hardware, "gpus_per_node", hardware_where);
    const double gbps = require_number(hardware, "inter_node_gbps_per_gpu", hardware_where);
    if (!(gbps > 0) || !std::isfinite(gbps)) {
      throw InputError(
          fmt::format("{}: inter_node_gbps_per_gpu: must be positive ({})", hardware_where, gbps));
    }
    cluster.inter_node_bytes_per_second_per_gpu = gbps * 1e9 / 8.0;  // Gbit/s -> bytes/s
    models::validate_cluster(cluster, hardware_where);

    const nlohmann::json& layout = run_json.at("layout");
    const std::string layout_where = run_where + ": layout";
    SearchSpace space;
    space.num_gpus = require_int(hardware, "num_gpus", hardware_where);
    space.global_batch = require_int(layout, "global_batch", layout_where);
    const auto integer = [&](const std::string& field) {
      return require_int(layout, field, layout_where);
    };
    space.tp = optional_field<int64_t>(layout, "tp", run.searched, integer);
    space.pp = optional_field<int64_t>(layout, "pp", run.searched, integer);
    space.dp = optional_field<int64_t>(layout, "dp", run.searched, integer);
    space.vpp = optional_field<int64_t>(layout, "vpp", run.searched, integer);
    space.micro_batch = optional_field<int64_t>(layout, "micro_batch", run.searched, integer);
    space.recompute = optional_field<Recompute>(layout, "recompute", run.searched, [&](auto& f) {
      return parse_recompute(require_string(layout, f, layout_where), layout_where + ": " + f);
    });
    space.sequence_parallel =
        optional_field<bool>(layout, "sequence_parallel", run.searched,
                             [&](auto& f) { return require_bool(layout, f, layout_where); });
    space.zero = optional_field<int>(layout, "zero", run.searched,
                                     [&](auto& f) { return static_cast<int>(integer(f)); });
    space.schedule = optional_field<ScheduleKind>(layout, "schedule", run.searched, [&](auto& f) {
      return parse_schedule(require_string(layout, f, layout_where), layout_where + ": " + f);
    });
    const PlanOptions options = software_options(run.source);
    SearchResult result;
    try {
      result = search_layouts(model, cluster, space, options, Objective::kTime, 1);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", layout_where, e.what()));
    }
    if (result.best.empty()) {
      std::string reasons;
      for (const auto& [code, count] : result.rejections) {
        reasons += fmt::format(" {} x{} ({});", code, count, result.example_reason.at(code));
      }
      throw InputError(fmt::format("{}: layout: no feasible layout:{}", run_where, reasons));
    }
    run.predicted = result.best.front();
    const nlohmann::json& published = run_json.at("published");
    run.published_step_time_s = require_number(published, "step_time_s", run_where + ": published");
    if (!(run.published_step_time_s > 0)) {
      throw InputError(fmt::format("{}: published: step_time_s: must be positive ({})", run_where,
                                   run.published_step_time_s));
    }
    sum_abs += std::fabs(run.error_pct());
    report.max_abs_error_pct = std::max(report.max_abs_error_pct, std::fabs(run.error_pct()));
    report.runs.push_back(std::move(run));
  }
  if (!report.runs.empty()) {
    report.mean_abs_error_pct = sum_abs / static_cast<double>(report.runs.size());
  }
  return report;
}

}  // namespace meshplan::planner
