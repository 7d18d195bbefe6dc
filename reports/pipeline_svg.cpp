// The pipeline schedule as an SVG picture, drawn like Fig. 4 of Narayanan et al. 2021
// (Megatron-LM) and Fig. 3 of Qi et al. 2023 (Zero Bubble): one row per stage, a block per
// F / B / W numbered by micro-batch (from 1, as the papers number them), time to the right.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshplan/reports.h"
#include "xml_escape.h"

namespace meshplan::reports {
namespace {

using simulator::SimulationResult;
using simulator::TaskKind;
using simulator::TaskRecord;

constexpr double kWidth = 1400;  // px
constexpr double kLeft = 110;    // stage labels
constexpr double kRight = 30;
constexpr double kTop = 46;        // title
constexpr double kRowHeight = 30;  // F / B / W blocks
constexpr double kLaneHeight = 8;  // the rank's communication, under its row
constexpr double kRowGap = 8;
constexpr double kFontSize = 11;

struct Rgb {
  int r, g, b;
};

// Base colours (forward blue, backward green as in Megatron-LM's Fig. 4; weight gradient
// amber), lightened towards white for later model chunks (the papers' darker/lighter shades).
std::string fill(Rgb base, int64_t chunk, int64_t vpp) {
  const double t = vpp > 1 ? 0.6 * static_cast<double>(chunk) / static_cast<double>(vpp - 1) : 0;
  auto mix = [&](int c) { return static_cast<int>(std::lround(c + (255 - c) * t)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(base.r), mix(base.g), mix(base.b));
}

constexpr Rgb kForward{0x4f, 0x8f, 0xd6};
constexpr Rgb kBackward{0x6a, 0xb0, 0x4c};
constexpr Rgb kWeight{0xf2, 0xb1, 0x34};
constexpr Rgb kOptimizer{0x9e, 0x9e, 0x9e};

const char* block_class(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward:
      return "F";
    case TaskKind::kBackward:
    case TaskKind::kBackwardInput:
      return "B";
    case TaskKind::kBackwardWeight:
      return "W";
    case TaskKind::kOptimizerStep:
      return "opt";
    default:
      return "comm";
  }
}

std::string comm_colour(TaskKind kind) {
  switch (kind) {
    case TaskKind::kTpComm:
    case TaskKind::kCpComm:
      return "#8064a2";
    case TaskKind::kPpTransfer:
      return "#c0504d";
    default:  // data-parallel: buckets, embedding sync, parameter gather
      return "#4bacc6";
  }
}

// Tick spacing 1, 2 or 5 times a power of ten, about 10 ticks over the step.
double tick_step(double span) {
  const double raw = span / 10.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) {
      return factor * magnitude;
    }
  }
  return 10.0 * magnitude;
}

// Where things go: x = kLeft + seconds * scale; row s's blocks start at kTop + s * row_pitch.
struct Geometry {
  double step_seconds = 1;  // the width of the picture's time axis
  double scale = 0;         // px per second
  double row_pitch = kRowHeight + kLaneHeight + kRowGap;
  double axis_y = 0;
  double height = 0;
};

// The picture's geometry for `result`: pp rows, the step time across.
Geometry geometry(const SimulationResult& result) {
  Geometry g;
  g.step_seconds = result.step_time_s > 0 ? result.step_time_s : 1.0;
  g.scale = (kWidth - kLeft - kRight) / g.step_seconds;
  g.axis_y = kTop + static_cast<double>(result.layout.pp) * g.row_pitch;
  g.height = g.axis_y + 64;
  return g;
}

// Row of each simulated rank: the stage of its tp = dp = 0 rank; -1 for ranks not drawn.
std::vector<int64_t> rank_rows(const SimulationResult& result) {
  std::vector<int64_t> row_of(result.ranks.size(), -1);
  for (size_t i = 0; i < result.ranks.size(); ++i) {
    const auto& coords = result.ranks[i].coords;
    if (coords.tp_rank == 0 && coords.dp_rank == 0) {
      row_of[i] = coords.pp_rank;
    }
  }
  return row_of;
}

// The <svg> element's opening, the background, the title lines and each stage's empty row.
std::string svg_opening(const SimulationResult& result, const Geometry& g) {
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"Helvetica, Arial, sans-serif\">\n",
      kWidth, g.height, kWidth, g.height);
  out += fmt::format("<rect width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n", kWidth,
                     g.height);
  out += fmt::format(
      "<text x=\"{:.0f}\" y=\"20\" font-size=\"14\">{} on {}: {} &#8212; step {:.6g} s "
      "(simulated)</text>\n",
      kLeft, xml_escape(result.model_name), xml_escape(result.cluster_name),
      xml_escape(planner::describe(result.layout)), result.step_time_s);
  out += fmt::format(
      "<text x=\"{:.0f}\" y=\"36\" font-size=\"11\" fill=\"#555555\">blocks numbered by "
      "micro-batch from 1; thin lane: the stage's communication (tp purple, pipeline red, "
      "data-parallel cyan)</text>\n",
      kLeft);
  for (int64_t s = 0; s < result.layout.pp; ++s) {
    const double y = kTop + static_cast<double>(s) * g.row_pitch;
    out += fmt::format(
        "<text x=\"{:.0f}\" y=\"{:.2f}\" font-size=\"12\" text-anchor=\"end\">stage {}</text>\n",
        kLeft - 8, y + kRowHeight / 2 + 4, s);
    out += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.0f}\" fill=\"#f4f4f4\"/>\n",
        kLeft, y, g.step_seconds * g.scale, kRowHeight);
  }
  return out;
}

