// meshplan sweep's outputs (reports/sweep_report.cpp, reports/sweep_html.cpp): each table row and
// its JSON record carry the same point; a point without a plan keeps its reason; the HTML page
// has its three charts, one ring per Pareto point, one bar part per memory kind and no reference
// outside itself.

#include "meshplan/sweep_report.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "meshplan/models.h"
#include "table_text.h"

namespace meshplan::reports {
namespace {

size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// llama2-7b on A100s (preset price) and H100s (2 USD as if from --price) at 1, 8 and 16 GPUs:
// one GPU holds no plan (16 bytes x 6.7e9 parameters of model states > 80 GiB).
planner::SweepRequest request() {
  planner::SweepRequest r;
  r.model = models::load_model("llama2-7b");
  for (const char* name : {"dgx-a100-80gb", "dgx-h100"}) {
    planner::SweepCluster c;
    c.cluster = models::load_cluster(name);
    c.label = name;
    c.price_per_gpu_hour = c.label == "dgx-h100" ? 2.0 : c.cluster.price_per_gpu_hour;
    c.price_source = c.label == "dgx-h100" ? "--price" : "dgx-a100-80gb: price_per_gpu_hour";
    r.clusters.push_back(c);
  }
  r.gpu_counts = {1, 8, 16};
  r.num_tokens = 1e9;
  return r;
}

TEST_CASE("sweep report: each row and its record are the same point; the header says the rules") {
  const planner::SweepRequest r = request();
  const planner::SweepResult result = planner::run_sweep(r, 2);
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("# global batch 2 sequences (8192 tokens) held fixed at every GPU "
                          "count (default: 2 per GPU at the smallest count") != std::string::npos);
  CHECK(report.table.find("# cluster dgx-h100: H100-SXM5-80GB (8 per node), 2 USD per GPU-hour "
                          "from --price\n") != std::string::npos);
  const std::vector<std::string> rows = data_rows(report.table);
  const nlohmann::json& points = report.json.at("points");
  REQUIRE(rows.size() == 6);
  REQUIRE(points.size() == 6);
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(rows[i]);
    const std::vector<std::string> row = fields(rows[i]);
    const nlohmann::json& p = points[i];
    CHECK(row[0] == p.at("cluster").get<std::string>());
    CHECK(row[1] == std::to_string(p.at("gpus").get<int64_t>()));
    if (!p.at("feasible").get<bool>()) {
      CHECK(rows[i].find("no feasible plan: " + p.at("reason").get<std::string>()) !=
            std::string::npos);
      CHECK(p.at("step_time_s").is_null());
      continue;
    }
    CHECK(row[3] == std::to_string(p.at("layout").at("tp").get<int64_t>()));
    CHECK(row[9] == fmt::format("{:.3f}", p.at("step_time_s").get<double>()));
    CHECK(row[14] == fmt::format("{:.0f}", p.at("cost").get<double>()));
    // cost = gpu_hours x price, gpu_hours = gpus x time / 3600 (rounding only: 1e-12).
    CHECK(p.at("cost").get<double>() == doctest::Approx(p.at("gpu_hours").get<double>() *
                                                        p.at("price_per_gpu_hour").get<double>())
                                            .epsilon(1e-12)
                                            .scale(0));
    CHECK(p.at("gpu_hours").get<double>() ==
          doctest::Approx(static_cast<double>(p.at("gpus").get<int64_t>()) *
                          p.at("time_to_train_s").get<double>() / 3600)
              .epsilon(1e-12)
              .scale(0));
    CHECK((row.size() == 17) == p.at("pareto").get<bool>());  // the '*' column
  }
  CHECK(points[0].at("feasible") == false);
  CHECK(points[0].at("reason").get<std::string>().rfind("memory x", 0) == 0);
}

