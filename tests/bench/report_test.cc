#include "bench/report.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/json.h"
#include "gtest/gtest.h"

namespace hetps::bench {
namespace {

std::vector<BenchResult> Sample() {
  BenchResult a;
  a.transport = "grpc";
  a.op = "pushpull";
  a.bytes = 4096;
  a.workers = 2;
  a.shards = 2;
  a.dtype = "bf16";
  a.samples = 1000;
  a.p50_us = 12.5;
  a.p90_us = 20;
  a.p99_us = 31.25;
  a.p999_us = 40;
  a.max_us = 123.456789;
  a.gbps = 0.75;
  a.ops_per_s = 91552.734375;
  a.wrong = 3;
  a.floor_p50_us = 6.25;
  a.floor_gbps = 1.5;
  BenchResult b = a;
  b.op = "pull";
  b.bytes = 1 << 20;
  b.wrong = 0;
  return {a, b};
}

TEST(ReportTest, JsonHasTheDocumentedShapeAndParsesBack) {
  JsonValue config = JsonValue::Object();
  config.Set("mode", "embedded").Set("workers", 2).Set("note", "quote \" and \\ and\nnewline");
  const std::string text = ResultsJson(config, Sample());
  absl::StatusOr<JsonValue> parsed = ParseJson(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const JsonValue* parsed_config = parsed->Find("config");
  ASSERT_NE(parsed_config, nullptr);
  EXPECT_EQ(parsed_config->Find("note")->as_string(), "quote \" and \\ and\nnewline");
  const JsonValue* results = parsed->Find("results");
  ASSERT_NE(results, nullptr);
  ASSERT_EQ(results->items().size(), 2u);
  const JsonValue& first = results->items()[0];
  for (const char* key :
       {"transport", "op", "bytes", "workers", "shards", "dtype", "p50_us", "p90_us", "p99_us",
        "p999_us", "max_us", "gbps", "ops_per_s", "wrong", "floor_p50_us", "floor_gbps"}) {
    EXPECT_NE(first.Find(key), nullptr) << key;
  }
  EXPECT_EQ(first.Find("transport")->as_string(), "grpc");
  EXPECT_EQ(first.Find("bytes")->as_number(), 4096);
  EXPECT_EQ(first.Find("max_us")->as_number(), 123.456789);
  EXPECT_EQ(first.Find("ops_per_s")->as_number(), 91552.734375);
  EXPECT_EQ(first.Find("wrong")->as_number(), 3);
  EXPECT_EQ(results->items()[1].Find("bytes")->as_number(), 1 << 20);
}

TEST(ReportTest, CsvHasTheJsonFieldsInOrderAndParsesBack) {
  const std::string csv = ResultsCsv(Sample());
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  EXPECT_EQ(header, ResultFields());
  std::vector<std::string> row = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(row.size(), header.size());
  auto column = [&](const std::string& name) {
    return row[std::find(header.begin(), header.end(), name) - header.begin()];
  };
  EXPECT_EQ(column("op"), "pushpull");
  EXPECT_EQ(column("dtype"), "bf16");
  double value = 0;
  ASSERT_TRUE(absl::SimpleAtod(column("max_us"), &value));
  EXPECT_EQ(value, 123.456789);
  ASSERT_TRUE(absl::SimpleAtod(column("p99_us"), &value));
  EXPECT_EQ(value, 31.25);
}

TEST(ReportTest, TableAndPlotShowEveryResult) {
  const std::string table = ResultsTable(Sample());
  EXPECT_NE(table.find("pushpull"), std::string::npos);
  EXPECT_NE(table.find("1M"), std::string::npos);
  EXPECT_NE(table.find("2.00"), std::string::npos);  // p50 over the floor's
  const std::string svg = ResultsSvg(Sample());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("grpc pushpull"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find(">message size (bytes)</text>"), std::string::npos);  // both x axes
  EXPECT_EQ(ResultsSvg({}).rfind("<svg", 0), 0u);  // nothing to plot still makes a picture
}

TEST(JsonTest, ParserRefusesMalformedText) {
  for (const char* bad :
       {"", "{", "[1,", "{\"a\" 1}", "{\"a\":}", "[1] 2", "tru", "\"open", "{1: 2}"}) {
    EXPECT_EQ(ParseJson(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  absl::StatusOr<JsonValue> ok = ParseJson(" {\"a\": [1, -2.5e3, true, null, \"x\"]} ");
  ASSERT_TRUE(ok.ok()) << ok.status();
  const auto& items = ok->Find("a")->items();
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[1].as_number(), -2500);
  EXPECT_TRUE(items[2].as_bool());
  EXPECT_TRUE(items[3].is_null());
}

}  // namespace
}  // namespace hetps::bench
