// Counters a shard keeps about its traffic, reported by the Stats call and, in Prometheus' text
// format, at /metrics (server/shard_metrics.cc). Lock-free; any thread.
#ifndef HETPS_SERVER_METRICS_H_
#define HETPS_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "common/cycle_clock.h"
#include "common/prometheus.h"
#include "proto/ps.pb.h"

namespace hetps::server {

struct ShardMetrics {
  std::atomic<uint64_t> data_requests{0};
  std::atomic<uint64_t> push_items{0};
  std::atomic<uint64_t> pull_items{0};
  std::atomic<uint64_t> payload_bytes_received{0};
  std::atomic<uint64_t> payload_bytes_sent{0};
  std::atomic<uint64_t> failed_requests{0};
  std::atomic<uint64_t> pushes_refused{0};  // push items answered with an error, not applied
  std::atomic<uint64_t> tensors_dropped{0};
  std::atomic<int64_t> requests_waiting{0};     // now, not a total
  std::atomic<int64_t> checkpoints_waiting{0};  // now, not a total

  // Requests answered, by method and status code; unknown methods count as UNSPECIFIED.
  static constexpr int kMethods = hetps::v1::Method_ARRAYSIZE;
  static constexpr int kCodes = 17;  // absl::StatusCode's canonical codes, OK to UNAUTHENTICATED
  std::array<std::array<std::atomic<uint64_t>, kCodes>, kMethods> requests{};

  // Latencies, timed only while a metrics endpoint is served (`timed`, set before the shard
  // serves): the clock reads are the one cost that the counters above do not already have.
  bool timed = false;
  std::array<LatencyHistogram, kMethods> request_duration;  // arrival to answer
  LatencyHistogram apply_duration;        // one partition's optimizer update (or sum)
  LatencyHistogram replication_duration;  // a batch sent to the backup until it applied it

  static int MethodIndex(int method) {
    return method > 0 && method < kMethods ? method : hetps::v1::METHOD_UNSPECIFIED;
  }
  // When a request arrived (CycleClock ticks), for Answered; 0 when not timed.
  int64_t Start() const { return timed ? CycleClock::Now() : 0; }
  void Answered(int method, const absl::Status& status, int64_t start) {
    int code = static_cast<int>(status.code());
    if (code < 0 || code >= kCodes) code = static_cast<int>(absl::StatusCode::kUnknown);
    Add(requests[method][code], 1);
    if (start != 0) request_duration[method].ObserveTicks(CycleClock::Now() - start);
  }

  template <typename Counter>
  static void Add(std::atomic<Counter>& counter, std::type_identity_t<Counter> n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_METRICS_H_
