// Counters a shard keeps about its traffic, reported by the Stats call. Lock-free; any thread.
#ifndef HETPS_SERVER_METRICS_H_
#define HETPS_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>

namespace hetps::server {

struct ShardMetrics {
  std::atomic<uint64_t> data_requests{0};
  std::atomic<uint64_t> push_items{0};
  std::atomic<uint64_t> pull_items{0};
  std::atomic<uint64_t> payload_bytes_received{0};
  std::atomic<uint64_t> payload_bytes_sent{0};
  std::atomic<uint64_t> failed_requests{0};
  std::atomic<uint64_t> pushes_refused{0};  // push items answered with an error, not applied

  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_METRICS_H_
