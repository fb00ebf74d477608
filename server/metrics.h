// Counters a shard keeps about its traffic, reported by the Stats call. Lock-free; any thread.
#ifndef HETPS_SERVER_METRICS_H_
#define HETPS_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace hetps::server {

struct ShardMetrics {
  std::atomic<uint64_t> data_requests{0};
  std::atomic<uint64_t> push_items{0};
  std::atomic<uint64_t> pull_items{0};
  std::atomic<uint64_t> payload_bytes_received{0};
  std::atomic<uint64_t> payload_bytes_sent{0};
  std::atomic<uint64_t> failed_requests{0};
  std::atomic<uint64_t> pushes_refused{0};      // push items answered with an error, not applied
  std::atomic<int64_t> requests_waiting{0};     // now, not a total
  std::atomic<int64_t> checkpoints_waiting{0};  // now, not a total

  template <typename Counter>
  static void Add(std::atomic<Counter>& counter, std::type_identity_t<Counter> n) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_METRICS_H_