// One span in stage row `row`: a thin bar in the lane for communication, else a coloured block
// (numbered by micro-batch when the label fits).
std::string span_block(const simulator::TaskSpan& span, const TaskRecord& task, int64_t row,
                       int64_t vpp, const Geometry& g) {
  const double x = kLeft + span.start_seconds * g.scale;
  const double w = (span.end_seconds - span.start_seconds) * g.scale;
  const double y = kTop + static_cast<double>(row) * g.row_pitch;
  const char* cls = block_class(task.kind);
  if (std::string(cls) == "comm") {
    return fmt::format(
        "<rect class=\"comm\" data-stage=\"{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" "
        "height=\"{:.0f}\" fill=\"{}\"/>\n",
        row, x, y + kRowHeight + 1, w, kLaneHeight - 2, comm_colour(task.kind));
  }
  const Rgb base = task.kind == TaskKind::kForward          ? kForward
                   : task.kind == TaskKind::kBackwardWeight ? kWeight
                   : task.kind == TaskKind::kOptimizerStep  ? kOptimizer
                                                            : kBackward;
  const int64_t chunk = std::max(task.chunk, 0);
  std::string out = fmt::format(
      "<rect class=\"{}\" data-stage=\"{}\" data-micro-batch=\"{}\" data-chunk=\"{}\" "
      "x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.0f}\" fill=\"{}\" "
      "stroke=\"#333333\" stroke-width=\"0.5\"/>\n",
      cls, row, task.micro_batch, task.chunk, x, y, w, kRowHeight, fill(base, chunk, vpp));
  const std::string label =
      task.kind == TaskKind::kOptimizerStep ? "opt" : std::to_string(task.micro_batch + 1);
  if (w >= 0.62 * kFontSize * static_cast<double>(label.size()) + 2) {
    out += fmt::format(
        "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
        x + w / 2, y + kRowHeight / 2 + kFontSize / 3, kFontSize, label);
  }
  return out;
}

// The time axis under the rows: ticks 1, 2 or 5 times a power of ten, in ms below a second.
std::string time_axis(const Geometry& g) {
  const double step = g.step_seconds;
  const bool in_ms = step < 1.0;
  const double unit = in_ms ? 1e-3 : 1.0;
  const double tick = tick_step(step);
  std::string out = fmt::format(
      "<line x1=\"{:.0f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#000000\"/>\n", kLeft,
      g.axis_y, kLeft + step * g.scale, g.axis_y);
  for (int64_t i = 0; static_cast<double>(i) * tick <= step * (1 + 1e-12); ++i) {
    const double t = static_cast<double>(i) * tick;
    const double x = kLeft + t * g.scale;
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"#000000\"/>\n", x,
        g.axis_y, x, g.axis_y + 5);
    out += fmt::format(
        "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"11\" text-anchor=\"middle\">{:g}</text>\n", x,
        g.axis_y + 18, t / unit);
  }
  out += fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.2f}\" font-size=\"11\" text-anchor=\"end\">time ({})</text>\n",
      kLeft - 8, g.axis_y + 18, in_ms ? "ms" : "s");
  return out;
}

// The legend under the axis: the block kinds this schedule has, chunk shading, optimizer.
std::string legend(const SimulationResult& result, const Geometry& g) {
  struct Entry {
    const char* name;
    std::string colour;
  };
  const int64_t vpp = result.layout.vpp;
  std::vector<Entry> entries{{"F forward", fill(kForward, 0, 1)}};
  const bool split = result.layout.schedule == planner::ScheduleKind::kZbH1;
  entries.push_back({split ? "B input gradient" : "B backward", fill(kBackward, 0, 1)});
  if (split) {
    entries.push_back({"W weight gradient", fill(kWeight, 0, 1)});
  }
  if (vpp > 1) {
    entries.push_back({"lighter: later model chunk", fill(kForward, vpp - 1, vpp)});
  }
  entries.push_back({"optimizer step", fill(kOptimizer, 0, 1)});
  std::string out;
  double x = kLeft;
  const double legend_y = g.axis_y + 34;
  for (const Entry& entry : entries) {
    out += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"14\" height=\"14\" fill=\"{}\" "
        "stroke=\"#333333\" stroke-width=\"0.5\"/>\n",
        x, legend_y, entry.colour);
    out += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"12\">{}</text>\n", x + 20,
                       legend_y + 12, entry.name);
    x += 40 + 7.0 * static_cast<double>(std::string(entry.name).size());
  }
  return out;
}

}  // namespace

std::string pipeline_svg(const SimulationResult& result) {
  const Geometry g = geometry(result);
  const std::vector<int64_t> row_of = rank_rows(result);
  std::string out = svg_opening(result, g);
  for (const simulator::TaskSpan& span : simulator::task_spans(result)) {
    const TaskRecord& task = result.tasks[span.first_task];
    const int64_t row = task.rank >= 0 ? row_of[task.rank] : -1;
    if (row >= 0) {
      out += span_block(span, task, row, result.layout.vpp, g);
    }
  }
  out += time_axis(g);
  out += legend(result, g);
  out += "</svg>\n";
  return out;
}

}  // namespace meshplan::reports
