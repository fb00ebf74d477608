// ps-plot: draws a sweep's figures as an SVG (bench/plot.h), from the tab-separated table that
// the sweep scripts in bench/ write (PLOT=out.svg).
//
//   printf 'panel\tlatency (us)\tlog\nlatency (us)\thetps\t4096\t12.5\n' | ps-plot --out out.svg
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "bench/plot.h"
#include "common/command_line.h"

ABSL_FLAG(std::string, in, "-", "The table to draw; - reads standard input");
ABSL_FLAG(std::string, out, "", "The SVG file to write");

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Draws a sweep's tab-separated table (panel, series, bytes, value) as "
                          "an SVG of line charts against message size.");
  const std::string in = absl::GetFlag(FLAGS_in), out = absl::GetFlag(FLAGS_out);
  if (out.empty()) hetps::ExitWithUsageError("--out names the SVG file to write");
  std::stringstream table;
  if (in == "-") {
    table << std::cin.rdbuf();
  } else {
    std::ifstream file(in);
    if (!file) hetps::ExitWithUsageError("cannot read --in " + in);
    table << file.rdbuf();
  }
  const absl::StatusOr<std::vector<hetps::bench::PlotPanel>> panels =
      hetps::bench::ParsePlotTable(table.str());
  if (!panels.ok()) {
    std::fprintf(stderr, "ps-plot: %s\n", std::string(panels.status().message()).c_str());
    return 2;
  }
  std::ofstream file(out);
  file << hetps::bench::PlotSvg(*panels);
  file.close();
  if (!file) {
    std::fprintf(stderr, "ps-plot: cannot write %s\n", out.c_str());
    return 1;
  }
  return 0;
}
