#pragma once
// Capacity sweep: the best plan of one model on several clusters and GPU counts, with the time
// and cost to train a token budget. Every point is one search_layouts call (the same search as
// `meshplan plan`); the figures derived from it are defined here, once.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/search.h"

namespace meshplan::planner {

/// One cluster of a sweep and what a GPU-hour on it costs.
struct SweepCluster {
  models::ClusterConfig cluster;
  std::string label;  // as the user named it (--cluster)
  // USD; none when --price gives none and the cluster states none (price_per_gpu_hour null).
  std::optional<double> price_per_gpu_hour;
  std::string price_source;  // "--price" or "<label>: price_per_gpu_hour"
};

/// How the global batch (sequences per step) is chosen at each GPU count.
enum class BatchScaling {
  kFixed,  // the same batch at every count, so step times compare (strong scaling)
  kGrow,   // 2 x GPUs at each count, plan's default (weak scaling)
};

struct SweepRequest {
  models::TransformerConfig model;
  std::vector<SweepCluster> clusters;
  std::vector<int64_t> gpu_counts;  // increasing
  double num_tokens = 0;            // token budget to train
  BatchScaling batch_scaling = BatchScaling::kFixed;
  int64_t global_batch = 0;  // with kFixed; 0 means sweep_default_batch(gpu_counts)
  PlanOptions options;
  SearchSpace space_template;  // fixed fields other than num_gpus and global_batch
};

/// One (cluster, GPU count). A point without a feasible plan has feasible = false and the
/// search's rejection counts in `reason`; its derived figures are 0.
struct SweepPoint {
  size_t cluster_index = 0;
  int64_t num_gpus = 0;
  int64_t global_batch = 0;  // sequences per step
  bool feasible = false;
  std::string reason;
  PlanEstimate best;
  int64_t num_evaluated = 0;
  double time_to_train_s = 0;     // steps x step time
  double gpu_hours = 0;           // gpus x time_to_train_s / 3600
  std::optional<double> cost;     // USD: gpu_hours x price_per_gpu_hour; none without a price
  double scaling_efficiency = 0;  // against the baseline point of the same cluster
  int64_t baseline_gpus = 0;      // smallest feasible GPU count of that cluster
  bool pareto = false;            // priced, and no other priced point is both faster and cheaper
};

struct SweepResult {
  std::vector<SweepPoint> points;  // cluster-major, GPU counts increasing
};

/// Called after each point with (points done, points in the sweep); from any thread, one call
/// at a time.
using SweepProgress = std::function<void(int64_t done, int64_t total)>;

/// The fixed default batch: 2 sequences per GPU at the smallest count, what `plan` picks there.
int64_t sweep_default_batch(const std::vector<int64_t>& gpu_counts);

/// Optimizer steps to train `num_tokens`: num_tokens / (global_batch x seq_length) (fractional:
/// the last step is counted pro rata).
double sweep_num_steps(double num_tokens, int64_t global_batch, int64_t seq_length);

/// Strong-scaling efficiency: (baseline_gpus x baseline_step_s) / (gpus x step_s), 1 at the
/// baseline; with a growing batch, per-GPU throughput against the baseline's.
double scaling_efficiency(int64_t baseline_gpus, double baseline_seconds_per_token, int64_t gpus,
                          double seconds_per_token);

/// Marks `pareto` on every feasible priced point no other feasible priced point dominates in
/// (time_to_train_s, cost): dominated means another is <= in both and < in one. Points without
/// a cost (no price) are left off the front.
void mark_pareto_front(std::vector<SweepPoint>& points);

/// Runs every (cluster, count) search, on up to `num_threads` threads (the points are
/// independent), and derives the figures above. Throws InputError for a bad request (no
/// clusters or counts, a count < 1, num_tokens not positive, a fixed batch out of range).
SweepResult run_sweep(const SweepRequest& request, int num_threads,
                      const SweepProgress& progress = {});

}  // namespace meshplan::planner
