// ps-bench's results and the ways it writes them: a table for people, JSON and CSV for scripts,
// and an SVG plot (latency percentiles and throughput against message size).
#ifndef HETPS_BENCH_REPORT_H_
#define HETPS_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/json.h"

namespace hetps::bench {

// One measurement: one transport, one operation, one message size. Figures are defined in
// bench/PERFORMANCE.md.
struct BenchResult {
  std::string transport;
  std::string security = "off";  // off | token | tls | token+tls
  int replicas = 1;              // copies of each partition the shards keep
  std::string metrics = "off";   // on: shards and workers serve /metrics and time requests
  std::string op;
  uint64_t bytes = 0;  // payload bytes of one operation (one direction)
  int workers = 0;
  int shards = 0;
  std::string dtype;
  uint64_t samples = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  double gbps = 0;  // payload GB/s; a push-pull counts its bytes both ways
  double ops_per_s = 0;
  uint64_t wrong = 0;
  // The same transport's raw round trip with the same payload, no parameter-server logic.
  double floor_p50_us = 0;
  double floor_gbps = 0;
};

// {"config": config, "results": [{"transport": ..., ...}, ...]}
std::string ResultsJson(const JsonValue& config, const std::vector<BenchResult>& results);
// A header line, then one line per result, the JSON's fields in the same order.
std::string ResultsCsv(const std::vector<BenchResult>& results);
std::string ResultsTable(const std::vector<BenchResult>& results);
// The table's header, and one row (ps-bench prints each as it is measured).
std::string ResultsTableHeader();
std::string ResultsTableRow(const BenchResult& r);
std::string ResultsSvg(const std::vector<BenchResult>& results);

// The names of a result's fields, in the order JSON and CSV write them.
const std::vector<std::string>& ResultFields();

}  // namespace hetps::bench

#endif  // HETPS_BENCH_REPORT_H_
