// ClientMetrics: what a worker shows an operator at ClientOptions::metrics_port: its data
// operations by kind and outcome, their latency, bytes each way, retries, and the time the job
// waited on the parameter server (threads blocked in Operation::Wait) -- the figure that says
// whether the GPUs are starved by the PS. Prometheus' text format, hetps_client_ prefix.
//
// Lock-free counting; any thread.
#ifndef HETPS_WORKER_INTERNAL_CLIENT_METRICS_H_
#define HETPS_WORKER_INTERNAL_CLIENT_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_endpoint.h"
#include "common/prometheus.h"
#include "worker/client.h"
#include "worker/options.h"

namespace hetps::internal {

struct ClientMetrics {
  enum Op { kPush, kPull, kPushPull, kOps };
  static constexpr int kCodes = 17;

  std::array<std::array<std::atomic<uint64_t>, kCodes>, kOps> operations{};
  std::array<LatencyHistogram, kOps> duration;  // start to completion
  std::atomic<uint64_t> sent_bytes{0};          // payloads of data requests sent
  std::atomic<uint64_t> received_bytes{0};      // payloads of answers received
  // Messages sent again (shard unreachable, or its partitions moved to the other copy).
  const std::shared_ptr<std::atomic<uint64_t>> retries = std::make_shared<std::atomic<uint64_t>>(0);
  // Nanoseconds threads spent blocked in Operation::Wait (OperationState::MeasureIn).
  std::atomic<int64_t> waited_nanoseconds{0};

  // An operation started at `start_ticks` (CycleClock) ended with `status`.
  void Completed(Op op, const absl::Status& status, int64_t start_ticks);
  std::string Render(const ClientOptions& options) const;
};

// The metrics `client` counts in (a client made by Client::Create with
// ClientOptions::metrics_port); null otherwise.
std::shared_ptr<ClientMetrics> MetricsOf(Client* client);

// Serves `metrics` at http://<options.metrics_host>:<metrics_port>/metrics, with /healthz.
// `options` and `metrics` must outlive the endpoint.
absl::StatusOr<std::unique_ptr<HttpEndpoint>> ServeClientMetrics(const ClientOptions* options,
                                                                 const ClientMetrics* metrics);

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_CLIENT_METRICS_H_
