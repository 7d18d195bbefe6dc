// meshplan plan | explain | validate.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/emit.h"
#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "meshplan/output_set.h"
#include "meshplan/plan_file.h"
#include "meshplan/plan_report.h"
#include "meshplan/search.h"
#include "meshplan/simulator.h"
#include "meshplan/units.h"
#include "meshplan/validation.h"
#include "plan_arguments.h"

namespace meshplan::cli {

namespace {

// Re-ranks the best `count` analytic plans by simulated step time (meshplan simulate's
// discrete-event replay) and prints both times; the plan list is reordered in place.
void refine_by_simulation(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, int64_t num_gpus,
                          const planner::PlanOptions& options, int64_t count,
                          planner::SearchResult& result, std::FILE* out) {
  const size_t refined = std::min<size_t>(result.best.size(), static_cast<size_t>(count));
  std::vector<std::pair<double, size_t>> order;  // (simulated step time, analytic rank)
  for (size_t i = 0; i < refined; ++i) {
    const planner::Plan plan{model, cluster, num_gpus, result.best[i].layout, options};
    simulator::SimulationOptions simulation;
    simulation.bucket_bytes = planner::dp_bucket_bytes(cluster, plan.layout, options);
    const simulator::SimulationResult simulated =
        simulator::simulate_plan(plan, simulation, "--refine");
    order.emplace_back(simulated.step_time_s, i);
  }
  std::stable_sort(order.begin(), order.end());
  std::vector<reports::RefinedPlan> rows;
  std::vector<planner::PlanEstimate> reordered;
  for (const auto& [simulated_seconds, analytic_index] : order) {
    const planner::PlanEstimate& estimate = result.best[analytic_index];
    rows.push_back({analytic_index + 1, simulated_seconds, estimate.step_time_s, estimate.layout});
    reordered.push_back(estimate);
  }
  fmt::print(out, "{}", reports::format_refined_table(rows));
  std::copy(reordered.begin(), reordered.end(), result.best.begin());
}

// Prints the search's progress on stderr, one updating line, when stderr is a terminal and the
// search has run for a second (short searches and redirected output stay quiet).
planner::SearchProgress terminal_progress() {
  if (::isatty(STDERR_FILENO) == 0) {
    return {};
  }
  const auto start = std::chrono::steady_clock::now();
  return [start, shown = false](int64_t evaluated, int64_t total) mutable {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds < 1.0 && !shown) {
      return;
    }
    shown = true;
    fmt::print(stderr, "\r# searching: {} of {} layouts costed ({:.0f}%, {:.0f} s){}", evaluated,
               total, 100.0 * static_cast<double>(evaluated) / static_cast<double>(total), seconds,
               evaluated == total ? "\n" : "");
    std::fflush(stderr);
  };
}

// How many ranked plans `plan --emit` may try (emit_best_expressible) before it gives up.
constexpr int64_t kEmitCandidates = 1000;

// Whether --emit picks the best plan its target can express (no --save-plan-rank given) rather
// than exactly the rank --save-plan-rank names.
bool steer_emit(const PlanArguments& args, const std::optional<reports::EmitTarget>& emit) {
  return emit.has_value() && args.given.count("--save-plan-rank") == 0;
}

// Throws InputError listing every rejection reason when the search found no feasible layout.
void require_some_feasible(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, int64_t num_gpus,
                           const planner::SearchResult& result) {
  if (!result.best.empty()) {
    return;
  }
  std::string reasons;
  for (const auto& [code, count] : result.rejections) {
    reasons += fmt::format("{}{} x{} ({})", reasons.empty() ? "" : "; ", code, count,
                           result.example_reason.at(code));
  }
  throw InputError(fmt::format("no feasible layout for {} on {} x {}: {}", model.name, num_gpus,
                               cluster.name, reasons));
}

// meshplan plan: search, print the header, rejections and ranked table, write the outputs.
void run_plan(const PlanArguments& args) {
  reports::OutputSet outputs;
  outputs.add("--json", args.json_path);
  outputs.add("--save-plan", args.save_plan_path);
  outputs.add("--emit-out", args.emit_out);
  outputs.add_input("--model", args.model);
  outputs.add_input("--cluster", args.cluster);
  const std::optional<reports::EmitTarget> emit = emit_target(args);
  // --emit without --emit-out: the launch config alone on stdout, the tables on stderr.
  std::FILE* const table_out = emit && args.emit_out.empty() ? stderr : stdout;
  std::string seq_note;
  const models::TransformerConfig model = plan_model(args, &seq_note);
  const models::ClusterConfig cluster = models::load_cluster(args.cluster);
  planner::SearchSpace space = search_space(args, cluster);
  fix_stage_layers(args, model, space);
  const planner::PlanOptions options = plan_options(args, cluster);
  check_plan_arguments(args, model, cluster, space, options);
  planner::check_norm_kernel_model(model, options, "--norm-kernel");
  planner::check_attention_sinks_kernel(model, options, "--flash-attention");
  planner::check_mtp_options(model, options, args.model + ": mtp_num_layers");

  if (!seq_note.empty()) {
    fmt::print(stderr, "meshplan: note: {}\n", seq_note);
  }
  const auto start = std::chrono::steady_clock::now();
  planner::SearchResult result = planner::search_layouts(
      model, cluster, space, options,
      args.objective == "time" ? planner::Objective::kTime : planner::Objective::kMemory,
      std::max({args.top, args.refine.value_or(0), args.save_plan_rank,
                steer_emit(args, emit) ? kEmitCandidates : int64_t{0}}),
      terminal_progress());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  fmt::print(table_out, "{}",
             reports::format_plan_header(model, cluster, args.gpus, space.global_batch,
                                         options.framework));
  fmt::print(table_out, "{}", reports::format_plan_options(options, space));
  fmt::print(table_out, "# searched {} layouts in {:.3f} s\n#\n", result.num_evaluated, seconds);
  if (args.explain_rejections || result.best.empty()) {
    fmt::print(table_out, "{}#\n", reports::format_rejections(result));
  }
  require_some_feasible(model, cluster, args.gpus, result);
  if (args.refine) {
    refine_by_simulation(model, cluster, args.gpus, options, *args.refine, result, table_out);
  }
  if (static_cast<size_t>(args.save_plan_rank) > result.best.size()) {
    throw InputError(fmt::format("--save-plan-rank: only {} feasible plans ({})",
                                 result.best.size(), args.save_plan_rank));
  }
  // The saved plan states the bucket and the vocabulary divisor it was costed with (the
  // framework's defaults when --bucket-mb and --make-vocab-size-divisible-by are not given), so
  // simulate, execute and --emit read those values.
  const auto plan_of = [&](const planner::PlanEstimate& estimate) {
    planner::PlanOptions saved_options = options;
    saved_options.bucket_bytes = planner::dp_bucket_bytes(cluster, estimate.layout, options);
    saved_options.make_vocab_size_divisible_by = planner::vocab_size_divisible_by(options);
    return planner::Plan{model, cluster, args.gpus, estimate.layout, saved_options};
  };
  // What --save-plan writes and --emit emits: rank --save-plan-rank (default the best); with
  // --emit and no --save-plan-rank, the best-ranked plan the target can express.
  size_t saved_index = static_cast<size_t>(args.save_plan_rank - 1);
  std::string emitted, emit_note, choice_note, best_refusal;
  if (emit) {
    std::vector<planner::Plan> candidates;
    const size_t num_candidates = steer_emit(args, emit) ? result.best.size() : 1;
    for (size_t i = 0; i < num_candidates; ++i) {
      candidates.push_back(plan_of(result.best[saved_index + i]));
    }
    const reports::EmitChoice choice =
        reports::emit_best_expressible(candidates, *emit, args.save_plan_path);
    saved_index += choice.index;
    emitted = choice.config;
    best_refusal = choice.best_refusal;
    choice_note = reports::format_emit_choice(
        *emit, choice, candidates[choice.index], result.best[saved_index].step_time_s,
        result.best.front().step_time_s, !args.save_plan_path.empty());
    if (*emit == reports::EmitTarget::kDeepSpeed) {
      emit_note = reports::deepspeed_launch_note(candidates[choice.index]);
    }
    if (outputs.wants("--emit-out")) {
      outputs.set("--emit-out", emitted);
    }
  }
  const planner::PlanEstimate saved = result.best[saved_index];
  result.best.resize(std::min<size_t>(result.best.size(), static_cast<size_t>(args.top)));
  reports::Report report = reports::plan_report(model, cluster, args.gpus, result, options);
  fmt::print(table_out, "{}{}", report.table, choice_note);
  if (emit) {
    report.json["emit"] = {{"target", reports::to_string(*emit)},
                           {"rank", saved_index + 1},
                           {"best_refusal", best_refusal.empty() ? nlohmann::json(nullptr)
                                                                 : nlohmann::json(best_refusal)}};
  }
  if (outputs.wants("--json")) {
    outputs.set("--json", report.json.dump(2) + "\n");
  }
  if (outputs.wants("--save-plan")) {
    outputs.set(
        "--save-plan",
        planner::plan_to_json(plan_of(saved), reports::estimate_json(saved)).dump(2) + "\n");
  }
  outputs.commit();
  if (outputs.wants("--save-plan")) {
    fmt::print(table_out, "# plan written to {}{}\n", args.save_plan_path,
               saved_index > 0 ? fmt::format(" (rank {})", saved_index + 1) : "");
  }
  if (emit) {
    if (args.emit_out.empty()) {
      fmt::print("{}", emitted);
    } else {
      fmt::print("# {} launch config written to {}\n", reports::to_string(*emit), args.emit_out);
    }
    fmt::print(table_out, "{}", emit_note);
  }
}

// validate --plans DIR: each predicted run's plan file as DIR/<id>.json, committed with the
// other outputs (nothing is written when one cannot be). An id that is not a plain file name
// ([A-Za-z0-9._-], not "." or "..") is refused rather than turned into a path.
void add_validation_plans(const planner::ValidationReport& report, const std::string& dir,
                          reports::OutputSet& outputs) {
  for (const planner::ValidationRun& run : report.runs) {
    const bool plain = !run.id.empty() && run.id != "." && run.id != ".." &&
                       std::all_of(run.id.begin(), run.id.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' ||
                                c == '_' || c == '-';
                       });
    if (!plain) {
      throw InputError(fmt::format(
          "--plans: run id \"{}\" is not a file name (letters, digits, '.', '_', '-')", run.id));
    }
  }
  // One level, as every other output needs its directory to exist: a typo in a parent is not
  // made into a tree.
  std::error_code error;
  std::filesystem::create_directory(dir, error);
  if (error || !std::filesystem::is_directory(dir)) {
    throw RuntimeError(fmt::format("--plans: {}: cannot create directory", dir));
  }
  for (const planner::ValidationRun& run : report.runs) {
    if (!run.plan) {
      continue;
    }
    const std::string flag = fmt::format("--plans ({})", run.id);
    outputs.add(flag, (std::filesystem::path(dir) / (run.id + ".json")).string());
    outputs.set(
        flag,
        planner::plan_to_json(*run.plan, reports::estimate_json(*run.predicted)).dump(2) + "\n");
  }
}

}  // namespace

