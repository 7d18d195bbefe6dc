// run_sweep (planner/sweep.cpp): each point is search_layouts' best at the sweep's batch; time to
// train, GPU-hours, cost and scaling computed here by hand from the point's step time; the
// Pareto front of a small hand-made set.

#include "meshplan/sweep.h"

#include <doctest/doctest.h>

#include <vector>

#include "meshplan/models.h"

namespace meshplan::planner {
namespace {

// llama2-7b (seq 4096) on A100s at the preset's 5.12 USD/GPU-h and on H100s at 2 USD/GPU-h.
SweepRequest llama_request() {
  SweepRequest request;
  request.model = models::load_model("llama2-7b");
  SweepCluster a100;
  a100.cluster = models::load_cluster("dgx-a100-80gb");
  a100.label = "dgx-a100-80gb";
  a100.price_per_gpu_hour = a100.cluster.price_per_gpu_hour;
  SweepCluster h100;
  h100.cluster = models::load_cluster("dgx-h100");
  h100.label = "dgx-h100";
  h100.price_per_gpu_hour = 2.0;
  request.clusters = {a100, h100};
  request.gpu_counts = {8, 16, 32};
  request.num_tokens = 1e9;
  return request;
}

TEST_CASE("sweep: every point is the plan search's best at the fixed batch") {
  const SweepRequest request = llama_request();
  const SweepResult result = run_sweep(request, 2);
  REQUIRE(result.points.size() == 6);                    // 2 clusters x 3 counts, cluster-major
  CHECK(sweep_default_batch(request.gpu_counts) == 16);  // 2 sequences x 8 GPUs
  for (size_t i = 0; i < result.points.size(); ++i) {
    const SweepPoint& point = result.points[i];
    CHECK(point.cluster_index == i / 3);
    CHECK(point.num_gpus == request.gpu_counts[i % 3]);
    CHECK(point.global_batch == 16);
    REQUIRE(point.feasible);
    SearchSpace space;
    space.num_gpus = point.num_gpus;
    space.global_batch = 16;
    const SearchResult plan =
        search_layouts(request.model, request.clusters[point.cluster_index].cluster, space, {},
                       Objective::kTime, 1);
    REQUIRE(plan.best.size() == 1);
    CHECK(point.best.layout == plan.best[0].layout);
    CHECK(point.best.step_time_s == plan.best[0].step_time_s);  // the same computation
  }
}

TEST_CASE("sweep: --recompute-layers auto searches the block method at every point, as plan") {
  SweepRequest request = llama_request();
  request.clusters.resize(1);  // dgx-a100-80gb at 8, 16 and 32 GPUs
  request.space_template.search_recompute_layers = true;
  const SweepResult result = run_sweep(request, 2);
  REQUIRE(result.points.size() == 3);
  for (const SweepPoint& point : result.points) {
    REQUIRE(point.feasible);
    SearchSpace space;
    space.num_gpus = point.num_gpus;
    space.global_batch = point.global_batch;
    space.search_recompute_layers = true;
    const SearchResult plan =
        search_layouts(request.model, request.clusters[0].cluster, space, {}, Objective::kTime, 1);
    REQUIRE(plan.best.size() == 1);
    CHECK(point.best.layout == plan.best[0].layout);
    CHECK(point.num_evaluated == plan.num_evaluated);  // the bisection's layouts counted too
    space.search_recompute_layers = false;
    CHECK(point.num_evaluated >
          search_layouts(request.model, request.clusters[0].cluster, space, {}, Objective::kTime, 1)
              .num_evaluated);
  }
}

TEST_CASE("sweep: time to train, GPU-hours, cost and scaling efficiency by hand") {
  const SweepRequest request = llama_request();
  const SweepResult result = run_sweep(request, 1);
  // 1e9 tokens / (16 sequences x 4096 tokens) = 1e9 / 65536 = 15258.7890625 steps.
  const double steps = 15258.7890625;
  CHECK(sweep_num_steps(1e9, 16, 4096) == steps);
  for (const SweepPoint& point : result.points) {
    CAPTURE(point.num_gpus);
    const double price = point.cluster_index == 0 ? 5.12 : 2.0;  // preset, then as given
    const double seconds = steps * point.best.step_time_s;
    // Rounding only: the same products in another order (relative 1e-12).
    CHECK(point.time_to_train_s == doctest::Approx(seconds).epsilon(1e-12).scale(0));
    CHECK(point.gpu_hours == doctest::Approx(static_cast<double>(point.num_gpus) * seconds / 3600)
                                 .epsilon(1e-12)
                                 .scale(0));
    CHECK(point.cost ==
          doctest::Approx(static_cast<double>(point.num_gpus) * seconds / 3600 * price)
              .epsilon(1e-12)
              .scale(0));
    // Against the 8-GPU point of the same cluster: (8 x t8) / (n x tn), same batch.
    const SweepPoint& base = result.points[point.cluster_index * 3];
    CHECK(point.baseline_gpus == 8);
    CHECK(point.scaling_efficiency ==
          doctest::Approx((8 * base.best.step_time_s) /
                          (static_cast<double>(point.num_gpus) * point.best.step_time_s))
              .epsilon(1e-12)
              .scale(0));
  }
  CHECK(result.points[0].scaling_efficiency == 1.0);
}

TEST_CASE("sweep: a growing batch is 2 per GPU; the thread count changes nothing") {
  SweepRequest request = llama_request();
  request.batch_scaling = BatchScaling::kGrow;
  const SweepResult one = run_sweep(request, 1);
  const SweepResult four = run_sweep(request, 4);
  REQUIRE(one.points.size() == four.points.size());
  for (size_t i = 0; i < one.points.size(); ++i) {
    CHECK(one.points[i].global_batch == 2 * one.points[i].num_gpus);
    CHECK(one.points[i].best.layout == four.points[i].best.layout);
    CHECK(one.points[i].cost == four.points[i].cost);
  }
}

TEST_CASE("sweep: a point without a plan carries the search's reasons") {
  SweepRequest request = llama_request();
  request.gpu_counts = {1, 8};
  const SweepResult result = run_sweep(request, 2);
  // 6.7e9 parameters x 16 bytes of model states (ZeRO Fig. 1, K = 12) = 108 GB > 80 GiB.
  const SweepPoint& one_gpu = result.points[0];
  CHECK_FALSE(one_gpu.feasible);
  CHECK(one_gpu.reason.rfind("memory x", 0) == 0);
  CHECK_FALSE(one_gpu.cost.has_value());
  CHECK_FALSE(one_gpu.pareto);
  CHECK(result.points[1].feasible);
  CHECK(result.points[1].baseline_gpus == 8);  // the smallest count with a plan
  CHECK(result.points[1].scaling_efficiency == 1.0);
}

TEST_CASE("Pareto front by hand: dominated means another is no worse in both, better in one") {
  // (time s, cost USD): A (10, 100), B (20, 50), C (15, 120) dominated by A, D (20, 60) and
  // E (30, 50) dominated by B, F (5, 500) alone fastest, G (10, 100) ties A (neither dominates),
  // H infeasible (never on the front, dominates nothing).
  const std::vector<std::pair<double, double>> figures = {{10, 100}, {20, 50}, {15, 120}, {20, 60},
                                                          {30, 50},  {5, 500}, {10, 100}, {1, 1}};
  std::vector<SweepPoint> points(figures.size());
  for (size_t i = 0; i < points.size(); ++i) {
    points[i].feasible = i != 7;
    points[i].time_to_train_s = figures[i].first;
    points[i].cost = figures[i].second;
  }
  // The front mark_pareto_front leaves, point by point.
  const auto front = [&points] {
    mark_pareto_front(points);
    std::vector<bool> marks;
    for (const SweepPoint& point : points) {
      marks.push_back(point.pareto);
    }
    return marks;
  };
  CHECK(front() == std::vector<bool>{true, true, false, false, false, true, true, false});
  // Without a price a point has no cost: it is off the front and dominates nothing, however
  // fast. Unpricing F (5 days, the fastest) leaves A, B and G; unpricing B too puts D and E,
  // which only B dominated, on the front.
  points[5].cost.reset();
  CHECK(front() == std::vector<bool>{true, true, false, false, false, false, true, false});
  points[1].cost.reset();
  CHECK(front() == std::vector<bool>{true, false, false, true, true, false, true, false});
}

TEST_CASE("sweep errors name the request field") {
  SweepRequest request = llama_request();
  request.gpu_counts = {16, 8};
  CHECK_THROWS_WITH_AS(run_sweep(request, 1), "gpu_counts: must be positive and increasing (8)",
                       InputError);
  request = llama_request();
  request.num_tokens = 0;
  CHECK_THROWS_WITH_AS(run_sweep(request, 1), "num_tokens: must be positive (0)", InputError);
  request = llama_request();
  request.clusters.clear();
  CHECK_THROWS_WITH_AS(run_sweep(request, 1), "clusters: none given", InputError);
}

}  // namespace
}  // namespace meshplan::planner
