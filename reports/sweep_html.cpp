// meshplan sweep --html: one self-contained page. Charts are inline SVG drawn here; the page
// has no script and fetches nothing, so it opens offline and renders the same everywhere.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "meshplan/sweep_report.h"
#include "meshplan/units.h"
#include "sweep_points.h"
#include "xml_escape.h"

namespace meshplan::reports {

namespace {

constexpr double kBytesPerGiBDouble = static_cast<double>(kBytesPerGiB);
// Chart frame in SVG user units: plot area [kChartLeft, kChartWidth - kChartRight] x [kChartTop,
// kChartHeight - kChartBottom].
constexpr double kChartWidth = 720, kChartHeight = 380, kChartLeft = 78, kChartRight = 150,
                 kChartTop = 20, kChartBottom = 62;
constexpr const char* kClusterColors[] = {"#1f77b4", "#d62728", "#2ca02c",
                                          "#9467bd", "#ff7f0e", "#8c564b"};

const char* cluster_color(size_t index) {
  return kClusterColors[index % std::size(kClusterColors)];
}

// A log10 axis over [lo, hi] widened to whole decades, mapped onto [from, to] pixels.
struct LogAxis {
  double lo_exp = 0, hi_exp = 1, from = 0, to = 1;
  LogAxis(double lo, double hi, double from_px, double to_px) : from(from_px), to(to_px) {
    // Decades within 1e-30..1e30, and a zero, infinite or NaN end replaced, so the grid loops
    // stay bounded whatever the points hold.
    const auto exponent = [](double value, double otherwise) {
      return std::isfinite(value) && value > 0 ? std::clamp(std::log10(value), -30.0, 30.0)
                                               : otherwise;
    };
    lo_exp = std::floor(exponent(lo, 0.0));
    hi_exp = std::max(std::ceil(exponent(hi, lo_exp + 1)), lo_exp + 1);
  }
  double at(double value) const {
    return from + (std::log10(value) - lo_exp) / (hi_exp - lo_exp) * (to - from);
  }
};

// "1e3"-style labels read badly for money and days: 0.01, 0.1, 1, 10, ... 1k, 1M, 1G.
std::string decade_label(double exponent) {
  const double value = std::pow(10.0, exponent);
  if (exponent >= 9) {
    return fmt::format("{:g}G", value / 1e9);
  }
  if (exponent >= 6) {
    return fmt::format("{:g}M", value / 1e6);
  }
  if (exponent >= 3) {
    return fmt::format("{:g}k", value / 1e3);
  }
  return fmt::format("{:g}", value);
}

std::string svg_open(const std::string& id, const std::string& title) {
  return fmt::format(
      "<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" "
      "height=\"{}\" role=\"img\"><title>{}</title>\n"
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#999\"/>\n",
      id, kChartWidth, kChartHeight, kChartWidth, kChartHeight, xml_escape(title), kChartLeft,
      kChartTop, kChartWidth - kChartLeft - kChartRight, kChartHeight - kChartTop - kChartBottom);
}

// Decade grid lines and labels of a vertical log axis, and its title.
std::string y_log_axis(const LogAxis& y, const std::string& title) {
  std::string out;
  for (double e = y.lo_exp; e <= y.hi_exp + 1e-9; ++e) {
    const double py = y.at(std::pow(10.0, e));
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n",
        kChartLeft, py, kChartWidth - kChartRight, py, kChartLeft - 6, py + 4, decade_label(e));
  }
  out += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" font-size=\"12\" "
      "text-anchor=\"middle\">{}</text>\n",
      (kChartTop + kChartHeight - kChartBottom) / 2, xml_escape(title));
  return out;
}

std::string legend(const planner::SweepRequest& request) {
  std::string out;
  for (size_t c = 0; c < request.clusters.size(); ++c) {
    const double y = kChartTop + 14 + 18 * static_cast<double>(c);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n",
        kChartWidth - kChartRight + 12, y - 10, cluster_color(c), kChartWidth - kChartRight + 30, y,
        xml_escape(request.clusters[c].label));
  }
  return out;
}

std::vector<const planner::SweepPoint*> feasible_points(const planner::SweepResult& result) {
  std::vector<const planner::SweepPoint*> points;
  for (const planner::SweepPoint& p : result.points) {
    if (p.feasible) {
      points.push_back(&p);
    }
  }
  return points;
}

