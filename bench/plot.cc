#include "bench/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/sizes.h"

namespace hetps::bench {
namespace {

constexpr double kPanelWidth = 420, kPanelHeight = 300;
constexpr double kColumnLeft[] = {80, 620};
constexpr double kRowHeight = 400;

// Where a panel sits and what its axes span: x is log2(bytes); y is log10 or linear.
struct Frame {
  double left, top;
  double x_min, x_max, y_min, y_max;
  bool log_y;

  double X(double bytes) const {
    const double t = (std::log2(bytes) - x_min) / std::max(1e-9, x_max - x_min);
    return left + t * kPanelWidth;
  }
  double Y(double value) const {
    const double v = log_y ? std::log10(std::max(value, 1e-9)) : value;
    const double t = (v - y_min) / std::max(1e-9, y_max - y_min);
    return top + kPanelHeight - t * kPanelHeight;
  }
};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

const char* Dash(LineStyle style) {
  switch (style) {
    case LineStyle::kDotted:
      return "2,3";
    case LineStyle::kDashed:
      return "8,4";
    case LineStyle::kSolid:
      break;
  }
  return "none";
}

// Text as SVG holds it: names such as "p50 <= 1.3x" stay readable.
std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

bool Drawn(const PlotPanel& panel, double value) { return !panel.log_y || value > 0; }

void Polyline(std::string& svg, const Frame& frame, const PlotPanel& panel,
              const PlotSeries& series, const char* color) {
  std::vector<std::string> coordinates;
  std::string dots;
  for (const auto& [x, y] : series.points) {
    if (!Drawn(panel, y)) continue;
    coordinates.push_back(absl::StrFormat("%.1f,%.1f", frame.X(x), frame.Y(y)));
    absl::StrAppendFormat(&dots, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                          frame.X(x), frame.Y(y), color);
  }
  if (coordinates.empty()) return;
  absl::StrAppendFormat(&svg,
                        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                        "stroke-dasharray=\"%s\" points=\"%s\"/>\n%s",
                        color, Dash(series.style), absl::StrJoin(coordinates, " "), dots);
}

// Decades on a log axis (and 2x, 5x on a short one); about five round steps (1, 2 or 5 times a
// power of ten) on a linear one.
std::vector<double> YTicks(const Frame& frame) {
  std::vector<double> ticks;
  if (frame.log_y) {
    // Over two decades or fewer, 2x and 5x too.
    const bool fine = frame.y_max - frame.y_min <= 2 + 1e-9;
    for (double e = std::floor(frame.y_min); e <= frame.y_max + 1e-9; ++e) {
      for (double mantissa : {1.0, 2.0, 5.0}) {
        const double tick = mantissa * std::pow(10, e);
        if ((mantissa == 1 || fine) && std::log10(tick) >= frame.y_min - 1e-9 &&
            std::log10(tick) <= frame.y_max + 1e-9) {
          ticks.push_back(tick);
        }
      }
    }
    return ticks;
  }
  const double rough = (frame.y_max - frame.y_min) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(rough)));
  const double step = rough / magnitude < 2   ? magnitude
                      : rough / magnitude < 5 ? 2 * magnitude
                                              : 5 * magnitude;
  for (double tick = frame.y_min; tick <= frame.y_max + 1e-12; tick += step) ticks.push_back(tick);
  return ticks;
}

void Axes(std::string& svg, const Frame& frame, const PlotPanel& panel,
          const std::vector<double>& sizes) {
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                        "fill=\"none\" stroke=\"#444\"/>\n"
                        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"14\">%s"
                        "</text>\n",
                        frame.left, frame.top, kPanelWidth, kPanelHeight,
                        frame.left + kPanelWidth / 2, frame.top - 10, Escape(panel.title));
  for (double size : sizes) {
    const double x = frame.X(size);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"11\">%s"
                          "</text>\n",
                          x, frame.top, x, frame.top + kPanelHeight, x,
                          frame.top + kPanelHeight + 16, FormatSize(static_cast<uint64_t>(size)));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"12\">"
                        "%s</text>\n",
                        frame.left + kPanelWidth / 2, frame.top + kPanelHeight + 34,
                        Escape(panel.x_label));
  for (double tick : YTicks(frame)) {
    const double y = frame.Y(tick);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g"
                          "</text>\n",
                          frame.left, y, frame.left + kPanelWidth, y, frame.left - 6, y + 4, tick);
  }
}

// The y span of a panel's drawn values: whole decades on a log axis, 0 to 110% on a linear one.
std::pair<double, double> YRange(const PlotPanel& panel) {
  double low = 1e300, high = -1e300;
  for (const PlotSeries& series : panel.series) {
    for (const auto& [x, y] : series.points) {
      if (!Drawn(panel, y)) continue;
      low = std::min(low, y);
      high = std::max(high, y);
    }
  }
  if (panel.log_y) {
    if (high <= 0) return {0, 1};
    return {std::floor(std::log10(low)), std::ceil(std::log10(high) + 1e-9)};
  }
  return {std::min(0.0, low), std::max(0.001, high * 1.1)};
}

}  // namespace

