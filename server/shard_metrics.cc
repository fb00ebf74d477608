// What a shard shows an operator: its /metrics page in Prometheus' text format, and whether it
// serves (/readyz). Names follow Prometheus' conventions: hetps_shard_ prefix, base units,
// _total for counters.
#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/prometheus.h"
#include "common/version.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

// "push_pull" for METHOD_PUSH_PULL.
std::string MethodLabel(int method) {
  std::string name = hetps::v1::Method_Name(static_cast<hetps::v1::Method>(method));
  if (absl::StartsWith(name, "METHOD_")) name = name.substr(7);
  return absl::AsciiStrToLower(name);
}

std::string CodeLabel(int code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// The methods that every dashboard plots: their series exist from the start (a series that
// appears with its first request hides that request from rate()).
bool AlwaysShown(int method) {
  return method == hetps::v1::METHOD_PUSH || method == hetps::v1::METHOD_PULL ||
         method == hetps::v1::METHOD_PUSH_PULL || method == hetps::v1::METHOD_BARRIER;
}

}  // namespace

absl::Status Shard::CheckServing() const {
  if (stopped_.load()) {
    return absl::UnavailableError(
        absl::StrFormat("shard %d is shutting down", options_.shard_index));
  }
  if (!serving_.load()) {
    return absl::UnavailableError(absl::StrFormat(
        "shard %d is starting: it serves once it has joined the cluster and listens",
        options_.shard_index));
  }
  return CheckLease();
}

