// meshplan validate: predict published runs, nothing fitted per run.

#include "meshplan/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/input_kind.h"
#include "meshplan/json_io.h"
#include "meshplan/pipeline_layout.h"
#include "meshplan/plan_file.h"
#include "meshplan/search.h"
#include "meshplan/software_guess.h"
#include "meshplan/units.h"

namespace meshplan::planner {

PlanOptions software_options(const std::string& source) {
  return guess_software(source, StatedLayout{}, false).front().options;
}

namespace {

// Runs-file versions read: 1, 2 (adds per-run framework and options), 3 (adds the layout's
// `cp`), 4 (adds the model's `parallel_residual`), 5 (adds the layout's `dp_shard`), 6 (adds
// the layout's `recompute_layers`), 7 (adds the layout's `recompute_group_layers`), 8 (adds
// the layout's `recompute_modules`), 9 (adds the model's `head_dim`, `qk_norm`, mixture-of-
// experts and latent-attention keys, and the layout's `ep` and `etp`), 10 (adds the model's
// bias keys, sliding windows, attention sinks and gated-unit offset and clamp) and 11 (adds the
// model's `mtp_num_layers` and the layout's `pipeline_layout`); an older reader would silently
// ignore any of them.
constexpr int64_t kRunsFormatVersion = 11;

// A run's keys, object by object (validation/README.md); anything else is a typo that would
// otherwise be silently left out (a misspelt layout field searched, a misspelt dropout read as
// the default).
constexpr std::array<std::string_view, 10> kRunFields = {
    "id",        "source", "model",     "hardware", "layout",
    "published", "note",   "framework", "options",  "used_for_parameters"};
constexpr std::array<std::string_view, 13> kRunModelFieldsV8 = {
    "num_layers",      "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "vocab_size",      "seq_length",  "activation",          "norm",         "positions",
    "tied_embeddings", "dropout",     "parallel_residual"};
// Version 9: the model file's own keys for the attention head size, the q/k norms, experts
// (models::kMoeModelFields) and latent attention (models::kMlaModelFields), read by the model
// file's readers (run_model).
constexpr std::array<std::string_view, 2> kRunAttentionFieldsV9 = {"head_dim", "qk_norm"};

constexpr auto kRunModelFieldsV9 =
    joined_fields(kRunAttentionFieldsV9, models::kMoeModelFields, models::kMlaModelFields);
// Version 10: the model file's bias keys (absent: the norm's default, run_model) and its
// attention and gated-unit variant keys (gpt-oss), read by the model file's readers.
constexpr auto kRunModelFieldsV10 =
    joined_fields(models::kBiasModelFields, models::kVariantModelFields);
// Version 11: multi-token prediction (DeepSeek-V3), read as a model file reads it.
constexpr std::array<std::string_view, 1> kRunModelFieldsV11 = {"mtp_num_layers"};
constexpr auto kRunModelFields =
    joined_fields(kRunModelFieldsV8, kRunModelFieldsV9, kRunModelFieldsV10, kRunModelFieldsV11);
constexpr std::array<std::string_view, 4> kRunHardwareFields = {
    "cluster", "num_gpus", "gpus_per_node", "inter_node_gbps_per_gpu"};
constexpr std::array<std::string_view, 3> kRunPublishedFields = {"step_time_s", "how", "reported"};
constexpr std::array<std::string_view, 19> kRunLayoutFields = {"tp",
                                                               "pp",
                                                               "dp",
                                                               "cp",
                                                               "vpp",
                                                               "micro_batch",
                                                               "global_batch",
                                                               "zero",
                                                               "schedule",
                                                               "stage_layers",
                                                               "dp_shard",
                                                               "recompute",
                                                               "sequence_parallel",
                                                               "recompute_layers",
                                                               "recompute_group_layers",
                                                               "recompute_modules",
                                                               "ep",
                                                               "etp",
                                                               "pipeline_layout"};

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
  // Version 9, optional as in a model file (absent or null: hidden_size / num_attention_heads).
  model.head_dim = models::read_head_dim(json, where, model.hidden_size, model.num_attention_heads);
  // The model format's own parsers: same spellings and error text as a model file.
  model.activation = models::parse_activation(json, where);
  model.norm = models::parse_norm(json, where);
  model.positions = models::parse_positions(json, where);
  model.tied_embeddings = require_bool(json, "tied_embeddings", where);
  // GPT-style models (LayerNorm) carry biases on every projection; Llama-style ones none.
  // Version 10: a run may state each bias key, as a model file does; the absent ones keep this.
  const bool biases = model.norm == models::Norm::kLayerNorm;
  model.qkv_bias = model.attention_output_bias = model.mlp_bias = biases;
  models::read_stated_bias_fields(json, where, model);
  // Optional, as in a model file (docs/plan-format.md): absent = true, Megatron-LM's 0.1.
  if (json.contains("dropout")) {
    model.dropout = require_bool(json, "dropout", where);
  }
  // Version 4, optional as in a model file: absent = a sequential block.
  if (json.contains("parallel_residual")) {
    model.parallel_residual = require_bool(json, "parallel_residual", where);
  }
  // Version 9, optional as in a model file and read by its readers: q/k norms (absent =
  // false), the experts and the latent attention (absent = a dense model with standard
  // attention).
  if (json.contains("qk_norm")) {
    model.qk_norm = require_bool(json, "qk_norm", where);
  }
  models::read_moe_fields(json, where, model);
  models::read_mla_fields(json, where, model);
  // Version 10, optional as in a model file: windows and sinks (absent = full attention, no
  // sinks), the gated unit's offset and clamp (absent = none).
  models::read_attention_variant_fields(json, where, model);
  models::read_gated_unit_variant_fields(json, where, model);
  // Version 11, optional as in a model file: absent or null = no multi-token prediction; its
  // range and rope check are validate_model's.
  if (json.contains("mtp_num_layers") && !json.at("mtp_num_layers").is_null()) {
    model.mtp_num_layers = require_int(json, "mtp_num_layers", where);
  }
  models::validate_model(model, where);
  models::normalize_window_pattern(model);
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

// The run's hardware: its cluster preset with the run's gpus_per_node and inter-node bandwidth.
models::ClusterConfig run_cluster(const nlohmann::json& hardware, const std::string& where) {
  models::ClusterConfig cluster;
  const std::string cluster_name = require_string(hardware, "cluster", where);
  try {
    cluster = models::load_cluster(cluster_name);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: cluster: {}", where, e.what()));
  }
  cluster.gpus_per_node = require_int(hardware, "gpus_per_node", where);
  const double gbps = require_number(hardware, "inter_node_gbps_per_gpu", where);
  if (!(gbps > 0) || !std::isfinite(gbps)) {
    throw InputError(
        fmt::format("{}: inter_node_gbps_per_gpu: must be positive ({})", where, gbps));
  }
  // The cluster format's bandwidth bounds (1e6..1e16 bytes/s, models/cluster_config.cpp) in
  // this field's Gbit/s, so the error names the runs file's field, not the cluster's.
  constexpr double kMinGbps = 1e6 * 8.0 / 1e9;
  constexpr double kMaxGbps = 1e16 * 8.0 / 1e9;
  if (gbps < kMinGbps || gbps > kMaxGbps) {
    throw InputError(
        fmt::format("{}: inter_node_gbps_per_gpu: must be in [{:g}, {:g}] Gbit/s ({:g})", where,
                    kMinGbps, kMaxGbps, gbps));
  }
  cluster.inter_node_bytes_per_second_per_gpu = gbps * 1e9 / 8.0;  // Gbit/s -> bytes/s
  models::validate_cluster(cluster, where);
  return cluster;
}

// The layout as a search space: fixed fields as given, null ones searched (named in `searched`).
SearchSpace run_space(const nlohmann::json& layout, int64_t num_gpus, const std::string& where,
                      std::vector<std::string>& searched) {
  SearchSpace space;
  space.num_gpus = num_gpus;
  space.global_batch = require_int(layout, "global_batch", where);
  const auto integer = [&](const std::string& field) { return require_int(layout, field, where); };
  // A stated size below 1 is a malformed run, not an unpredictable one (a micro-batch of 0 once
  // reached the search's division by it: found by fuzz_public_runs).
  const auto size = [&](const std::string& field) {
    const int64_t value = integer(field);
    if (value < 1) {
      throw InputError(fmt::format("{}: {}: must be at least 1 ({})", where, field, value));
    }
    return value;
  };
  space.tp = optional_field<int64_t>(layout, "tp", searched, size);
  space.pp = optional_field<int64_t>(layout, "pp", searched, size);
  space.dp = optional_field<int64_t>(layout, "dp", searched, size);
  space.vpp = optional_field<int64_t>(layout, "vpp", searched, size);
  space.micro_batch = optional_field<int64_t>(layout, "micro_batch", searched, size);
  space.recompute = optional_field<Recompute>(layout, "recompute", searched, [&](auto& f) {
    return parse_recompute(require_string(layout, f, where), where + ": " + f);
  });
  space.sequence_parallel =
      optional_field<bool>(layout, "sequence_parallel", searched,
                           [&](auto& f) { return require_bool(layout, f, where); });
  space.zero = optional_field<int>(layout, "zero", searched, [&](auto& f) {
    const int64_t zero = integer(f);
    // A stage outside ZeRO's 0-3 is a malformed run, not an unpredictable one.
    if (zero < 0 || zero > 3) {
      throw InputError(fmt::format("{}: zero: must be 0, 1, 2 or 3 ({})", where, zero));
    }
    return static_cast<int>(zero);
  });
  space.schedule = optional_field<ScheduleKind>(layout, "schedule", searched, [&](auto& f) {
    return parse_schedule(require_string(layout, f, where), where + ": " + f);
  });
  // Context parallelism: absent or null = 1, as in a plan file (never searched: a source that
  // used it states it).
  space.cp = 1;
  if (layout.contains("cp") && !layout.at("cp").is_null()) {
    space.cp = integer("cp");
    if (*space.cp < 1) {
      throw InputError(fmt::format("{}: cp: must be at least 1 ({})", where, *space.cp));
    }
  }
  // Expert parallelism (version 9): absent or null = 1, as in a plan file, and never searched
  // (a source that used it states it). etp: absent or null = tp, Megatron's default
  // (--expert-tensor-parallel-size None), also when tp is searched (SearchSpace::etp 0).
  space.ep = 1;
  if (layout.contains("ep") && !layout.at("ep").is_null()) {
    space.ep = integer("ep");
    if (*space.ep < 1) {
      throw InputError(fmt::format("{}: ep: must be at least 1 ({})", where, *space.ep));
    }
  }
  space.etp = 0;
  if (layout.contains("etp") && !layout.at("etp").is_null()) {
    space.etp = integer("etp");
    if (*space.etp < 1) {
      throw InputError(fmt::format("{}: etp: must be at least 1 ({})", where, *space.etp));
    }
  }
  // Optional, unlike the fields above: runs written before uneven stages omit it (searched).
  if (layout.contains("stage_layers") && !layout.at("stage_layers").is_null()) {
    space.stage_layers = stage_layers_from_json(layout.at("stage_layers"), where);
  }
  // No published run states a micro-batch group size, and the interleaved runs predate it
  // (Narayanan et al. 2021's Megatron-LM needs m divisible by pp): Megatron's default N = pp.
  space.microbatch_group = 0;
  // Hybrid sharding (version 5): the shard group a run states, else its whole data-parallel
  // group (0, full sharding): the search must not try shard groups the run did not use.
  space.dp_shard = 0;
  if (layout.contains("dp_shard") && !layout.at("dp_shard").is_null()) {
    space.dp_shard = integer("dp_shard");
    if (*space.dp_shard < 1) {
      throw InputError(
          fmt::format("{}: dp_shard: must be at least 1 ({})", where, *space.dp_shard));
    }
  }
  // Megatron's block method (version 6): the layers per chunk a run recomputed under
  // --recompute-method block, with recompute full; absent or null: every layer (never searched).
  if (layout.contains("recompute_layers") && !layout.at("recompute_layers").is_null()) {
    space.recompute_layers = integer("recompute_layers");
    if (space.recompute_layers < 1 || space.recompute_layers > kMaxRecomputeLayers) {
      throw InputError(fmt::format("{}: recompute_layers: must be between 1 and {} ({})", where,
                                   kMaxRecomputeLayers, space.recompute_layers));
    }
  }
  // Megatron's uniform method (version 7): layers per checkpointed group under
  // --recompute-method uniform --recompute-num-layers N (DeepSpeed's
  // activation_checkpoint_interval); absent or null: one layer a group (never searched).
  if (layout.contains("recompute_group_layers") && !layout.at("recompute_group_layers").is_null()) {
    space.recompute_group_layers = integer("recompute_group_layers");
    if (space.recompute_group_layers < 1 || space.recompute_group_layers > kMaxRecomputeLayers) {
      throw InputError(fmt::format("{}: recompute_group_layers: must be between 1 and {} ({})",
                                   where, kMaxRecomputeLayers, space.recompute_group_layers));
    }
  }
  // Megatron-Core's --recompute-modules (version 8): the modules a run's selective recompute
  // named, a list; absent or null: core_attn alone, its default (never searched).
  if (layout.contains("recompute_modules") && !layout.at("recompute_modules").is_null()) {
    space.recompute_modules =
        recompute_modules_from_json(layout.at("recompute_modules"), where + ": recompute_modules");
  }
  return space;
}

// The run's stated `options`, read by the plan file's parser.
void read_stated_options(const nlohmann::json& run_json, const std::string& where,
                         ValidationRun& run) {
  if (!run_json.at("options").is_object()) {
    throw InputError(fmt::format("{}: options: not an object", where));
  }
  // The plan file's parser: same keys and error text; a key the run leaves out keeps the
  // default `meshplan plan` uses. Its checks that depend on the framework (norm_kernel) see
  // the run's own `framework` field, read before.
  PlanOptions defaults;
  if (!run.framework.empty()) {
    defaults.framework = parse_framework(run.framework, where + ": framework");
  }
  run.options = options_from_json(run_json.at("options"), where, &defaults);
  if (run_json.at("options").contains("framework")) {
    throw InputError(
        fmt::format("{}: options: framework: stated by the run's own `framework` "
                    "field, not in options",
                    where));
  }
}

// Sets the run's framework and options (version-2 keys; null or absent = not stated). Without
// `options` the source text decides them (software_options), as in version 1.
void read_software(const nlohmann::json& run_json, int version, const std::string& where,
                   ValidationRun& run) {
  const auto stated = [&](const char* field) {
    return run_json.contains(field) && !run_json.at(field).is_null();
  };
  for (const char* field : {"framework", "options", "used_for_parameters"}) {
    if (stated(field) && version < 2) {
      throw InputError(
          fmt::format("{}: {}: needs runs-file version 2 (version {})", where, field, version));
    }
  }
  if (stated("framework")) {
    run.framework = require_string(run_json, "framework", where);
    if (std::ranges::find(kValidationFrameworks, run.framework) ==
        std::end(kValidationFrameworks)) {
      throw InputError(
          fmt::format("{}: framework: unknown framework, expected megatron, deepspeed or fsdp ({})",
                      where, run.framework));
    }
  }
  if (stated("used_for_parameters")) {
    if (!run_json.at("used_for_parameters").is_boolean()) {
      throw InputError(fmt::format("{}: used_for_parameters: not a boolean", where));
    }
    run.used_for_parameters = run_json.at("used_for_parameters").get<bool>();
    run.used_for_parameters_stated = true;
  }
  run.options_stated = stated("options");
  if (run.options_stated) {
    read_stated_options(run_json, where, run);
    // The framework decides the memory accounting and the layouts the search may pick, as
    // `meshplan plan --framework` does; a run that does not state one is costed as Megatron-LM.
    if (!run.framework.empty()) {
      run.options.framework = parse_framework(run.framework, where + ": framework");
    }
    check_overlap_p2p_options(run.options, where + ": options: overlap_p2p_comm");
  }
}

// The software candidates a run is costed with, in order (validate_run takes the first whose
// framework can run the stated layout): its stated options; else the guess from its source
// text and stated layout (guess_software). A run that states its framework but not its options
// gets Megatron-LM's options of its era under that framework.
std::vector<SoftwareGuess> software_candidates(const ValidationRun& run,
                                               const models::TransformerConfig& model,
                                               const SearchSpace& space,
                                               const models::ClusterConfig& cluster,
                                               const std::string& where) {
  if (run.options_stated) {
    return {SoftwareGuess{run.options, "", SearchLimits{}}};
  }
  const bool gpu_has_fp8 = cluster.gpu.peak_fp8_flops_per_second > 0 &&
                           cluster.precision == models::Precision::kBf16Mixed;
  std::vector<SoftwareGuess> guesses = guess_software(
      run.source,
      StatedLayout{space.pp, space.schedule, space.zero, model.norm == models::Norm::kRmsNorm},
      gpu_has_fp8);
  if (run.framework.empty()) {
    return guesses;
  }
  SoftwareGuess stated = guesses.back();  // Megatron-LM's options of the source's era
  stated.options.framework = parse_framework(run.framework, where + ": framework");
  if (stated.options.framework == Framework::kDeepSpeed) {
    stated.options.gemm_precision = GemmPrecision::kBf16;  // no FP8 path modelled
  }
  if (stated.options.framework != Framework::kMegatron) {
    stated.options.grad_reduce_dtype.reset();  // the guess is Megatron's: the framework's default
    stated.options.overlap_p2p_comm = false;
  }
  stated.basis = "";
  stated.limits = {};  // the era limits are the guessed framework's
  return {stated};
}

// The file's version: 1 to kRunsFormatVersion.
int runs_version(const nlohmann::json& runs_file, const std::string& source) {
  const int64_t version = require_int(runs_file, "version", source);
  if (version < 1 || version > kRunsFormatVersion) {
    throw InputError(
        fmt::format("{}: version: expected 1 to {} ({})", source, kRunsFormatVersion, version));
  }
  return static_cast<int>(version);
}

// The run's search space without what its guessed software could not run (SearchLimits):
// only the fields the run leaves to the search are narrowed.
SearchSpace within_limits(SearchSpace space, const SearchLimits& limits) {
  if (!limits.sequence_parallel && !space.sequence_parallel) {
    space.sequence_parallel = false;
  }
  if (!limits.selective_recompute) {
    space.search_selective_recompute = false;
  }
  if (limits.max_zero && !space.zero) {
    space.max_zero = limits.max_zero;
  }
  return space;
}

// Why a search that kept no layout predicts nothing, in one line.
std::string no_prediction_reason(const models::TransformerConfig& model,
                                 const SearchResult& result) {
  if (result.num_evaluated == 0) {
    // The search enumerates no (schedule, vpp) pair when no split it tries has layer counts
    // sharing a divisor >= 2 for interleaved (search.cpp, schedule_choices), so nothing
    // reached the validity rules.
    return fmt::format(
        "no layout to cost: the fixed fields leave no schedule to search (interleaved needs a "
        "vpp >= 2 dividing every stage's layer count; num_layers {})",
        model.num_layers);
  }
  std::string reason = "no feasible layout:";
  for (const auto& [code, count] : result.rejections) {
    reason += fmt::format(" {} x{} ({});", code, count, result.example_reason.at(code));
  }
  return reason;
}

// A run whose every stated layout meshplan puts over its GPUs' memory: the run ran, so the
// layout fit and the miss is the memory estimate's. The step time is predicted for the layout
// with the least memory among those the run's fields allow (the stated one when it states them
// all), costed as if the GPU had room (memory does not enter the time), and the run carries the
// miss as a validation failure of its own.
void predict_over_memory(const models::TransformerConfig& model,
                         const models::ClusterConfig& cluster, const SearchSpace& space,
                         ValidationRun& run) {
  models::ClusterConfig roomy = cluster;
  roomy.gpu.hbm_bytes = int64_t{1} << 60;
  const SearchResult least =
      search_layouts(model, roomy, space, run.options, Objective::kMemory, 1);
  if (least.best.empty()) {
    return;
  }
  run.predicted = least.best.front();
  const auto gib = [](int64_t bytes) {
    return static_cast<double>(bytes) / static_cast<double>(kBytesPerGiB);
  };
  const double estimate_gib = gib(run.predicted->peak_memory_bytes);
  const double capacity_gib = gib(cluster.gpu.hbm_bytes);
  run.memory_miss = fmt::format(
      "meshplan's memory estimate {:.1f} GiB is {:.1f}% over the {:.1f} GiB of each {}, though "
      "the run ran",
      estimate_gib, 100.0 * (estimate_gib - capacity_gib) / capacity_gib, capacity_gib,
      cluster.gpu.name);
}

// Version 11: Megatron-Core's layout string fixes the split, vpp and (vpp > 1) the interleaved
// schedule, as `plan --pipeline-layout` does; those fields are then no longer searched. False
// when the run states none.
bool fix_run_pipeline_layout(const nlohmann::json& layout, const models::TransformerConfig& model,
                             const std::string& where, SearchSpace& space,
                             std::vector<std::string>& searched) {
  if (!layout.contains("pipeline_layout") || layout.at("pipeline_layout").is_null()) {
    return false;
  }
  const std::string field = where + ": pipeline_layout";
  if (space.stage_layers) {
    throw InputError(fmt::format("{}: give either the layout string or stage_layers", field));
  }
  fix_pipeline_layout(model, require_string(layout, "pipeline_layout", where),
                      {.layout = field, .pp = "pp", .vpp = "vpp", .schedule = "schedule"}, space);
  std::erase_if(searched, [&](const std::string& name) {
    return name == "vpp" || (name == "schedule" && space.schedule);
  });
  return true;
}

// One run: parsed (throws InputError on malformed input), then predicted or given the reason
// it cannot be.
ValidationRun validate_run(const nlohmann::json& run_json, int version, const std::string& source,
                           size_t index) {
  ValidationRun run;
  const std::string index_where = fmt::format("{}: runs[{}]", source, index);
  run.id = require_string(run_json, "id", index_where);
  run.source = require_string(run_json, "source", index_where);
  const std::string where = fmt::format("{}: runs[{}]", source, run.id);
  for (const char* field : {"model", "hardware", "layout", "published"}) {
    if (!run_json.contains(field) || !run_json.at(field).is_object()) {
      throw InputError(fmt::format("{}: {}: missing or not an object", where, field));
    }
  }
  read_software(run_json, version, where, run);
  if (version < 3 && run_json.at("layout").contains("cp") &&
      !run_json.at("layout").at("cp").is_null()) {
    throw InputError(
        fmt::format("{}: layout: cp: needs runs-file version 3 (version {})", where, version));
  }
  if (version < 4 && run_json.at("model").contains("parallel_residual")) {
    throw InputError(fmt::format(
        "{}: model: parallel_residual: needs runs-file version 4 (version {})", where, version));
  }
  reject_unknown_fields(run_json, kRunFields, where);
  reject_unknown_fields(run_json.at("model"), kRunModelFields, where, "model: ");
  reject_unknown_fields(run_json.at("hardware"), kRunHardwareFields, where, "hardware: ");
  reject_unknown_fields(run_json.at("layout"), kRunLayoutFields, where, "layout: ");
  reject_unknown_fields(run_json.at("published"), kRunPublishedFields, where, "published: ");
  if (version < 5 && run_json.at("layout").contains("dp_shard")) {
    throw InputError(fmt::format("{}: layout: dp_shard: needs runs-file version 5 (version {})",
                                 where, version));
  }
  if (version < 6 && run_json.at("layout").contains("recompute_layers")) {
    throw InputError(fmt::format(
        "{}: layout: recompute_layers: needs runs-file version 6 (version {})", where, version));
  }
  if (version < 8 && run_json.at("layout").contains("recompute_modules")) {
    throw InputError(fmt::format(
        "{}: layout: recompute_modules: needs runs-file version 8 (version {})", where, version));
  }
  if (version < 7 && run_json.at("layout").contains("recompute_group_layers")) {
    throw InputError(
        fmt::format("{}: layout: recompute_group_layers: needs runs-file version 7 (version {})",
                    where, version));
  }
  if (version < 9) {
    for (const std::string_view key : kRunModelFieldsV9) {
      if (run_json.at("model").contains(key)) {
        throw InputError(fmt::format("{}: model: {}: needs runs-file version 9 (version {})", where,
                                     key, version));
      }
    }
    for (const char* key : {"ep", "etp"}) {
      if (run_json.at("layout").contains(key)) {
        throw InputError(fmt::format("{}: layout: {}: needs runs-file version 9 (version {})",
                                     where, key, version));
      }
    }
  }
  if (version < 10) {
    for (const std::string_view key : kRunModelFieldsV10) {
      if (run_json.at("model").contains(key)) {
        throw InputError(fmt::format("{}: model: {}: needs runs-file version 10 (version {})",
                                     where, key, version));
      }
    }
  }
  if (version < 11) {
    for (const std::string_view key : kRunModelFieldsV11) {
      if (run_json.at("model").contains(key)) {
        throw InputError(fmt::format("{}: model: {}: needs runs-file version 11 (version {})",
                                     where, key, version));
      }
    }
    if (run_json.at("layout").contains("pipeline_layout")) {
      throw InputError(fmt::format(
          "{}: layout: pipeline_layout: needs runs-file version 11 (version {})", where, version));
    }
  }
  const models::TransformerConfig model = run_model(run_json.at("model"), where + ": model");
  const nlohmann::json& hardware = run_json.at("hardware");
  const models::ClusterConfig cluster = run_cluster(hardware, where + ": hardware");
  const std::string layout_where = where + ": layout";
  const int64_t num_gpus = require_int(hardware, "num_gpus", where + ": hardware");
  SearchSpace space = run_space(run_json.at("layout"), num_gpus, layout_where, run.searched);
  // A layout string's split is checked by its parser; a stated list here.
  if (!fix_run_pipeline_layout(run_json.at("layout"), model, layout_where, space, run.searched) &&
      space.stage_layers) {  // pp may be searched: the list then fixes it
    const int64_t pp = space.pp.value_or(static_cast<int64_t>(space.stage_layers->size()));
    space.stage_layers = checked_stage_layers(model, pp, *space.stage_layers, layout_where);
  }
  run.published_step_time_s =
      require_number(run_json.at("published"), "step_time_s", where + ": published");
  // A microsecond to a year: anything outside is a unit slip, and its error a 300-digit figure.
  if (!(run.published_step_time_s >= 1e-6 && run.published_step_time_s <= 3.2e7)) {
    throw InputError(
        fmt::format("{}: published: step_time_s: must be between 1e-6 and 3.2e7 seconds ({})",
                    where, run.published_step_time_s));
  }
  SearchResult result;
  const std::vector<SoftwareGuess> candidates =
      software_candidates(run, model, space, cluster, where);
  SearchSpace candidate_space = space;
  for (size_t i = 0; i < candidates.size(); ++i) {
    run.options = candidates[i].options;
    run.software_guess = candidates[i].basis;
    candidate_space = within_limits(space, candidates[i].limits);
    try {
      result = search_layouts(model, cluster, candidate_space, run.options, Objective::kTime, 1);
      break;
    } catch (const FrameworkRefusal& e) {
      // A framework that cannot run any layout the run states is a run meshplan cannot predict
      // (with that reason), not a malformed file; a guessed framework gives way to the next.
      if (i + 1 == candidates.size()) {
        run.not_predicted_reason = e.refusal();
        return run;
      }
    } catch (const InputError& e) {
      // A guessed framework whose options refuse the run gives way to the next candidate too;
      // the last one's refusal is the run's input error.
      if (i + 1 == candidates.size()) {
        throw InputError(fmt::format("{}: {}", layout_where, e.what()));
      }
    }
  }
  if (!result.best.empty()) {
    run.predicted = result.best.front();
  } else if (result.rejections.contains("memory")) {
    predict_over_memory(model, cluster, candidate_space, run);
  }
  if (!run.predicted) {
    run.not_predicted_reason = no_prediction_reason(model, result);
    return run;
  }
  // As `plan --save-plan` writes it: the bucket the prediction was costed with.
  PlanOptions plan_options = run.options;
  plan_options.bucket_bytes = dp_bucket_bytes(cluster, run.predicted->layout, run.options);
  run.plan = Plan{model, cluster, num_gpus, run.predicted->layout, plan_options};
  return run;
}

}  // namespace

namespace {

// Mean and max |error| of the predicted runs `in` selects.
template <typename Select>
ErrorSummary summarize(const std::vector<ValidationRun>& runs, Select in) {
  ErrorSummary summary;
  double sum_abs = 0;
  for (const ValidationRun& run : runs) {
    if (run.predicted && in(run)) {
      ++summary.num_predicted;
      sum_abs += std::fabs(run.error_pct());
      summary.max_abs_error_pct = std::max(summary.max_abs_error_pct, std::fabs(run.error_pct()));
    }
  }
  if (summary.num_predicted > 0) {
    summary.mean_abs_error_pct = sum_abs / static_cast<double>(summary.num_predicted);
  }
  return summary;
}

}  // namespace

ValidationReport validate_runs(const nlohmann::json& runs_file, const std::string& source) {
  reject_other_input_kind(runs_file, InputKind::kRuns, source);
  if (!runs_file.is_object() || !runs_file.contains("runs") || !runs_file.at("runs").is_array()) {
    throw InputError(fmt::format("{}: runs: missing or not a list", source));
  }
  static constexpr std::array<std::string_view, 3> kFileFields = {"format", "version", "runs"};
  reject_unknown_fields(runs_file, kFileFields, source);
  if (runs_file.contains("format") && runs_file.at("format") != nlohmann::json(kRunsFileFormat)) {
    throw InputError(fmt::format("{}: format: expected \"{}\" ({})", source, kRunsFileFormat,
                                 runs_file.at("format").dump().substr(0, 60)));
  }
  if (runs_file.at("runs").empty()) {
    throw InputError(fmt::format("{}: runs: empty, nothing to validate", source));
  }
  const int version = runs_version(runs_file, source);
  ValidationReport report;
  size_t index = 0;
  std::set<std::string> ids;
  for (const nlohmann::json& run_json : runs_file.at("runs")) {
    ValidationRun run = validate_run(run_json, version, source, index++);
    if (!ids.insert(run.id).second) {  // --plans writes one file per id, the report a row
      throw InputError(fmt::format("{}: runs[{}]: id given to two runs", source, run.id));
    }
    report.num_not_predicted += run.predicted ? 0 : 1;
    report.num_memory_misses += run.memory_miss.empty() ? 0 : 1;
    report.parameters_marked = report.parameters_marked || run.used_for_parameters_stated;
    report.runs.push_back(std::move(run));
  }
  const ErrorSummary all = summarize(report.runs, [](const ValidationRun&) { return true; });
  report.mean_abs_error_pct = all.mean_abs_error_pct;
  report.max_abs_error_pct = all.max_abs_error_pct;
  report.chosen_on =
      summarize(report.runs, [](const ValidationRun& run) { return run.used_for_parameters; });
  report.held_out =
      summarize(report.runs, [](const ValidationRun& run) { return !run.used_for_parameters; });
  return report;
}

}  // namespace meshplan::planner
