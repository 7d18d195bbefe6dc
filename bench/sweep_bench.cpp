// Prints the speed of meshplan sweep's searches: Llama 3 70B over 10 GPU counts (64 to 32,768)
// on the three GPU cluster presets, 30 searches, at one thread and at every hardware thread.
// Target (issue 14, Sec. 1): the whole sweep under 2 s.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "meshplan/models.h"
#include "meshplan/sweep.h"

namespace {

using namespace meshplan;

planner::SweepRequest llama3_70b_request() {
  planner::SweepRequest request;
  request.model = models::load_model("llama3-70b");
  for (const char* name : {"dgx-a100-80gb", "dgx-h100", "dgx-h200"}) {
    planner::SweepCluster cluster;
    cluster.cluster = models::load_cluster(name);
    cluster.label = name;
    cluster.price_per_gpu_hour = cluster.cluster.price_per_gpu_hour;
    request.clusters.push_back(cluster);
  }
  for (int64_t gpus = 64; gpus <= 32768; gpus *= 2) {
    request.gpu_counts.push_back(gpus);
  }
  request.num_tokens = 1e12;
  return request;
}

// One row: first run in the process (cold: it also generates the schedules) and best of 3.
void bench(const planner::SweepRequest& request, int threads) {
  double best_seconds = 1e30, cold_seconds = 0;
  int64_t layouts = 0, feasible_points = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    const planner::SweepResult result = planner::run_sweep(request, threads);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_seconds = std::min(best_seconds, seconds);
    cold_seconds = repeat == 0 ? seconds : cold_seconds;
    layouts = 0;
    feasible_points = 0;
    for (const planner::SweepPoint& point : result.points) {
      layouts += point.num_evaluated;
      feasible_points += point.feasible ? 1 : 0;
    }
  }
  fmt::print(" {:>12} {:>8} {:>7} {:>8} {:>9} {:>8} {:>9.3f} {:>9.3f}\n", request.model.name,
             request.clusters.size(), request.gpu_counts.size(), feasible_points, layouts, threads,
             cold_seconds, best_seconds);
}

}  // namespace

int main() {
  const planner::SweepRequest request = llama3_70b_request();
  fmt::print("# meshplan sweep: cold (first in the process) and best of 3, fixed batch 128\n");
  fmt::print("#{:>12} {:>8} {:>7} {:>8} {:>9} {:>8} {:>9} {:>9}\n", "model", "clusters", "counts",
             "feasible", "layouts", "threads", "cold", "warm");
  fmt::print("#{:>12} {:>8} {:>7} {:>8} {:>9} {:>8} {:>9} {:>9}\n", "", "", "", "(points)", "", "",
             "(s)", "(s)");
  bench(request, 1);
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (hardware > 1) {
    bench(request, hardware);
  }
  return 0;
}
