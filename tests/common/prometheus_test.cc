#include "common/prometheus.h"

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hetps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LatencyHistogramTest, BucketsAreCumulativeAndABoundCountsValuesEqualToIt) {
  LatencyHistogram histogram;
  histogram.Observe(absl::Microseconds(10));  // exactly the first bound
  histogram.Observe(absl::Microseconds(11));  // the second bucket (25 us)
  histogram.Observe(absl::Milliseconds(3));   // 5 ms
  histogram.Observe(absl::Seconds(1000));     // beyond the last bound
  histogram.Observe(-absl::Seconds(1));       // a clock step backwards counts as 0
  ExpositionWriter out;
  out.Family("x_seconds", "histogram", "Test.");
  out.Histogram("x_seconds", {{"method", "push"}}, histogram);
  const std::string text = out.Take();
  EXPECT_THAT(text, HasSubstr("# TYPE x_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"1e-05\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"2.5e-05\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"0.0025\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"0.005\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"100\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_bucket{method=\"push\",le=\"+Inf\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_count{method=\"push\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("x_seconds_sum{method=\"push\"} 1000.003021\n"));
}

TEST(ExpositionWriterTest, ValuesReadBackExactlyAndLabelValuesAreEscaped) {
  ExpositionWriter out;
  out.Family("bytes_total", "counter", "Bytes.");
  out.Sample("bytes_total", {}, 123456789012345.0);
  out.Sample("bytes_total", {{"job", "a\"b\\c\nd"}}, 0.1);
  out.Family("gauge", "gauge", "G.");
  out.Sample("gauge", {}, 0.0 / 0.0);
  const std::string text = out.Take();
  EXPECT_THAT(text, HasSubstr("# HELP bytes_total Bytes.\n# TYPE bytes_total counter\n"));
  EXPECT_THAT(text, HasSubstr("bytes_total 123456789012345\n"));
  EXPECT_THAT(text, HasSubstr("bytes_total{job=\"a\\\"b\\\\c\\nd\"} 0.1\n"));
  EXPECT_THAT(text, HasSubstr("gauge NaN\n"));
}

TEST(ProcessMetricsTest, ReportsThisProcess) {
  ExpositionWriter out;
  WriteProcessMetrics(out);
  const std::string text = out.Take();
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_start_time_seconds",
                           "process_open_fds", "process_max_fds"}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + name + " ")) << name;
  }
  EXPECT_THAT(text, Not(HasSubstr("process_resident_memory_bytes 0\n")));
}

}  // namespace
}  // namespace hetps
