#include "worker/internal/client_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cycle_clock.h"
#include "common/version.h"

namespace hetps::internal {
namespace {

constexpr const char* kOpNames[ClientMetrics::kOps] = {"push", "pull", "push_pull"};

}  // namespace

void ClientMetrics::Completed(Op op, const absl::Status& status, int64_t start_ticks) {
  int code = static_cast<int>(status.code());
  if (code < 0 || code >= kCodes) code = static_cast<int>(absl::StatusCode::kUnknown);
  operations[op][code].fetch_add(1, std::memory_order_relaxed);
  duration[op].ObserveTicks(CycleClock::Now() - start_ticks);
}

std::string ClientMetrics::Render(const ClientOptions& options) const {
  ExpositionWriter out;
  out.Family("hetps_client_info", "gauge",
             "Always 1; the labels describe the worker (job, rank, world size, shard count, "
             "transport, hetps version).");
  out.Sample("hetps_client_info",
             {{"job", options.job_id},
              {"rank", absl::StrCat(options.rank)},
              {"world_size", absl::StrCat(options.world_size)},
              {"num_shards", absl::StrCat(options.servers.size())},
              {"transport", options.transport},
              {"version", Version()}},
             1);
  out.Family("hetps_client_operations_total", "counter",
             "Data operations completed, by kind and status code.");
  for (int op = 0; op < kOps; ++op) {
    for (int code = 0; code < kCodes; ++code) {
      const uint64_t count = operations[op][code].load(std::memory_order_relaxed);
      if (count == 0 && code != 0) continue;
      out.Sample("hetps_client_operations_total",
                 {{"op", kOpNames[op]},
                  {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}},
                 static_cast<double>(count));
    }
  }
  out.Family("hetps_client_operation_duration_seconds", "histogram",
             "Time from starting a data operation to its completion, by kind.");
  for (int op = 0; op < kOps; ++op) {
    out.Histogram("hetps_client_operation_duration_seconds", {{"op", kOpNames[op]}}, duration[op]);
  }
  out.Family("hetps_client_sent_payload_bytes_total", "counter",
             "Payload bytes (gradients) sent in data requests.");
  out.Sample("hetps_client_sent_payload_bytes_total", {},
             static_cast<double>(sent_bytes.load(std::memory_order_relaxed)));
  out.Family("hetps_client_received_payload_bytes_total", "counter",
             "Payload bytes (weights) received in answers.");
  out.Sample("hetps_client_received_payload_bytes_total", {},
             static_cast<double>(received_bytes.load(std::memory_order_relaxed)));
  out.Family("hetps_client_retries_total", "counter",
             "Messages sent again: the shard was unreachable, or its partitions had moved to "
             "the other copy.");
  out.Sample("hetps_client_retries_total", {}, static_cast<double>(retries->load()));
  out.Family("hetps_client_ps_wait_seconds_total", "counter",
             "Time the job's threads spent waiting for the parameter server (in "
             "Operation::Wait). Its rate near 1 per training thread: the step waits on the PS.");
  out.Sample("hetps_client_ps_wait_seconds_total", {}, waited_nanoseconds.load() / 1e9);
  WriteProcessMetrics(out);
  return out.Take();
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> ServeClientMetrics(const ClientOptions* options,
                                                                 const ClientMetrics* metrics) {
  return HttpEndpoint::Start(
      absl::StrCat(options->metrics_host, ":", options->metrics_port),
      {{"/metrics",
        [metrics, options] {
          return HttpEndpoint::Reply{200, std::string(kPrometheusTextType),
                                     metrics->Render(*options)};
        }},
       {"/healthz", [] {
          return HttpEndpoint::Reply{200, "text/plain; charset=utf-8", "ok\n"};
        }}});
}

}  // namespace hetps::internal