void require_feasible(const planner::Plan& plan, const planner::PlanEstimate& estimate,
                      const std::string& plan_path, bool allow_infeasible) {
  if (estimate.feasible || allow_infeasible) {
    return;
  }
  if (estimate.rejection_code == "memory") {
    const double gib = static_cast<double>(kBytesPerGiB);
    throw InputError(fmt::format(
        "{}: does not fit: peak memory {:.1f} GiB per GPU exceeds the {:.1f} GiB of each {} "
        "(--allow-infeasible to go on)",
        plan_path, static_cast<double>(estimate.peak_memory_bytes) / gib,
        static_cast<double>(plan.cluster.gpu.hbm_bytes) / gib, plan.cluster.gpu.name));
  }
  throw InputError(fmt::format("{}: infeasible: {} (--allow-infeasible to go on)", plan_path,
                               estimate.rejection_reason));
}

void register_plan_commands(CLI::App& app) {
  auto args = std::make_shared<PlanArguments>();
  CLI::App* plan = app.add_subcommand("plan", "Search every dp x tp x pp layout and rank them");
  add_plan_flags(*plan, *args);
  plan->callback([args, plan] {
    for (const CLI::Option* option : plan->get_options()) {
      if (option->count() > 0) {
        args->given.insert(option->get_name());
      }
    }
    run_plan(*args);
  });

  auto plan_path = std::make_shared<std::string>();
  auto allow_infeasible = std::make_shared<bool>(false);
  CLI::App* explain = app.add_subcommand("explain", "Explain a plan file: memory, times, bytes");
  explain->add_option("PLAN.json", *plan_path, "Plan file")->required();
  explain->add_flag("--allow-infeasible", *allow_infeasible,
                    "Explain a plan that does not fit its GPUs' memory");
  explain->callback([plan_path, allow_infeasible] {
    const planner::Plan plan = planner::read_plan_file(*plan_path);
    const planner::PlanEstimate estimate =
        planner::estimate_plan(plan.model, plan.cluster, plan.layout, plan.options);
    require_feasible(plan, estimate, *plan_path, *allow_infeasible);
    fmt::print("{}", reports::format_explain(plan, estimate));
    if (!estimate.feasible) {
      fmt::print("# infeasible: {}\n", estimate.rejection_reason);
    }
  });

  auto runs_path = std::make_shared<std::string>();
  auto validate_json = std::make_shared<std::string>();
  CLI::App* validate = app.add_subcommand("validate", "Predict published training runs");
  validate->add_option("RUNS.json", *runs_path, "Published runs file")->required();
  auto plans_dir = std::make_shared<std::string>();
  validate->add_option("--json", *validate_json, "Write the predictions as JSON");
  validate->add_option("--plans", *plans_dir,
                       "Write each predicted run's plan file as DIR/<id>.json (for explain, "
                       "simulate)");
  validate->callback([runs_path, validate_json, plans_dir] {
    reports::OutputSet outputs;
    outputs.add("--json", *validate_json);
    outputs.add_input("the runs file", *runs_path);
    const planner::ValidationReport report =
        planner::validate_runs(read_json_file(*runs_path), *runs_path);
    const reports::Report validation = reports::validation_report(report);
    fmt::print("{}", validation.table);
    if (outputs.wants("--json")) {
      outputs.set("--json", validation.json.dump(2) + "\n");
    }
    if (!plans_dir->empty()) {
      add_validation_plans(report, *plans_dir, outputs);
    }
    outputs.commit();
    // A run that cannot be predicted is a failed validation (exit 1), not bad input (exit 2):
    // the table and --json above still hold every run, the failed ones with their reason.
    if (report.num_not_predicted > 0) {
      throw RuntimeError(fmt::format("{}: {} of {} runs not predicted (validation failed)",
                                     *runs_path, report.num_not_predicted, report.runs.size()));
    }
    // A run that ran but does not fit meshplan's memory estimate fails the memory model.
    if (report.num_memory_misses > 0) {
      throw RuntimeError(fmt::format(
          "{}: {} of {} runs over meshplan's memory estimate though they ran (validation failed)",
          *runs_path, report.num_memory_misses, report.runs.size()));
    }
  });
}

}  // namespace meshplan::cli