// The pipeline picture: one row per stage with one F and one B block per (micro-batch, chunk).

#include <doctest/doctest.h>

#include <string>

#include "../simulator/hand_built.h"
#include "meshplan/reports.h"

namespace meshplan::reports {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("svg: m * vpp forward and backward blocks per stage") {
  using planner::ScheduleKind;
  struct Case {
    ScheduleKind kind;
    int64_t pp, vpp, m;
  };
  for (const Case& c : {Case{ScheduleKind::kGpipe, 4, 1, 8}, Case{ScheduleKind::kOneFOneB, 4, 1, 8},
                        Case{ScheduleKind::kInterleaved, 2, 3, 4}}) {
    CAPTURE(planner::to_string(c.kind));
    simulator::SimulationInput input =
        simulator::testing::uniform_input(c.kind, c.pp, c.vpp, c.m, 1.0, 2.0);
    const std::string svg = pipeline_svg(simulator::simulate(input));
    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    for (int64_t s = 0; s < c.pp; ++s) {
      CAPTURE(s);
      const std::string stage = "data-stage=\"" + std::to_string(s) + "\"";
      CHECK(count(svg, "class=\"F\" " + stage) == c.m * c.vpp);
      CHECK(count(svg, "class=\"B\" " + stage) == c.m * c.vpp);
      CHECK(count(svg, "class=\"W\" " + stage) == 0);
      CHECK(count(svg, "class=\"opt\" " + stage) == 1);
    }
    CHECK(count(svg, "class=\"F\" data-stage=\"" + std::to_string(c.pp) + "\"") == 0);
  }
}

TEST_CASE("svg: zb-h1 has F, B and W blocks, m of each per stage") {
  const std::string svg = pipeline_svg(simulator::simulate(
      simulator::testing::uniform_input(planner::ScheduleKind::kZbH1, 4, 1, 6, 1.0, 1.0, 1.0)));
  for (int64_t s = 0; s < 4; ++s) {
    const std::string stage = "data-stage=\"" + std::to_string(s) + "\"";
    CHECK(count(svg, "class=\"F\" " + stage) == 6);
    CHECK(count(svg, "class=\"B\" " + stage) == 6);
    CHECK(count(svg, "class=\"W\" " + stage) == 6);
  }
  CHECK(svg.find("W weight gradient") != std::string::npos);  // in the legend
}

TEST_CASE("svg: pieces of a backward cut at bucket boundaries are one block") {
  // dp = 2 with 3 buckets: the last backward is cut in 3 pieces, drawn as one B block.
  simulator::SimulationInput input =
      simulator::testing::uniform_input(planner::ScheduleKind::kOneFOneB, 1, 1, 2, 1.0, 2.0);
  input.layout.dp = 2;
  input.stages[0].grad_buckets = {{10, 0.1}, {10, 0.1}, {10, 0.1}};
  const simulator::SimulationResult result = simulator::simulate(input);
  const std::string svg = pipeline_svg(result);
  CHECK(count(svg, "class=\"B\" data-stage=\"0\"") == 2);     // m = 2
  CHECK(count(svg, "class=\"comm\" data-stage=\"0\"") == 3);  // the 3 bucket reductions
}

TEST_CASE("svg: the same result gives the same bytes") {
  const auto input =
      simulator::testing::uniform_input(planner::ScheduleKind::kInterleaved, 2, 2, 4, 0.3, 0.7);
  CHECK(pipeline_svg(simulator::simulate(input)) == pipeline_svg(simulator::simulate(input)));
}

}  // namespace meshplan::reports
