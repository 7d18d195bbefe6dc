// meshplan sweep: the best plan of one model over clusters and GPU counts, with time and cost.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "commands.h"
#include "decimal_number.h"
#include "meshplan/errors.h"
#include "meshplan/output_set.h"
#include "meshplan/sweep.h"
#include "meshplan/sweep_report.h"

namespace meshplan::cli {

namespace {

constexpr int64_t kMaxGpus = 10'000'000;  // as plan's --gpus
constexpr size_t kMaxSweepCounts = 64;

struct SweepArguments {
  std::string model;
  std::string clusters;
  std::string gpus;
  double tokens = 1e12;
  std::optional<int64_t> global_batch, seq_len;
  std::string batch_scaling = "fixed";
  std::string framework = "megatron";
  std::optional<std::string> recompute_layers;  // "auto" only: Megatron's block method searched
  std::optional<std::string> recompute_group_layers;  // "auto" only: the uniform method's groups
  std::optional<std::string> recompute_modules;       // "auto" only: Megatron-Core's module lists
  std::vector<std::string> prices;
  std::string json_path, html_path;
};

// The comma-separated items of `text` (empty items kept, so "a,,b" can be refused).
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t end; (end = text.find(separator, start)) != std::string::npos; start = end + 1) {
    items.push_back(text.substr(start, end - start));
  }
  items.push_back(text.substr(start));
  return items;
}

// One GPU count of --gpus; throws InputError naming the flag.
int64_t parse_count(const std::string& item, const std::string& whole) {
  const DecimalInt count = parse_decimal_int64(item);
  if (count.error == DecimalError::kMalformed) {
    throw InputError(
        fmt::format("--gpus: expected A..B (powers of two) or a list A,B,... ({})", whole));
  }
  if (count.error == DecimalError::kOutOfRange || count.value < 1 || count.value > kMaxGpus) {
    throw InputError(fmt::format("--gpus: must be between 1 and {} ({})", kMaxGpus, item));
  }
  return count.value;
}

bool power_of_two(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// --gpus: "A..B" (every power of two from A to B, both powers of two) or "A,B,C" (sorted).
std::vector<int64_t> parse_gpu_counts(const std::string& text) {
  std::vector<int64_t> counts;
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    const int64_t lo = parse_count(text.substr(0, dots), text);
    const int64_t hi = parse_count(text.substr(dots + 2), text);
    if (lo > hi) {
      throw InputError(fmt::format("--gpus: reversed range, the first end is larger ({})", text));
    }
    if (!power_of_two(lo) || !power_of_two(hi)) {
      throw InputError(fmt::format("--gpus: range ends must be powers of two ({})", text));
    }
    for (int64_t n = lo; n <= hi; n *= 2) {
      counts.push_back(n);
    }
  } else {
    for (const std::string& item : split(text, ',')) {
      counts.push_back(parse_count(item, text));
    }
    std::sort(counts.begin(), counts.end());
    const auto repeated = std::adjacent_find(counts.begin(), counts.end());
    if (repeated != counts.end()) {
      throw InputError(fmt::format("--gpus: {} given twice ({})", *repeated, text));
    }
  }
  if (counts.size() > kMaxSweepCounts) {
    throw InputError(
        fmt::format("--gpus: more than {} GPU counts ({})", kMaxSweepCounts, counts.size()));
  }
  return counts;
}

// --price CLUSTER=USD_PER_GPU_HOUR, each naming a cluster of --cluster once.
std::map<std::string, double> parse_prices(const std::vector<std::string>& prices,
                                           const std::vector<std::string>& labels) {
  std::map<std::string, double> out;
  for (const std::string& text : prices) {
    const size_t equals = text.find('=');
    const DecimalReal price = equals == std::string::npos
                                  ? DecimalReal{0, DecimalError::kMalformed}
                                  : parse_decimal_real(std::string_view(text).substr(equals + 1));
    if (price.error == DecimalError::kMalformed) {
      throw InputError(fmt::format("--price: expected CLUSTER=USD_PER_GPU_HOUR ({})", text));
    }
    const double value = price.error == DecimalError::kOutOfRange ? HUGE_VAL : price.value;
    const std::string label = text.substr(0, equals);
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) {
      throw InputError(fmt::format("--price: cluster not in --cluster ({})", text));
    }
    if (!models::price_in_range(value)) {
      throw InputError(fmt::format("--price: must be between 0 and 1e6 USD ({})", text));
    }
    if (!out.emplace(label, value).second) {
      throw InputError(fmt::format("--price: {} priced twice ({})", label, text));
    }
  }
  return out;
}