// Time to train (days, log) against GPUs (log2 spacing), one line per cluster.
std::string time_chart(const planner::SweepRequest& request, const planner::SweepResult& result) {
  const auto points = feasible_points(result);
  std::string out = svg_open("chart-time", "Time to train against GPU count");
  double lo = 1e300, hi = 0;
  for (const auto* p : points) {
    lo = std::min(lo, p->time_to_train_s / kSecondsPerDay);
    hi = std::max(hi, p->time_to_train_s / kSecondsPerDay);
  }
  const LogAxis y(lo, hi, kChartHeight - kChartBottom, kChartTop);
  const std::vector<int64_t>& counts = request.gpu_counts;
  const double x_lo = std::log2(static_cast<double>(counts.front()));
  const double x_hi = std::max(std::log2(static_cast<double>(counts.back())), x_lo + 1);
  const auto x_at = [&](int64_t gpus) {
    return kChartLeft + 20 +
           (std::log2(static_cast<double>(gpus)) - x_lo) / (x_hi - x_lo) *
               (kChartWidth - kChartLeft - kChartRight - 40);
  };
  out += y_log_axis(y, "time to train (days)");
  for (int64_t gpus : counts) {
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n",
        x_at(gpus), kChartHeight - kChartBottom + 16, gpus);
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">GPUs"
      "</text>\n",
      (kChartLeft + kChartWidth - kChartRight) / 2, kChartHeight - kChartBottom + 36);
  for (size_t c = 0; c < request.clusters.size(); ++c) {
    std::string line;
    for (const auto* p : points) {
      if (p->cluster_index != c) {
        continue;
      }
      const double px = x_at(p->num_gpus), py = y.at(p->time_to_train_s / kSecondsPerDay);
      line += fmt::format("{:.1f},{:.1f} ", px, py);
      out += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{}: {:.1f} days"
          "</title></circle>\n",
          px, py, cluster_color(c), xml_escape(point_name(request, *p)),
          p->time_to_train_s / kSecondsPerDay);
    }
    out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       line, cluster_color(c));
  }
  return out + legend(request) + "</svg>\n";
}

// Cost (USD, log) against time to train (days, log) of the priced points; the Pareto front
// ringed and joined.
std::string cost_chart(const planner::SweepRequest& request, const planner::SweepResult& result) {
  auto points = feasible_points(result);
  // A log axis has no place for 0 USD (--price X=0): those points are left off, and said so
  // under the chart; costs below 1 USD are drawn where they are.
  const auto free_points = std::count_if(points.begin(), points.end(),
                                         [](const auto* p) { return p->cost && *p->cost <= 0; });
  std::erase_if(points, [](const auto* p) { return !p->cost || *p->cost <= 0; });
  std::string out = svg_open("chart-cost", "Cost against time to train, Pareto front marked");
  double t_lo = 1e300, t_hi = 0, c_lo = 1e300, c_hi = 0;
  for (const auto* p : points) {
    t_lo = std::min(t_lo, p->time_to_train_s / kSecondsPerDay);
    t_hi = std::max(t_hi, p->time_to_train_s / kSecondsPerDay);
    c_lo = std::min(c_lo, *p->cost);
    c_hi = std::max(c_hi, *p->cost);
  }
  const LogAxis x(t_lo, t_hi, kChartLeft + 10, kChartWidth - kChartRight - 10);
  const LogAxis y(c_lo, c_hi, kChartHeight - kChartBottom, kChartTop);
  out += y_log_axis(y, "cost (USD)");
  for (double e = x.lo_exp; e <= x.hi_exp + 1e-9; ++e) {
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n",
        x.at(std::pow(10.0, e)), kChartHeight - kChartBottom + 16, decade_label(e));
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">time to train (days); "
      "ringed and joined: Pareto front{}</text>\n",
      (kChartLeft + kChartWidth - kChartRight) / 2, kChartHeight - kChartBottom + 36,
      free_points > 0 ? fmt::format("; {} point(s) priced 0 USD not drawn", free_points) : "");
  std::sort(points.begin(), points.end(),
            [](const auto* a, const auto* b) { return a->time_to_train_s < b->time_to_train_s; });
  std::string front;
  for (const auto* p : points) {
    const double px = x.at(p->time_to_train_s / kSecondsPerDay);
    const double py = y.at(*p->cost);
    if (p->pareto) {
      front += fmt::format("{:.1f},{:.1f} ", px, py);
      out += fmt::format(
          "<circle class=\"pareto\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"8\" fill=\"none\" "
          "stroke=\"#000\" stroke-width=\"1.5\"/>\n",
          px, py);
    }
    out += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{}: {:.1f} days, "
        "{:.0f} USD</title></circle>\n",
        px, py, cluster_color(p->cluster_index), xml_escape(point_name(request, *p)),
        p->time_to_train_s / kSecondsPerDay, *p->cost);
  }
  out += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>\n", front);
  return out + legend(request) + "</svg>\n";
}

