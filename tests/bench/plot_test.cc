#include "bench/plot.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace hetps::bench {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(PlotTableTest, PanelsKeepTheirDeclaredOrderAndAxes) {
  const auto panels = ParsePlotTable(
      "# a comment\n"
      "panel\tspeed-up\tlinear\n"
      "panel\tlatency (us)\tlog\n"
      "latency (us)\thetps\t65536\t24\n"
      "latency (us)\thetps\t4096\t5.5\n"
      "latency (us)\traw\t4096\t4\tdashed\n"
      "speed-up\thetps\t4096\t1.25\n"
      "\n"
      "bandwidth\thetps\t4096\t0.5\r\n");
  ASSERT_TRUE(panels.ok()) << panels.status();
  ASSERT_EQ(panels->size(), 3u);
  EXPECT_EQ((*panels)[0].title, "speed-up");
  EXPECT_FALSE((*panels)[0].log_y);
  EXPECT_EQ((*panels)[1].title, "latency (us)");
  EXPECT_TRUE((*panels)[1].log_y);
  EXPECT_EQ((*panels)[2].title, "bandwidth");  // undeclared: linear, where first seen
  EXPECT_FALSE((*panels)[2].log_y);

  const std::vector<PlotSeries>& latency = (*panels)[1].series;
  ASSERT_EQ(latency.size(), 2u);
  EXPECT_EQ(latency[0].name, "hetps");
  EXPECT_EQ(latency[0].style, LineStyle::kSolid);
  // Sorted by size whatever the order of the lines.
  ASSERT_EQ(latency[0].points.size(), 2u);
  EXPECT_EQ(latency[0].points[0], (std::pair<double, double>{4096, 5.5}));
  EXPECT_EQ(latency[0].points[1], (std::pair<double, double>{65536, 24}));
  EXPECT_EQ(latency[1].name, "raw");
  EXPECT_EQ(latency[1].style, LineStyle::kDashed);
}

TEST(PlotTableTest, AMalformedLineIsRefusedByItsNumber) {
  struct Case {
    const char* table;
    const char* message;
  };
  for (const Case& c : {
           Case{"panel\tx\tcubic\n", "line 1: a panel line"},
           Case{"panel\tx\tlog\tsize\textra\n", "line 1: a panel line"},
           Case{"p\ts\t4096\n", "line 1: a point is"},
           Case{"\np\ts\tfour\t1\n", "line 2: bytes \"four\""},
           Case{"p\ts\t0\t1\n", "line 1: bytes \"0\""},
           Case{"p\ts\t4096\tnan\n", "line 1: value \"nan\""},
           Case{"p\ts\t4096\t1\twavy\n", "line 1: style \"wavy\""},
       }) {
    const auto panels = ParsePlotTable(c.table);
    ASSERT_FALSE(panels.ok()) << c.table;
    EXPECT_EQ(panels.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(panels.status().message().find(c.message), std::string::npos)
        << panels.status().message();
  }
}

TEST(PlotSvgTest, EverySeriesIsDrawnAndNamedOnceInOneColor) {
  const auto panels = ParsePlotTable(
      "panel\tlatency\tlog\n"
      "latency\thetps <sleep>\t4096\t5\n"
      "latency\thetps <sleep>\t16384\t9\n"
      "latency\traw\t4096\t4\tdashed\n"
      "latency\traw\t16384\t0\tdashed\n"  // not drawable on a log axis: left out
      "ratio\thetps <sleep>\t4096\t1.25\n"
      "ratio\thetps <sleep>\t16384\t1.1\n");
  ASSERT_TRUE(panels.ok()) << panels.status();
  const std::string svg = PlotSvg(*panels);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<polyline"), 3u);
  EXPECT_EQ(Count(svg, "<circle"), 5u);
  EXPECT_EQ(Count(svg, "stroke-dasharray=\"8,4\""), 1u);
  // Legend entries, escaped for SVG.
  EXPECT_EQ(Count(svg, ">hetps &lt;sleep&gt;</text>"), 1u);
  EXPECT_EQ(Count(svg, ">raw</text>"), 1u);
  // The same series has the same color in both panels.
  const size_t first = svg.find("<polyline");
  const std::string color = svg.substr(svg.find("stroke=\"", first) + 8, 7);
  EXPECT_EQ(Count(svg, "stroke=\"" + color + "\" stroke-width=\"2\""), 2u);
  // Axis labels name the sizes.
  EXPECT_NE(svg.find(">4K</text>"), std::string::npos);
  EXPECT_NE(svg.find(">16K</text>"), std::string::npos);
}

TEST(PlotSvgTest, APanelNamesItsXAxisAsDeclared) {
  const auto panels = ParsePlotTable(
      "panel\tstep (ms)\tlog\tmodel size (bytes)\n"
      "panel\tratio\tlinear\n"
      "step (ms)\tallreduce\t4194304\t5\n"
      "ratio\tallreduce\t4194304\t1\n");
  ASSERT_TRUE(panels.ok()) << panels.status();
  EXPECT_EQ((*panels)[0].x_label, "model size (bytes)");
  EXPECT_EQ((*panels)[1].x_label, "message size (bytes)");  // the default
  const std::string svg = PlotSvg(*panels);
  EXPECT_EQ(Count(svg, ">model size (bytes)</text>"), 1u);
  EXPECT_EQ(Count(svg, ">message size (bytes)</text>"), 1u);
}

TEST(PlotSvgTest, NothingToPlotStillMakesAPicture) {
  const std::string svg = PlotSvg({});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace hetps::bench
