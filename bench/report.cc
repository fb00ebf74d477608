#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/plot.h"
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

std::string ResultsSvg(const std::vector<BenchResult>& results) {
  // One series per (transport, security, replicas, op); p50 solid, p99 dotted, floor dashed.
  PlotPanel latency{.title = "latency (us, log): p50 solid, p99 dotted, floor p50 dashed",
                    .log_y = true};
  PlotPanel throughput{.title = "throughput (GB/s): hetps solid, floor dashed"};
  std::map<std::string, std::vector<const BenchResult*>> series;
  for (const BenchResult& r : results) {
    const std::string security = r.security == "off" ? "" : " (" + r.security + ")";
    const std::string replicas = r.replicas == 1 ? "" : absl::StrCat(" x", r.replicas);
    series[r.transport + security + replicas + " " + r.op].push_back(&r);
  }
  for (const auto& [name, rows] : series) {
    PlotSeries p50{name, LineStyle::kSolid, {}}, p99{name, LineStyle::kDotted, {}},
        floor_p50{name, LineStyle::kDashed, {}}, gbps{name, LineStyle::kSolid, {}},
        floor_gbps{name, LineStyle::kDashed, {}};
    for (const BenchResult* r : rows) {
      const double x = static_cast<double>(r->bytes);
      p50.points.emplace_back(x, r->p50_us);
      p99.points.emplace_back(x, r->p99_us);
      gbps.points.emplace_back(x, r->gbps);
      if (r->floor_p50_us > 0) floor_p50.points.emplace_back(x, r->floor_p50_us);
      if (r->floor_gbps > 0) floor_gbps.points.emplace_back(x, r->floor_gbps);
    }
    latency.series.insert(latency.series.end(), {p50, p99, floor_p50});
    throughput.series.insert(throughput.series.end(), {gbps, floor_gbps});
  }
  return PlotSvg({latency, throughput});
}

}  // namespace hetps::bench