struct MemoryPart {
  const char* name;
  const char* color;
};
constexpr MemoryPart kMemoryParts[] = {{"weights", "#4e79a7"},
                                       {"gradients", "#f28e2b"},
                                       {"optimizer", "#e15759"},
                                       {"activations", "#76b7b2"},
                                       {"reserve", "#bab0ac"}};

// One stacked bar at x (left edge) of width bar_w, its GPU's memory as a black tick over it and
// its GPU count under it; y_at maps GiB to pixels, px_per_gib scales heights.
std::string memory_bar(const planner::SweepRequest& request, const planner::SweepPoint& p, double x,
                       double bar_w, double px_per_gib, const std::function<double(double)>& y_at) {
  const planner::MemoryBreakdown& m = peak_stage_memory(p.best);
  const int64_t parts[] = {m.weights_bytes, m.gradients_bytes, m.optimizer_bytes,
                           m.activations_bytes, m.reserved_bytes};
  std::string out;
  double base = 0;
  for (size_t k = 0; k < std::size(kMemoryParts); ++k) {
    const double gib = static_cast<double>(parts[k]) / kBytesPerGiBDouble;
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
        "<title>{}: {} {:.2f} GiB</title></rect>\n",
        x, y_at(base + gib), bar_w, gib * px_per_gib, kMemoryParts[k].color,
        xml_escape(point_name(request, p)), kMemoryParts[k].name, gib);
    base += gib;
  }
  const double hbm_gib =
      static_cast<double>(request.clusters[p.cluster_index].cluster.gpu.hbm_bytes) /
      kBytesPerGiBDouble;
  return out + fmt::format(
                   "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" "
                   "stroke-width=\"2\"><title>GPU memory {:.1f} GiB</title></line>\n"
                   "<text transform=\"translate({:.1f} {}) rotate(-50)\" font-size=\"10\" "
                   "text-anchor=\"end\" fill=\"{}\">{}</text>\n",
                   x, y_at(hbm_gib), x + bar_w, y_at(hbm_gib), hbm_gib, x + bar_w / 2 + 4,
                   kChartHeight - kChartBottom + 10, cluster_color(p.cluster_index), p.num_gpus);
}

// The memory chart's legend: the parts, the GPU-memory tick, the clusters' label colours.
std::string memory_legend(const planner::SweepRequest& request) {
  std::string out;
  for (size_t k = 0; k < std::size(kMemoryParts); ++k) {
    const double y = kChartTop + 14 + 18 * static_cast<double>(k);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n",
        kChartWidth - kChartRight + 12, y - 10, kMemoryParts[k].color,
        kChartWidth - kChartRight + 30, y, kMemoryParts[k].name);
  }
  out += fmt::format(
      "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#000\" stroke-width=\"2\"/>"
      "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">GPU memory</text>\n",
      kChartWidth - kChartRight + 10, kChartTop + 14 + 18 * 5 - 4, kChartWidth - kChartRight + 24,
      kChartTop + 14 + 18 * 5 - 4, kChartWidth - kChartRight + 30, kChartTop + 14 + 18 * 5);
  for (size_t c = 0; c < request.clusters.size(); ++c) {
    const double y = kChartTop + 14 + 18 * static_cast<double>(c + 7);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\" fill=\"{}\">{}</text>\n",
                       kChartWidth - kChartRight + 12, y, cluster_color(c),
                       xml_escape(request.clusters[c].label));
  }
  return out;
}

// Per-GPU memory of each chosen plan (its fullest stage) as stacked bars, GiB, with the GPU's
// memory as a tick over each bar.
std::string memory_chart(const planner::SweepRequest& request, const planner::SweepResult& result) {
  const auto points = feasible_points(result);
  std::string out = svg_open("chart-memory", "Per-GPU memory of the chosen plans");
  double top_gib = 1;
  for (const auto* p : points) {
    top_gib = std::max(
        top_gib, static_cast<double>(request.clusters[p->cluster_index].cluster.gpu.hbm_bytes) /
                     kBytesPerGiBDouble);
  }
  top_gib = std::ceil(top_gib / 20) * 20;
  const double px_per_gib = (kChartHeight - kChartTop - kChartBottom) / top_gib;
  const std::function<double(double)> y_at = [&](double gib) {
    return kChartHeight - kChartBottom - gib * px_per_gib;
  };
  for (double g = 0; g <= top_gib + 1e-9; g += 20) {
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"end\">{:g}</text>\n",
        kChartLeft, y_at(g), kChartWidth - kChartRight, y_at(g), kChartLeft - 6, y_at(g) + 4, g);
  }
  out += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" font-size=\"12\" "
      "text-anchor=\"middle\">memory per GPU (GiB)</text>\n"
      "<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">"
      "GPUs, coloured by cluster</text>\n",
      (kChartTop + kChartHeight - kChartBottom) / 2, (kChartLeft + kChartWidth - kChartRight) / 2,
      kChartHeight - 8);
  const double slot = (kChartWidth - kChartLeft - kChartRight) /
                      static_cast<double>(std::max<size_t>(1, points.size()));
  const double bar_w = std::min(28.0, slot * 0.7);
  for (size_t i = 0; i < points.size(); ++i) {
    const double x = kChartLeft + slot * (static_cast<double>(i) + 0.5) - bar_w / 2;
    out += memory_bar(request, *points[i], x, bar_w, px_per_gib, y_at);
  }
  return out + memory_legend(request) + "</svg>\n";
}