// The clusters of --cluster, each with its price and where the price comes from.
std::vector<planner::SweepCluster> sweep_clusters(const SweepArguments& args) {
  const std::vector<std::string> labels = split(args.clusters, ',');
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].empty() || std::count(labels.begin(), labels.begin() + i, labels[i]) > 0) {
      throw InputError(fmt::format(
          "--cluster: {} ({})", labels[i].empty() ? "empty name" : "named twice", args.clusters));
    }
  }
  const std::map<std::string, double> prices = parse_prices(args.prices, labels);
  std::vector<planner::SweepCluster> clusters;
  for (const std::string& label : labels) {
    planner::SweepCluster c;
    c.cluster = models::load_cluster(label);
    c.label = label;
    const auto price = prices.find(label);
    c.price_per_gpu_hour =
        price != prices.end() ? std::optional<double>(price->second) : c.cluster.price_per_gpu_hour;
    c.price_source =
        price != prices.end() ? "--price" : fmt::format("{}: price_per_gpu_hour", label);
    clusters.push_back(std::move(c));
  }
  return clusters;
}

// The sweep request from the arguments; throws InputError naming the flag. `*note`: the
// training-length note of a Hugging Face config (models::load_training_model), or empty.
planner::SweepRequest sweep_request(const SweepArguments& args, std::string* note) {
  planner::SweepRequest request;
  if (args.seq_len && *args.seq_len < 1) {
    throw InputError(fmt::format("--seq-len: must be positive ({})", *args.seq_len));
  }
  request.model = models::load_training_model(args.model, args.seq_len, note);
  request.clusters = sweep_clusters(args);
  request.gpu_counts = parse_gpu_counts(args.gpus);
  if (!std::isfinite(args.tokens) || !(args.tokens >= 1) || args.tokens > 1e18) {
    throw InputError(fmt::format("--tokens: must be between 1 and 1e18 ({})", args.tokens));
  }
  request.num_tokens = args.tokens;
  if (args.batch_scaling != "fixed" && args.batch_scaling != "grow") {
    throw InputError(
        fmt::format("--batch-scaling: expected fixed or grow ({})", args.batch_scaling));
  }
  request.batch_scaling =
      args.batch_scaling == "fixed" ? planner::BatchScaling::kFixed : planner::BatchScaling::kGrow;
  if (args.global_batch) {
    if (request.batch_scaling == planner::BatchScaling::kGrow) {
      throw InputError("--global-batch: fixes the batch, --batch-scaling grow grows it: give one");
    }
    if (*args.global_batch < 1 || *args.global_batch > planner::kMaxGlobalBatch) {
      throw InputError(fmt::format("--global-batch: must be between 1 and {} ({})",
                                   planner::kMaxGlobalBatch, *args.global_batch));
    }
    request.global_batch = *args.global_batch;
  }
  request.options.framework = planner::parse_framework(args.framework, "--framework");
  if (args.recompute_layers) {  // as plan --recompute-layers auto, at every point
    if (*args.recompute_layers != "auto") {
      throw InputError(fmt::format(
          "--recompute-layers: expected auto (a fixed count is plan's, with --recompute full) "
          "({})",
          *args.recompute_layers));
    }
    planner::check_recompute_layers_request(request.options, "--recompute-layers");
    request.space_template.search_recompute_layers = true;
  }
  if (args.recompute_group_layers) {  // as plan --recompute-group-layers auto, at every point
    if (*args.recompute_group_layers != "auto") {
      throw InputError(fmt::format(
          "--recompute-group-layers: expected auto (a fixed count is plan's, with --recompute "
          "full) ({})",
          *args.recompute_group_layers));
    }
    if (args.recompute_layers) {
      throw InputError(
          "--recompute-group-layers: not with --recompute-layers (Megatron-LM's "
          "--recompute-method is uniform or block)");
    }
    planner::check_recompute_group_layers_request(request.options, "--recompute-group-layers");
    request.space_template.search_recompute_group_layers = true;
  }
  if (args.recompute_modules) {  // as plan --recompute-modules auto, at every point
    if (*args.recompute_modules != "auto") {
      throw InputError(fmt::format(
          "--recompute-modules: expected auto (a fixed list is plan's, with --recompute "
          "selective) ({})",
          *args.recompute_modules));
    }
    planner::check_recompute_modules_search_request(request.model, request.options,
                                                    "--recompute-modules");
    request.space_template.search_recompute_modules = true;
  }
  // As plan's default: Megatron-Core overlaps interleaved pipeline sends (overlap_p2p_comm).
  request.options.overlap_p2p_comm = request.options.framework == planner::Framework::kMegatron;
  return request;
}

