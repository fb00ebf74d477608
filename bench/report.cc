#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/sizes.h"

namespace hetps::bench {
namespace {

JsonValue ResultJson(const BenchResult& r) {
  JsonValue value = JsonValue::Object();
  value.Set("transport", r.transport)
      .Set("security", r.security)
      .Set("replicas", r.replicas)
      .Set("metrics", r.metrics)
      .Set("op", r.op)
      .Set("bytes", r.bytes)
      .Set("workers", r.workers)
      .Set("shards", r.shards)
      .Set("dtype", r.dtype)
      .Set("samples", r.samples)
      .Set("p50_us", r.p50_us)
      .Set("p90_us", r.p90_us)
      .Set("p99_us", r.p99_us)
      .Set("p999_us", r.p999_us)
      .Set("max_us", r.max_us)
      .Set("gbps", r.gbps)
      .Set("ops_per_s", r.ops_per_s)
      .Set("wrong", r.wrong)
      .Set("floor_p50_us", r.floor_p50_us)
      .Set("floor_gbps", r.floor_gbps);
  return value;
}

std::string Ratio(double numerator, double denominator) {
  return denominator > 0 ? absl::StrFormat("%.2f", numerator / denominator) : "-";
}

}  // namespace

const std::vector<std::string>& ResultFields() {
  static const auto* fields = [] {
    auto* names = new std::vector<std::string>();
    const JsonValue example = ResultJson(BenchResult());
    for (const auto& [name, value] : example.members()) names->push_back(name);
    return names;
  }();
  return *fields;
}

std::string ResultsJson(const JsonValue& config, const std::vector<BenchResult>& results) {
  JsonValue list = JsonValue::Array();
  for (const BenchResult& r : results) list.Append(ResultJson(r));
  JsonValue document = JsonValue::Object();
  document.Set("config", config).Set("results", std::move(list));
  return document.Serialize();
}

std::string ResultsCsv(const std::vector<BenchResult>& results) {
  std::string out = absl::StrJoin(ResultFields(), ",") + "\n";
  for (const BenchResult& r : results) {
    std::vector<std::string> cells;
    const JsonValue fields = ResultJson(r);
    for (const auto& [name, value] : fields.members()) {
      if (value.type() == JsonValue::Type::kString) {
        cells.push_back(value.as_string());  // names without commas or quotes
      } else {
        cells.push_back(absl::StrFormat("%.10g", value.as_number()));
      }
    }
    absl::StrAppend(&out, absl::StrJoin(cells, ","), "\n");
  }
  return out;
}

std::string ResultsTableHeader() {
  return absl::StrFormat(
      "%-9s %-9s %3s %-8s %6s %9s %9s %9s %9s %9s %8s %10s %6s | %9s %8s | %6s %6s\n", "transport",
      "security", "rep", "op", "size", "p50(us)", "p90(us)", "p99(us)", "p99.9(us)", "max(us)",
      "GB/s", "ops/s", "#wrong", "floor p50", "floor GB/s", "x p50", "x GB/s");
}

std::string ResultsTableRow(const BenchResult& r) {
  return absl::StrFormat(
      "%-9s %-9s %3d %-8s %6s %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %10.0f %6d | %9.1f %10.3f | "
      "%6s %6s\n",
      r.transport, r.security, r.replicas, r.op, FormatSize(r.bytes), r.p50_us, r.p90_us, r.p99_us,
      r.p999_us, r.max_us, r.gbps, r.ops_per_s, r.wrong, r.floor_p50_us, r.floor_gbps,
      Ratio(r.p50_us, r.floor_p50_us), Ratio(r.gbps, r.floor_gbps));
}

std::string ResultsTable(const std::vector<BenchResult>& results) {
  std::string out = ResultsTableHeader();
  for (const BenchResult& r : results) out += ResultsTableRow(r);
  return out;
}

namespace {

// A panel of the plot: x is log2(bytes); y is log10 or linear.
struct Panel {
  double left, top, width, height;
  double x_min, x_max, y_min, y_max;
  bool log_y;