TEST_CASE("sweep html: three charts, a ring per Pareto point, 5 parts per bar, offline") {
  const planner::SweepRequest r = request();
  const planner::SweepResult result = planner::run_sweep(r, 2);
  const std::string page = sweep_html(r, result);
  CHECK(count_occurrences(page, "<svg ") == 3);
  for (const char* id :
       {"id=\"chart-time\"", "id=\"chart-cost\"", "id=\"chart-memory\"", "id=\"points\""}) {
    CHECK(count_occurrences(page, id) == 1);
  }
  size_t feasible = 0, pareto = 0;
  for (const planner::SweepPoint& p : result.points) {
    feasible += p.feasible ? 1 : 0;
    pareto += p.pareto ? 1 : 0;
  }
  CHECK(feasible == 4);
  CHECK(count_occurrences(page, "class=\"pareto\"") == pareto);
  for (const char* part :
       {": weights ", ": gradients ", ": optimizer ", ": activations ", ": reserve "}) {
    CHECK(count_occurrences(page, part) == feasible);
  }
  CHECK(count_occurrences(page, "http") == 3);  // the xmlns of each <svg>, nothing fetched
  CHECK(count_occurrences(page, "<script") == 0);
  CHECK(count_occurrences(page, "no feasible plan: memory x") == 2);
}

TEST_CASE("sweep html: costs of 0 USD are left off the log axis and counted under it") {
  // H100s priced 0 (--price dgx-h100=0): its two feasible points (8 and 16 GPUs) cost 0 USD,
  // which a log axis cannot place; the A100 points, priced, are drawn.
  planner::SweepRequest r = request();
  r.clusters[1].price_per_gpu_hour = 0.0;
  const planner::SweepResult result = planner::run_sweep(r, 2);
  const std::string page = sweep_html(r, result);
  CHECK(count_occurrences(page, "; 2 point(s) priced 0 USD not drawn") == 1);
  // Priced at the preset, every point is drawn and the caption says nothing of it.
  CHECK(count_occurrences(sweep_html(request(), planner::run_sweep(request(), 2)),
                          "priced 0 USD not drawn") == 0);
}

TEST_CASE("sweep without a price: no cost, off the Pareto front, said in every output") {
  // The A100s as a cluster with no list price (price_per_gpu_hour null, no --price), the H100s
  // at 2 USD: the A100 points have no cost and only H100 points can be on the front.
  planner::SweepRequest r = request();
  r.clusters[0].price_per_gpu_hour.reset();
  const planner::SweepResult result = planner::run_sweep(r, 2);
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("# cluster dgx-a100-80gb: A100-SXM4-80GB (8 per node), no price "
                          "(dgx-a100-80gb: price_per_gpu_hour is null; --price "
                          "dgx-a100-80gb=USD_PER_GPU_HOUR gives one)\n") != std::string::npos);
  CHECK(report.table.find("; no cost without a price: dgx-a100-80gb\n") != std::string::npos);
  CHECK(report.json.at("clusters")[0].at("price_per_gpu_hour").is_null());
  const std::vector<std::string> rows = data_rows(report.table);
  const nlohmann::json& points = report.json.at("points");
  REQUIRE(rows.size() == 6);
  size_t priced_front = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(rows[i]);
    const nlohmann::json& p = points[i];
    if (!p.at("feasible").get<bool>()) {
      continue;
    }
    const bool a100 = p.at("cluster").get<std::string>() == "dgx-a100-80gb";
    CHECK(p.at("cost").is_null() == a100);
    CHECK(p.at("price_per_gpu_hour").is_null() == a100);
    if (a100) {
      CHECK(fields(rows[i])[14] == "-");
      CHECK_FALSE(p.at("pareto").get<bool>());
    }
    priced_front += p.at("pareto").get<bool>() ? 1 : 0;
  }
  CHECK(priced_front >= 1);  // the fastest H100 point is always on it
  const std::string page = sweep_html(r, result);
  CHECK(count_occurrences(page, "class=\"pareto\"") == priced_front);
  CHECK(count_occurrences(page, "<td>-</td>") == 2);  // the two feasible A100 rows

  // No cluster priced: no front, and the page says why instead of an empty chart.
  r.clusters[1].price_per_gpu_hour.reset();
  const planner::SweepResult unpriced = planner::run_sweep(r, 2);
  CHECK(sweep_report(r, unpriced)
            .table.find("Pareto front (time, cost): none; no cost without "
                        "a price: dgx-a100-80gb, dgx-h100") != std::string::npos);
  const std::string bare = sweep_html(r, unpriced);
  CHECK(count_occurrences(bare, "id=\"chart-cost\"") == 0);
  CHECK(count_occurrences(bare, "No cluster has a price") == 1);
}