std::string PlotSvg(const std::vector<PlotPanel>& panels) {
  std::vector<double> sizes;
  std::vector<std::string> names;  // in order of first appearance: color i is names[i]'s
  for (const PlotPanel& panel : panels) {
    for (const PlotSeries& series : panel.series) {
      if (std::find(names.begin(), names.end(), series.name) == names.end()) {
        names.push_back(series.name);
      }
      for (const auto& [x, y] : series.points) {
        if (x > 0) sizes.push_back(x);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) sizes.push_back(1);
  const double x_min = std::log2(sizes.front()) - 0.3, x_max = std::log2(sizes.back()) + 0.3;
  const auto color_of = [&names](const std::string& name) {
    const size_t index = std::find(names.begin(), names.end(), name) - names.begin();
    return kColors[index % (sizeof(kColors) / sizeof(kColors[0]))];
  };

  const int rows = static_cast<int>((panels.size() + 1) / 2);
  const double legend_top = 20 + rows * kRowHeight;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1100\" height=\"%.0f\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      legend_top + 18 * (names.size() + 1));
  for (size_t i = 0; i < panels.size(); ++i) {
    const PlotPanel& panel = panels[i];
    const auto [y_min, y_max] = YRange(panel);
    const Frame frame{kColumnLeft[i % 2], 40 + kRowHeight * (i / 2), x_min, x_max, y_min, y_max,
                      panel.log_y};
    Axes(svg, frame, panel, sizes);
    for (const PlotSeries& series : panel.series) {
      Polyline(svg, frame, panel, series, color_of(series.name));
    }
  }
  double legend_y = legend_top;
  for (const std::string& name : names) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"80\" y1=\"%.0f\" x2=\"110\" y2=\"%.0f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"118\" y=\"%.0f\" font-size=\"12\">%s"
                          "</text>\n",
                          legend_y, legend_y, color_of(name), legend_y + 4, Escape(name));
    legend_y += 18;
  }
  svg += "</svg>\n";
  return svg;
}

absl::StatusOr<std::vector<PlotPanel>> ParsePlotTable(absl::string_view table) {
  std::vector<PlotPanel> panels;
  const auto panel_named = [&panels](absl::string_view title) -> PlotPanel& {
    for (PlotPanel& panel : panels) {
      if (panel.title == title) return panel;
    }
    panels.emplace_back().title = std::string(title);
    return panels.back();
  };
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    const auto invalid = [line_number](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrFormat("plot table line %d: %s", line_number, why));
    };
    if (fields[0] == "panel") {
      if ((fields.size() != 3 && fields.size() != 4) ||
          (fields[2] != "log" && fields[2] != "linear")) {
        return invalid("a panel line is: panel <TAB> title <TAB> log|linear [<TAB> x label]");
      }
      PlotPanel& panel = panel_named(fields[1]);
      panel.log_y = fields[2] == "log";
      if (fields.size() == 4) panel.x_label = std::string(fields[3]);
      continue;
    }
    if (fields.size() != 4 && fields.size() != 5) {
      return invalid("a point is: panel <TAB> series <TAB> bytes <TAB> value [<TAB> style]");
    }
    double bytes = 0, value = 0;
    if (!absl::SimpleAtod(fields[2], &bytes) || !(bytes > 0)) {
      return invalid(absl::StrFormat("bytes \"%s\" is not a positive number", fields[2]));
    }
    if (!absl::SimpleAtod(fields[3], &value) || !std::isfinite(value)) {
      return invalid(absl::StrFormat("value \"%s\" is not a number", fields[3]));
    }
    LineStyle style = LineStyle::kSolid;
    if (fields.size() == 5) {
      if (fields[4] == "dotted") {
        style = LineStyle::kDotted;
      } else if (fields[4] == "dashed") {
        style = LineStyle::kDashed;
      } else if (fields[4] != "solid") {
        return invalid(absl::StrFormat("style \"%s\" is not solid, dotted or dashed", fields[4]));
      }
    }
    PlotPanel& panel = panel_named(fields[0]);
    auto series = std::find_if(panel.series.begin(), panel.series.end(), [&](const PlotSeries& s) {
      return s.name == fields[1] && s.style == style;
    });
    if (series == panel.series.end()) {
      panel.series.push_back(PlotSeries{std::string(fields[1]), style, {}});
      series = panel.series.end() - 1;
    }
    series->points.emplace_back(bytes, value);
  }
  for (PlotPanel& panel : panels) {
    for (PlotSeries& series : panel.series) {
      std::stable_sort(series.points.begin(), series.points.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
  }
  return panels;
}

}  // namespace hetps::bench