// Points done / total and elapsed seconds on one updating stderr line, only on a terminal and
// after the first second (short sweeps and redirected output stay quiet), as plan does.
planner::SweepProgress sweep_progress() {
  if (::isatty(STDERR_FILENO) == 0) {
    return {};
  }
  const auto start = std::chrono::steady_clock::now();
  return [start, shown = false](int64_t done, int64_t total) mutable {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds < 1.0 && !shown) {
      return;
    }
    shown = true;
    fmt::print(stderr, "\r# sweep: {} of {} points searched ({:.1f} s){}", done, total, seconds,
               done == total ? "\n" : "");
    std::fflush(stderr);
  };
}

void run_sweep_command(const SweepArguments& args) {
  reports::OutputSet outputs;
  outputs.add("--json", args.json_path);
  outputs.add("--html", args.html_path);
  outputs.add_input("--model", args.model);
  for (const std::string& cluster : split(args.clusters, ',')) {
    outputs.add_input("--cluster", cluster);
  }
  std::string note;
  const planner::SweepRequest request = sweep_request(args, &note);
  planner::check_mtp_options(request.model, request.options, args.model + ": mtp_num_layers");
  if (!note.empty()) {  // every input checked: bad input still prints one line
    fmt::print(stderr, "meshplan: note: {}\n", note);
  }
  const auto start = std::chrono::steady_clock::now();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const planner::SweepResult result = planner::run_sweep(request, threads, sweep_progress());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t evaluated = 0;
  for (const planner::SweepPoint& point : result.points) {
    evaluated += point.num_evaluated;
  }
  const reports::Report report = reports::sweep_report(request, result);
  fmt::print("{}", report.table);
  fmt::print("# searched {} layouts at {} points in {:.3f} s on {} threads\n", evaluated,
             result.points.size(), seconds, threads);
  // As plan exits 2 with no feasible layout, a sweep with no feasible point fails and writes
  // neither output; the table above gives each point's rejection reasons.
  const bool any_feasible =
      std::any_of(result.points.begin(), result.points.end(),
                  [](const planner::SweepPoint& point) { return point.feasible; });
  if (!any_feasible) {
    throw InputError(fmt::format(
        "no feasible plan for {} at any of the {} points swept (--gpus {}); the table gives "
        "each point's reasons",
        request.model.name, result.points.size(), args.gpus));
  }
  if (outputs.wants("--json")) {
    outputs.set("--json", report.json.dump(2) + "\n");
  }
  if (outputs.wants("--html")) {
    outputs.set("--html", reports::sweep_html(request, result));
  }
  outputs.commit();
}

}  // namespace

void register_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArguments>();
  CLI::App* sweep =
      app.add_subcommand("sweep", "Best plan, time and cost to train over clusters and GPU counts");
  sweep->add_option("--model", args->model, "Model preset or config.json path")->required();
  sweep->add_option("--cluster", args->clusters, "Cluster presets or JSON paths, comma-separated")
      ->required();
  sweep
      ->add_option("--gpus", args->gpus,
                   "GPU counts: A..B (every power of two from A to B) or a list A,B,...")
      ->required();
  sweep->add_option("--tokens", args->tokens, "Token budget to train")->capture_default_str();
  sweep->add_option("--global-batch", args->global_batch,
                    "Sequences per step at every count (default: 2 x the smallest count)");
  sweep
      ->add_option("--batch-scaling", args->batch_scaling,
                   "fixed (one batch for all counts) | grow (2 x GPUs at each count)")
      ->capture_default_str();
  sweep->add_option("--seq-len", args->seq_len,
                    "Training sequence length (default: the model's; a Hugging Face config: "
                    "min(max_position_embeddings, 4096))");
  sweep
      ->add_option("--framework", args->framework,
                   "Software that runs the plan: megatron | deepspeed | fsdp | meshplan")
      ->capture_default_str();
  sweep->add_option("--recompute-layers", args->recompute_layers,
                    "auto: also try each full-recompute layout with the fewest layers per chunk "
                    "recomputed that fit (Megatron-LM's --recompute-method block), as plan does");
  sweep->add_option("--recompute-group-layers", args->recompute_group_layers,
                    "auto: also try each full-recompute layout that does not fit with the group "
                    "size needing the least memory (Megatron-LM's --recompute-method uniform), "
                    "as plan does");
  sweep->add_option("--recompute-modules", args->recompute_modules,
                    "auto: also try each selective layout that does not fit with every "
                    "Megatron-Core --recompute-modules list the model can take, as plan does");
  sweep->add_option("--price", args->prices,
                    "CLUSTER=USD_PER_GPU_HOUR, repeatable (default: the cluster's "
                    "price_per_gpu_hour)");
  sweep->add_option("--json", args->json_path, "Write the points as JSON");
  sweep->add_option("--html", args->html_path, "Write an offline HTML report with SVG charts");
  sweep->callback([args] { run_sweep_command(*args); });
}

}  // namespace meshplan::cli