std::string Shard::RenderMetrics() const {
  const hetps::v1::StatsResponse stats = Stats();
  const ShardMetrics& metrics = *metrics_;
  ExpositionWriter out;
  const std::string shard = absl::StrCat(options_.shard_index);

  out.Family("hetps_shard_info", "gauge",
             "Always 1; the labels describe the shard (job, index, shard and worker counts, "
             "replicas, hetps version).");
  out.Sample("hetps_shard_info",
             {{"job", options_.job_id},
              {"shard", shard},
              {"num_shards", absl::StrCat(options_.num_shards)},
              {"num_workers", absl::StrCat(options_.num_workers)},
              {"replicas", absl::StrCat(replication_on_ ? options_.replicas : 1)},
              {"version", Version()}},
             1);
  out.Family("hetps_shard_serving", "gauge",
             "1 while the shard serves (not starting or stopping, and holding its etcd lease if "
             "replicated), else 0.");
  out.Sample("hetps_shard_serving", {}, CheckServing().ok() ? 1 : 0);

  out.Family("hetps_shard_requests_total", "counter",
             "Requests answered, by method and status code.");
  for (int method = 0; method < ShardMetrics::kMethods; ++method) {
    if (!hetps::v1::Method_IsValid(method)) continue;
    const std::string method_label = MethodLabel(method);
    for (int code = 0; code < ShardMetrics::kCodes; ++code) {
      const uint64_t count = metrics.requests[method][code].load(std::memory_order_relaxed);
      if (count == 0 && !(code == 0 && AlwaysShown(method))) continue;
      out.Sample("hetps_shard_requests_total",
                 {{"method", method_label}, {"code", CodeLabel(code)}}, static_cast<double>(count));
    }
  }
  if (metrics.timed) {
    out.Family("hetps_shard_request_duration_seconds", "histogram",
               "Time from a request's arrival to its answer, by method (a BSP pull includes the "
               "wait for the other workers' pushes, a barrier the wait for the other workers).");
    for (int method = 0; method < ShardMetrics::kMethods; ++method) {
      if (!hetps::v1::Method_IsValid(method)) continue;
      if (!AlwaysShown(method) && metrics.request_duration[method].Read().count == 0) continue;
      out.Histogram("hetps_shard_request_duration_seconds", {{"method", MethodLabel(method)}},
                    metrics.request_duration[method]);
    }
    out.Family("hetps_shard_optimizer_apply_duration_seconds", "histogram",
               "Time of one partition's update (the optimizer's step, or the sum in sum-only "
               "mode).");
    out.Histogram("hetps_shard_optimizer_apply_duration_seconds", {}, metrics.apply_duration);
  }
  out.Family("hetps_shard_items_total", "counter",
             "Partition items of data requests, by kind (a push-pull counts as both).");
  out.Sample("hetps_shard_items_total", {{"kind", "push"}},
             static_cast<double>(stats.push_items()));
  out.Sample("hetps_shard_items_total", {{"kind", "pull"}},
             static_cast<double>(stats.pull_items()));
  out.Family("hetps_shard_received_payload_bytes_total", "counter",
             "Payload bytes (gradients, initial values, state) received in requests.");
  out.Sample("hetps_shard_received_payload_bytes_total", {},
             static_cast<double>(stats.payload_bytes_received()));
  out.Family("hetps_shard_sent_payload_bytes_total", "counter",
             "Payload bytes (weights, state) sent in answers.");
  out.Sample("hetps_shard_sent_payload_bytes_total", {},
             static_cast<double>(stats.payload_bytes_sent()));
  out.Family("hetps_shard_pushes_refused_total", "counter",
             "Push items answered with an error without being applied (an ASP push older than "
             "the replay window, a BSP step of another run).");
  out.Sample("hetps_shard_pushes_refused_total", {}, static_cast<double>(stats.pushes_refused()));
  out.Family("hetps_shard_tensors_dropped_total", "counter",
             "Tensors dropped (Client::Drop, ps-ctl drop) since the shard started.");
  out.Sample("hetps_shard_tensors_dropped_total", {}, static_cast<double>(stats.tensors_dropped()));

  out.Family("hetps_shard_requests_waiting", "gauge",
             "Requests waiting now for a partition version (pulls of a step that other workers "
             "have not pushed yet).");
  out.Sample("hetps_shard_requests_waiting", {}, static_cast<double>(stats.requests_waiting()));
  out.Family("hetps_shard_checkpoints_waiting", "gauge",
             "Checkpoints asked for that wait for partitions to reach their step.");
  out.Sample("hetps_shard_checkpoints_waiting", {},
             static_cast<double>(stats.checkpoints_waiting()));
  {
    absl::MutexLock lock(&connections_mu_);
    absl::flat_hash_set<uint32_t> ranks;
    for (const auto& [connection, rank] : worker_connections_) ranks.insert(rank);
    out.Family("hetps_shard_connected_workers", "gauge",
               "Workers (distinct ranks) with a connection open to this shard.");
    out.Sample("hetps_shard_connected_workers", {}, static_cast<double>(ranks.size()));
    // A peer may hold two connections (gRPC's bulk one, TransportOptions::grpc_bulk_port).
    absl::flat_hash_set<uint32_t> peers;
    for (const auto& [connection, peer] : peer_connections_) peers.insert(peer);
    out.Family("hetps_shard_peer_connections", "gauge",
               "Other shards (distinct) with a connection open to this one (replication).");
    out.Sample("hetps_shard_peer_connections", {}, static_cast<double>(peers.size()));
  }

  out.Family("hetps_shard_tensors", "gauge", "Tensors declared.");
  out.Sample("hetps_shard_tensors", {}, static_cast<double>(stats.num_tensors()));
  out.Family("hetps_shard_partitions", "gauge",
             "Partitions held, by role: served by this shard, or backup copies of another "
             "shard's.");
  out.Sample("hetps_shard_partitions", {{"role", "served"}},
             static_cast<double>(stats.num_partitions()));
  out.Sample("hetps_shard_partitions", {{"role", "backup"}},
             static_cast<double>(stats.backup_partitions()));
  out.Family("hetps_shard_parameter_bytes", "gauge", "fp32 weights of the served partitions.");
  out.Sample("hetps_shard_parameter_bytes", {}, static_cast<double>(stats.parameter_bytes()));
  out.Family("hetps_shard_optimizer_state_bytes", "gauge",
             "Optimizer state (momentum, Adam moments) of the served partitions.");
  out.Sample("hetps_shard_optimizer_state_bytes", {},
             static_cast<double>(stats.optimizer_state_bytes()));
  {
    absl::MutexLock lock(&memory_mu_);
    out.Family("hetps_shard_tensor_memory_bytes", "gauge",
               "Tensor memory set aside (weights, optimizer state, gradient buffers; backups "
               "included).");
    out.Sample("hetps_shard_tensor_memory_bytes", {}, static_cast<double>(reserved_bytes_));
  }
  out.Family("hetps_shard_tensor_memory_limit_bytes", "gauge",
             "The cap on tensor memory (--max_memory_bytes, or 90% of the machine's or "
             "container's memory); declarations beyond it are refused.");
  out.Sample("hetps_shard_tensor_memory_limit_bytes", {},
             static_cast<double>(options_.max_memory_bytes));
  out.Family("hetps_shard_partition_version", "gauge",
             "Smallest and largest version (applied steps) among the served partitions.");
  out.Sample("hetps_shard_partition_version", {{"bound", "min"}},
             static_cast<double>(stats.min_version()));
  out.Sample("hetps_shard_partition_version", {{"bound", "max"}},
             static_cast<double>(stats.max_version()));

  if (replication_on_) {
    int64_t in_flight = 0;
    {
      absl::MutexLock lock(&replicators_mu_);
      for (const auto& [backup, replicator] : replicators_) in_flight += replicator->in_flight();
    }
    out.Family("hetps_shard_replication_batches_in_flight", "gauge",
               "Batches of changes sent to backups and not yet applied there (replication "
               "lag; acknowledgements of the partitions concerned wait for them).");
    out.Sample("hetps_shard_replication_batches_in_flight", {}, static_cast<double>(in_flight));
    out.Family("hetps_shard_replication_resends_total", "counter",
               "Batches sent to a backup again after a failed attempt.");
    out.Sample("hetps_shard_replication_resends_total", {},
               static_cast<double>(stats.replication_resends()));
    if (metrics.timed) {
      out.Family("hetps_shard_replication_duration_seconds", "histogram",
                 "Time from handing a batch of changes to the backup until it applied it.");
      out.Histogram("hetps_shard_replication_duration_seconds", {}, metrics.replication_duration);
    }
    uint32_t served_groups = 0;
    for (uint32_t group = 0; group < options_.num_shards; ++group) {
      if (group_server_[group].load() == options_.shard_index) ++served_groups;
    }
    out.Family("hetps_shard_served_groups", "gauge",
               "Groups of partitions this shard serves: 1 normally, 2 after taking over a lost "
               "shard's, 0 while it rejoins.");
    out.Sample("hetps_shard_served_groups", {}, served_groups);
    out.Family("hetps_shard_lease_held", "gauge", "1 while the shard holds its etcd lease.");
    out.Sample("hetps_shard_lease_held", {}, CheckLease().ok() ? 1 : 0);
  }

  if (!checkpoints_.empty()) {
    out.Family("hetps_shard_last_checkpoint_step", "gauge",
               "Newest step of which this shard's checkpoint part is durable (0: none).");
    out.Sample("hetps_shard_last_checkpoint_step", {},
               static_cast<double>(stats.last_checkpoint()));
    absl::Time written = absl::InfinitePast();
    for (const auto& writer : checkpoints_) {
      if (writer != nullptr) written = std::max(written, writer->last_durable_time());
    }
    if (written != absl::InfinitePast()) {
      out.Family("hetps_shard_last_checkpoint_timestamp_seconds", "gauge",
                 "When that checkpoint part became durable, in seconds since the Unix epoch.");
      out.Sample("hetps_shard_last_checkpoint_timestamp_seconds", {},
                 absl::ToDoubleSeconds(written - absl::UnixEpoch()));
      out.Family("hetps_shard_checkpoint_age_seconds", "gauge",
                 "Seconds since the newest checkpoint part became durable.");
      out.Sample("hetps_shard_checkpoint_age_seconds", {},
                 absl::ToDoubleSeconds(hetps::Now() - written));
    }
  }
  WriteProcessMetrics(out);
  return out.Take();
}

}  // namespace hetps::server
