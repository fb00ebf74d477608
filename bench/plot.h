// SVG line charts against message size: the one drawing code behind `ps-bench --plot` and
// `ps-plot` (which the sweep scripts in bench/ feed). Plain SVG, no library: it opens in any
// browser and diffs as text.
#ifndef HETPS_BENCH_PLOT_H_
#define HETPS_BENCH_PLOT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps::bench {

enum class LineStyle { kSolid, kDotted, kDashed };

struct PlotSeries {
  std::string name;  // series of the same name share a color across panels and the legend
  LineStyle style = LineStyle::kSolid;
  std::vector<std::pair<double, double>> points;  // (bytes, value); bytes > 0
};

struct PlotPanel {
  std::string title;
  bool log_y = false;  // a log10 axis (values <= 0 are left out); otherwise linear from 0
  std::string x_label = "message size (bytes)";
  std::vector<PlotSeries> series;
};

// The panels two per row, x a log2 axis labelled with sizes (4K, 1M, ...), a legend below
// naming each series once in its color.
std::string PlotSvg(const std::vector<PlotPanel>& panels);

// The panels of a tab-separated table, what the sweep scripts write for ps-plot. Lines:
//   panel <TAB> TITLE <TAB> log|linear [<TAB> X LABEL]   declares a panel (they keep this order)
//   TITLE <TAB> SERIES <TAB> BYTES <TAB> VALUE [<TAB> solid|dotted|dashed]   one point
// A point's panel need not be declared first (it is then linear, placed where first seen).
// Empty lines and lines starting with '#' are skipped. A malformed line is INVALID_ARGUMENT
// naming its line number.
absl::StatusOr<std::vector<PlotPanel>> ParsePlotTable(absl::string_view table);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_PLOT_H_