  double X(double bytes) const {
    const double t = (std::log2(bytes) - x_min) / std::max(1e-9, x_max - x_min);
    return left + t * width;
  }
  double Y(double value) const {
    const double v = log_y ? std::log10(std::max(value, 1e-9)) : value;
    const double t = (v - y_min) / std::max(1e-9, y_max - y_min);
    return top + height - t * height;
  }
};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

void Polyline(std::string& svg, const Panel& panel,
              const std::vector<std::pair<double, double>>& points, const char* color,
              const char* dash) {
  if (points.empty()) return;
  std::vector<std::string> coordinates;
  for (const auto& [x, y] : points) {
    coordinates.push_back(absl::StrFormat("%.1f,%.1f", panel.X(x), panel.Y(y)));
  }
  absl::StrAppendFormat(&svg,
                        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                        "stroke-dasharray=\"%s\" points=\"%s\"/>\n",
                        color, dash, absl::StrJoin(coordinates, " "));
  for (const auto& [x, y] : points) {
    absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                          panel.X(x), panel.Y(y), color);
  }
}

void Axes(std::string& svg, const Panel& panel, const std::string& title,
          const std::vector<uint64_t>& sizes) {
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                        "fill=\"none\" stroke=\"#444\"/>\n",
                        panel.left, panel.top, panel.width, panel.height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"14\">%s"
                        "</text>\n",
                        panel.left + panel.width / 2, panel.top - 10, title);
  for (uint64_t size : sizes) {
    const double x = panel.X(static_cast<double>(size));
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"11\">%s"
                          "</text>\n",
                          x, panel.top, x, panel.top + panel.height, x,
                          panel.top + panel.height + 16, FormatSize(size));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"12\">"
                        "message size (bytes)</text>\n",
                        panel.left + panel.width / 2, panel.top + panel.height + 34);
  // Y ticks: decades on a log axis, five steps on a linear one.
  std::vector<double> ticks;
  if (panel.log_y) {
    for (double e = std::floor(panel.y_min); e <= std::ceil(panel.y_max); ++e) {
      if (e >= panel.y_min - 1e-9 && e <= panel.y_max + 1e-9) ticks.push_back(std::pow(10, e));
    }
  } else {
    // Round steps of 1, 2 or 5 times a power of ten, about five of them.
    const double rough = (panel.y_max - panel.y_min) / 5;
    const double magnitude = std::pow(10, std::floor(std::log10(rough)));
    const double step = rough / magnitude < 2   ? magnitude
                        : rough / magnitude < 5 ? 2 * magnitude
                                                : 5 * magnitude;
    for (double tick = panel.y_min; tick <= panel.y_max + 1e-12; tick += step) {
      ticks.push_back(tick);
    }
  }
  for (double tick : ticks) {
    const double y = panel.Y(tick);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g"
                          "</text>\n",
                          panel.left, y, panel.left + panel.width, y, panel.left - 6, y + 4, tick);
  }
}

}  // namespace

std::string ResultsSvg(const std::vector<BenchResult>& results) {
  // One series per (transport, op).
  std::map<std::string, std::vector<const BenchResult*>> series;
  std::vector<uint64_t> sizes;
  double latency_min = 1e18, latency_max = 0, gbps_max = 0;
  for (const BenchResult& r : results) {
    const std::string security = r.security == "off" ? "" : " (" + r.security + ")";
    const std::string replicas = r.replicas == 1 ? "" : absl::StrCat(" x", r.replicas);
    series[r.transport + security + replicas + " " + r.op].push_back(&r);
    sizes.push_back(r.bytes);
    for (double v : {r.p50_us, r.p99_us, r.floor_p50_us}) {
      if (v > 0) {
        latency_min = std::min(latency_min, v);
        latency_max = std::max(latency_max, v);
      }
    }
    gbps_max = std::max({gbps_max, r.gbps, r.floor_gbps});
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) sizes.push_back(1);
  if (latency_max <= 0) latency_min = latency_max = 1;
  const double x_min = std::log2(static_cast<double>(sizes.front())) - 0.3;
  const double x_max = std::log2(static_cast<double>(sizes.back())) + 0.3;
  const Panel latency{80,
                      40,
                      420,
                      300,
                      x_min,
                      x_max,
                      std::floor(std::log10(latency_min)),
                      std::ceil(std::log10(latency_max) + 1e-9),
                      true};
  const Panel throughput{620,  40, 420, 300, x_min, x_max, 0, std::max(0.001, gbps_max * 1.1),
                         false};

  const int legend_rows = static_cast<int>(series.size()) + 1;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1100\" height=\"%d\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      420 + 18 * legend_rows);
  Axes(svg, latency, "latency (us, log): p50 solid, p99 dotted, floor p50 dashed", sizes);
  Axes(svg, throughput, "throughput (GB/s): hetps solid, floor dashed", sizes);
  int index = 0;
  double legend_y = 400;
  for (const auto& [name, rows] : series) {
    const char* color = kColors[index++ % (sizeof(kColors) / sizeof(kColors[0]))];
    std::vector<std::pair<double, double>> p50, p99, floor_p50, gbps, floor_gbps;
    for (const BenchResult* r : rows) {
      const double x = static_cast<double>(r->bytes);
      p50.emplace_back(x, r->p50_us);
      p99.emplace_back(x, r->p99_us);
      gbps.emplace_back(x, r->gbps);
      if (r->floor_p50_us > 0) floor_p50.emplace_back(x, r->floor_p50_us);
      if (r->floor_gbps > 0) floor_gbps.emplace_back(x, r->floor_gbps);
    }
    Polyline(svg, latency, p50, color, "none");
    Polyline(svg, latency, p99, color, "2,3");
    Polyline(svg, latency, floor_p50, color, "8,4");
    Polyline(svg, throughput, gbps, color, "none");
    Polyline(svg, throughput, floor_gbps, color, "8,4");
    absl::StrAppendFormat(&svg,
                          "<line x1=\"80\" y1=\"%.0f\" x2=\"110\" y2=\"%.0f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"118\" y=\"%.0f\" font-size=\"12\">%s"
                          "</text>\n",
                          legend_y, legend_y, color, legend_y + 4, name);
    legend_y += 18;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace hetps::bench