// The table of points: layout, times and cost, or the reason a point has no plan.
std::string points_table(const planner::SweepRequest& request, const planner::SweepResult& result) {
  std::string out =
      "<table id=\"points\"><tr><th>cluster</th><th>GPUs</th><th>batch (seq)</th><th>layout</th>"
      "<th>step (s)</th><th>MFU (%)</th><th>time (days)</th><th>GPU-hours</th><th>cost (USD)</th>"
      "<th>scaling (%)</th><th>Pareto</th></tr>\n";
  for (const planner::SweepPoint& p : result.points) {
    const std::string cluster = xml_escape(request.clusters[p.cluster_index].label);
    if (!p.feasible) {
      out += fmt::format(
          "<tr class=\"none\"><td>{}</td><td>{}</td><td>{}</td><td colspan=\"8\">no feasible "
          "plan: {}</td></tr>\n",
          cluster, p.num_gpus, p.global_batch, xml_escape(p.reason));
      continue;
    }
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.1f}</td>"
        "<td>{:.2f}</td><td>{:.0f}</td><td>{}</td><td>{:.1f}</td><td>{}</td></tr>\n",
        cluster, p.num_gpus, p.global_batch, xml_escape(planner::describe(p.best.layout)),
        p.best.step_time_s, 100.0 * p.best.mfu, p.time_to_train_s / kSecondsPerDay, p.gpu_hours,
        cost_text(p), 100.0 * p.scaling_efficiency, p.pareto ? "yes" : "");
  }
  return out + "</table>\n";
}

}  // namespace

std::string sweep_html(const planner::SweepRequest& request, const planner::SweepResult& result) {
  const Report report = sweep_report(request, result);
  std::string header;  // the table's '#' lines above the names line, as the page's preamble
  for (size_t start = 0; start < report.table.size();) {
    const size_t end = report.table.find('\n', start);
    const std::string line = report.table.substr(start, end - start);
    if (line.rfind("# ", 0) != 0) {
      break;
    }
    header += xml_escape(line.substr(2)) + "<br>\n";
    start = end + 1;
  }
  std::string page = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>meshplan sweep: {}</title>\n<style>\n"
      "body {{ font-family: sans-serif; margin: 24px; color: #222; }}\n"
      "h2 {{ font-size: 16px; margin: 24px 0 6px; }}\n"
      "p.header {{ font-family: monospace; font-size: 12px; }}\n"
      "table {{ border-collapse: collapse; font-size: 12px; }}\n"
      "td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: right; "
      "white-space: nowrap; }}\n"
      "td:nth-child(4) {{ text-align: left; font-family: monospace; white-space: normal; }}\n"
      "tr.none td {{ color: #a00; text-align: left; }}\n"
      "</style></head><body>\n<h1>meshplan sweep: {}</h1>\n<p class=\"header\">{}</p>\n",
      xml_escape(request.model.name), xml_escape(request.model.name), header);
  if (feasible_points(result).empty()) {
    page += "<p>No point has a feasible plan: see the table.</p>\n";
  } else {
    page += "<h2>Time to train against GPU count</h2>\n" + time_chart(request, result);
    const auto priced = [](const planner::SweepPoint* p) { return p->cost.has_value(); };
    const auto feasible = feasible_points(result);
    page += "<h2>Cost against time to train</h2>\n" +
            (std::any_of(feasible.begin(), feasible.end(), priced)
                 ? cost_chart(request, result)
                 : std::string("<p>No cluster has a price: give one with --price "
                               "CLUSTER=USD_PER_GPU_HOUR.</p>\n"));
    page += "<h2>Memory per GPU of each chosen plan (fullest pipeline stage)</h2>\n" +
            memory_chart(request, result);
  }
  page += "<h2>Points</h2>\n" + points_table(request, result);
  return page + "</body></html>\n";
}

}  // namespace meshplan::reports