// One feasible point of 64 GPUs on the request's first cluster, dp 64, whose layout `shape`
// finishes; the request keeps that cluster and count only.
planner::SweepResult one_point(planner::SweepRequest* r,
                               const std::function<void(planner::Layout&)>& shape) {
  r->clusters.resize(1);
  r->gpu_counts = {64};
  planner::SweepPoint point;
  point.num_gpus = 64;
  point.global_batch = 64;
  point.feasible = true;
  point.best.layout.dp = 64;
  point.best.layout.global_batch = 64;
  shape(point.best.layout);
  point.best.stages.resize(1);
  planner::SweepResult result;
  result.points.push_back(point);
  return result;
}

TEST_CASE("sweep report: a hybrid-sharded point says its degrees under its row") {
  planner::SweepRequest r = request();
  const planner::SweepResult result = one_point(&r, [](planner::Layout& layout) {
    layout.zero = 3;
    planner::set_dp_shard(layout, 8);
  });
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("\n#      dgx-a100-80gb x 64: hybrid sharding: ZeRO-3 over 8 "
                          "data-parallel ranks, 8 replicas (torchtitan data_parallel_shard_degree "
                          "8, data_parallel_replicate_degree 8)\n") != std::string::npos);
  CHECK(report.json.at("points")[0].at("layout").at("dp_shard") == 8);
  CHECK(data_rows(report.table).size() == 1);  // the note is a comment line, not a row
}

TEST_CASE("sweep report: a block-method point says its recomputed layers under its row") {
  planner::SweepRequest r = request();
  r.space_template.search_recompute_layers = true;
  const planner::SweepResult result = one_point(&r, [](planner::Layout& layout) {
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_layers = 7;
  });
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("\n#      dgx-a100-80gb x 64: full recompute of 7 layers per chunk "
                          "(Megatron --recompute-method block --recompute-num-layers 7)\n") !=
        std::string::npos);
  CHECK(report.table.find(", block recompute searched (--recompute-layers auto)") !=
        std::string::npos);
  CHECK(report.json.at("points")[0].at("layout").at("recompute_layers") == 7);
  CHECK(data_rows(report.table).size() == 1);
}

TEST_CASE("sweep report: a point with recompute groups says their size under its row") {
  planner::SweepRequest r = request();
  r.space_template.search_recompute_group_layers = true;
  const planner::SweepResult result = one_point(&r, [](planner::Layout& layout) {
    layout.recompute = planner::Recompute::kFull;
    layout.recompute_group_layers = 3;
  });
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("\n#      dgx-a100-80gb x 64: full recompute in groups of 3 layers "
                          "(Megatron --recompute-method uniform --recompute-num-layers 3)\n") !=
        std::string::npos);
  CHECK(report.table.find(", recompute groups searched (--recompute-group-layers auto)") !=
        std::string::npos);
  CHECK(report.json.at("points")[0].at("layout").at("recompute_group_layers") == 3);
  CHECK(data_rows(report.table).size() == 1);
}

TEST_CASE("sweep report: a point with recompute modules names them under its row") {
  planner::SweepRequest r = request();
  r.space_template.search_recompute_modules = true;
  const planner::SweepResult result = one_point(&r, [](planner::Layout& layout) {
    layout.recompute = planner::Recompute::kSelective;
    layout.recompute_modules = planner::kRecomputeCoreAttn | planner::kRecomputeMlp;
  });
  const Report report = sweep_report(r, result);
  CHECK(report.table.find("\n#      dgx-a100-80gb x 64: selective recompute of core_attn,mlp "
                          "(Megatron --recompute-modules core_attn mlp)\n") != std::string::npos);
  CHECK(report.table.find(", recompute modules searched (--recompute-modules auto)") !=
        std::string::npos);
  CHECK(report.json.at("points")[0].at("layout").at("recompute_modules") ==
        nlohmann::json{"core_attn", "mlp"});
  CHECK(data_rows(report.table).size() == 1);
}

}  // namespace
}  // namespace meshplan::reports
