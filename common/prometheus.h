// Prometheus text exposition (format 0.0.4) without a metrics registry: each component writes
// its figures when scraped, from the counters it keeps anyway, so nothing is registered, looked
// up or locked on a hot path. The only metric kept for Prometheus alone is the latency
// histogram, whose Observe() is a few relaxed atomic adds.
//
//   ExpositionWriter out;
//   out.Family("hetps_shard_requests_total", "counter", "Requests answered.");
//   out.Sample("hetps_shard_requests_total", {{"method", "push"}, {"code", "OK"}}, 12);
//   out.Family("hetps_shard_request_duration_seconds", "histogram", "Time to answer a request.");
//   out.Histogram("hetps_shard_request_duration_seconds", {{"method", "push"}}, histogram);
//   std::string text = out.Take();
//
// A family's samples must follow its Family() line, before the next family's.
#ifndef HETPS_COMMON_PROMETHEUS_H_
#define HETPS_COMMON_PROMETHEUS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/cycle_clock.h"

namespace hetps {

// Durations in buckets from 10 us to 100 s (1, 2.5, 5 per decade): a small push over shared
// memory up to a BSP pull waiting for a slow step. Lock-free; any thread.
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 22;  // upper bounds; one more count holds +Inf
  static const std::array<double, kBuckets>& UpperBoundsSeconds();

  void Observe(absl::Duration duration) { ObserveNanoseconds(absl::ToInt64Nanoseconds(duration)); }
  // An interval of CycleClock ticks (common/cycle_clock.h): the cheap way on hot paths.
  void ObserveTicks(int64_t ticks) {
    ObserveNanoseconds(
        static_cast<int64_t>(static_cast<double>(ticks) * CycleClock::NanosecondsPerTick()));
  }
  void ObserveNanoseconds(int64_t nanoseconds);

  struct Snapshot {
    std::array<uint64_t, kBuckets + 1> counts{};  // per bucket, not cumulative; last: +Inf
    uint64_t count = 0;
    double sum_seconds = 0;
  };
  // Counts read one by one while others may observe: good enough for a scrape.
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_nanoseconds_{0};
};

using Label = std::pair<absl::string_view, absl::string_view>;
using Labels = std::initializer_list<Label>;

class ExpositionWriter {
 public:
  // `type`: "counter", "gauge" or "histogram". Names and help text are the caller's constants.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  // Label values are escaped; any value may be passed.
  void Sample(absl::string_view name, Labels labels, double value);
  void Histogram(absl::string_view name, Labels labels, const LatencyHistogram& histogram);
  std::string Take() { return std::move(text_); }

 private:
  void WriteLabels(Labels labels, absl::string_view extra_name = {},
                   absl::string_view extra_value = {});

  std::string text_;
};

// The conventional process_* figures (CPU time, resident and virtual memory, open files, start
// time) of the calling process, from /proc; what is not readable is left out.
void WriteProcessMetrics(ExpositionWriter& out);

}  // namespace hetps

#endif  // HETPS_COMMON_PROMETHEUS_H_
