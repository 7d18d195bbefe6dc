// Capacity sweep: one search per (cluster, GPU count), then time, cost, scaling and the Pareto
// front. The searches are independent and run on a small pool of threads.

#include "meshplan/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

constexpr double kSecondsPerHour = 3600.0;

// Throws InputError naming the request field that is out of range.
void check_request(const SweepRequest& request) {
  if (request.clusters.empty()) {
    throw InputError("clusters: none given");
  }
  if (request.gpu_counts.empty()) {
    throw InputError("gpu_counts: none given");
  }
  for (size_t i = 0; i < request.gpu_counts.size(); ++i) {
    if (request.gpu_counts[i] < 1 ||
        (i > 0 && request.gpu_counts[i] <= request.gpu_counts[i - 1])) {
      throw InputError(
          fmt::format("gpu_counts: must be positive and increasing ({})", request.gpu_counts[i]));
    }
  }
  if (!(request.num_tokens > 0) || !std::isfinite(request.num_tokens)) {
    throw InputError(fmt::format("num_tokens: must be positive ({})", request.num_tokens));
  }
}

// The search of one point; an empty search (no feasible layout) is a point with its reason.
SweepPoint search_point(const SweepRequest& request, size_t cluster_index, int64_t num_gpus,
                        int64_t global_batch) {
  SweepPoint point;
  point.cluster_index = cluster_index;
  point.num_gpus = num_gpus;
  point.global_batch = global_batch;
  SearchSpace space = request.space_template;
  space.num_gpus = num_gpus;
  space.global_batch = global_batch;
  SearchResult result;
  try {
    result = search_layouts(request.model, request.clusters[cluster_index].cluster, space,
                            request.options, Objective::kTime, 1);
  } catch (const InputError& error) {
    // A fixed field that does not fit this count (e.g. --tp 8 on 4 GPUs) leaves this point
    // without a plan; the sweep goes on with the others.
    point.reason = error.what();
    return point;
  }
  point.num_evaluated = result.num_evaluated;
  if (result.best.empty()) {
    for (const auto& [code, count] : result.rejections) {
      point.reason += fmt::format("{}{} x{} ({})", point.reason.empty() ? "" : "; ", code, count,
                                  result.example_reason.at(code));
    }
    if (point.reason.empty()) {
      point.reason = "no layout to search";
    }
    return point;
  }
  point.feasible = true;
  point.best = std::move(result.best.front());
  return point;
}

// Runs work(k) for every k in [0, count) on up to num_threads threads (the caller's included),
// and finished(done) after each, one call at a time (under a lock), with done counting the
// items finished. The first exception work throws is rethrown once every thread has stopped.
void for_each_parallel(size_t count, int num_threads, const std::function<void(size_t)>& work,
                       const std::function<void(int64_t)>& finished) {
  std::atomic<size_t> next{0};
  std::mutex mutex;  // guards done and failure, and serialises finished()
  int64_t done = 0;
  std::exception_ptr failure;
  const auto run = [&] {
    for (size_t k = next++; k < count; k = next++) {
      try {
        work(k);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        failure = failure ? failure : std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(mutex);
      finished(++done);
    }
  };
  std::vector<std::thread> threads;
  const int extra = std::max(0, std::min<int>(num_threads, static_cast<int>(count)) - 1);
  for (int t = 0; t < extra; ++t) {
    threads.emplace_back(run);
  }
  run();
  for (std::thread& thread : threads) {
    thread.join();
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

// Time, GPU-hours and cost of each feasible point, and its scaling against its cluster's
// smallest feasible count.
void derive_figures(const SweepRequest& request, std::vector<SweepPoint>& points) {
  std::vector<const SweepPoint*> baseline(request.clusters.size(), nullptr);
  const auto seconds_per_token = [&](const SweepPoint& p) {
    return p.best.step_time_s / static_cast<double>(p.global_batch * request.model.seq_length);
  };
  for (SweepPoint& point : points) {
    if (!point.feasible) {
      continue;
    }
    const SweepCluster& cluster = request.clusters[point.cluster_index];
    point.time_to_train_s =
        sweep_num_steps(request.num_tokens, point.global_batch, request.model.seq_length) *
        point.best.step_time_s;
    point.gpu_hours = static_cast<double>(point.num_gpus) * point.time_to_train_s / kSecondsPerHour;
    if (cluster.price_per_gpu_hour) {
      point.cost = point.gpu_hours * *cluster.price_per_gpu_hour;
    }
    const SweepPoint*& base = baseline[point.cluster_index];
    if (base == nullptr) {
      base = &point;
    }
    point.baseline_gpus = base->num_gpus;
    point.scaling_efficiency = scaling_efficiency(base->num_gpus, seconds_per_token(*base),
                                                  point.num_gpus, seconds_per_token(point));
  }
  mark_pareto_front(points);
}

}  // namespace

int64_t sweep_default_batch(const std::vector<int64_t>& gpu_counts) {
  return 2 * *std::min_element(gpu_counts.begin(), gpu_counts.end());
}

double sweep_num_steps(double num_tokens, int64_t global_batch, int64_t seq_length) {
  return num_tokens / (static_cast<double>(global_batch) * static_cast<double>(seq_length));
}

double scaling_efficiency(int64_t baseline_gpus, double baseline_seconds_per_token, int64_t gpus,
                          double seconds_per_token) {
  return (static_cast<double>(baseline_gpus) * baseline_seconds_per_token) /
         (static_cast<double>(gpus) * seconds_per_token);
}

void mark_pareto_front(std::vector<SweepPoint>& points) {
  for (SweepPoint& point : points) {
    point.pareto = false;
    // A point without a price has no cost to compare: it is neither on the front nor beats one.
    if (!point.feasible || !point.cost) {
      continue;
    }
    const bool dominated = std::any_of(points.begin(), points.end(), [&](const SweepPoint& o) {
      return o.feasible && o.cost && o.time_to_train_s <= point.time_to_train_s &&
             *o.cost <= *point.cost &&
             (o.time_to_train_s < point.time_to_train_s || *o.cost < *point.cost);
    });
    point.pareto = !dominated;
  }
}

SweepResult run_sweep(const SweepRequest& request, int num_threads, const SweepProgress& progress) {
  check_request(request);
  const int64_t fixed_batch =
      request.global_batch > 0 ? request.global_batch : sweep_default_batch(request.gpu_counts);
  SweepResult result;
  for (size_t c = 0; c < request.clusters.size(); ++c) {
    for (int64_t gpus : request.gpu_counts) {
      SweepPoint point;
      point.cluster_index = c;
      point.num_gpus = gpus;
      point.global_batch = request.batch_scaling == BatchScaling::kFixed ? fixed_batch : 2 * gpus;
      result.points.push_back(point);
    }
  }
  // Largest searches first, so one big point does not finish last on a lone thread.
  std::vector<size_t> order(result.points.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return result.points[a].num_gpus > result.points[b].num_gpus;
  });
  const int64_t total = static_cast<int64_t>(order.size());
  for_each_parallel(
      order.size(), num_threads,
      [&](size_t k) {
        SweepPoint& point = result.points[order[k]];
        point = search_point(request, point.cluster_index, point.num_gpus, point.global_batch);
      },
      [&](int64_t done) {
        if (progress) {
          progress(done, total);
        }
      });
  derive_figures(request, result.points);
  return result;
}

}  // namespace meshplan::planner
