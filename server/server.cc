#include "server/server.h"

#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/http_endpoint.h"
#include "common/log.h"
#include "common/memory_limit.h"
#include "common/runtime.h"
#include "common/status_macros.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

absl::Status ValidateOptions(const ServerOptions& options) {
  if (options.num_shards == 0) return absl::InvalidArgumentError("num_shards must be at least 1");
  if (options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard_index %d is out of range for %d shards", options.shard_index, options.num_shards));
  }
  if (options.num_workers == 0) return absl::InvalidArgumentError("num_workers must be at least 1");
  if (options.max_pending_steps == 0) {
    return absl::InvalidArgumentError("max_pending_steps must be at least 1");
  }
  if (options.max_message_bytes < (1 << 20) || options.max_message_bytes > (1u << 31) - 1) {
    return absl::InvalidArgumentError("max_message_bytes must be between 1 MiB and 2 GiB");
  }
  if (options.max_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("max_wait must be positive");
  }
  if (options.checkpoint_every > 0 && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("checkpoint_every needs a checkpoint_dir");
  }
  if (options.replicas < 1 || options.replicas > 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("replicas must be 1 or 2, not %d", options.replicas));
  }
  if (options.replicas == 2 && options.etcd.empty()) {
    return absl::InvalidArgumentError(
        "replicas 2 needs etcd (--etcd host:port): the shards hold leases there and find each "
        "other through it (deploy/local/cluster.sh starts one for a local cluster)");
  }
  if (options.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("the etcd lease must last a second or more");
  }
  if (options.replicas == 2 && options.num_shards < 2) {
    return absl::InvalidArgumentError(
        "replicas 2 needs 2 shards or more: a partition's backup lives on another shard");
  }
  if (!options.servers.empty() && options.servers.size() != options.num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat("servers lists %d addresses for %d shards",
                                                      options.servers.size(), options.num_shards));
  }
  if (options.threads < 0 || options.threads > ServerOptions::kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrFormat("threads must be between 0 and %d, not %d",
                                                      ServerOptions::kMaxThreads, options.threads));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartMetricsEndpoint(const std::string& address,
                                                                   const Shard* shard) {
  auto text = [](int status, std::string body) {
    return HttpEndpoint::Reply{status, "text/plain; charset=utf-8", std::move(body)};
  };
  return HttpEndpoint::Start(
      address,
      {{"/metrics",
        [shard] {
          return HttpEndpoint::Reply{200, std::string(kPrometheusTextType), shard->RenderMetrics()};
        }},
       // Liveness: the process answers.
       {"/healthz", [text] { return text(200, "ok\n"); }},
       // Readiness: it serves workers (see Shard::CheckServing).
       {"/readyz", [shard, text] {
          const absl::Status serving = shard->CheckServing();
          return serving.ok() ? text(200, "serving\n")
                              : text(503, absl::StrCat(serving.message(), "\n"));
        }}});
}

}  // namespace

transport::TransportOptions TransportOptionsFor(const ServerOptions& options) {
  transport::TransportOptions transport_options;
  transport_options.max_message_bytes = options.max_message_bytes;
  transport_options.ucx_net_devices = options.ucx_net_devices;
  if (options.servers.size() == options.num_shards) {
    transport_options.ucx_advertised_address = options.servers[options.shard_index];
  }
  transport_options.ucx_busy_poll = options.ucx_busy_poll;
  transport_options.ucx_clients_per_worker = options.ucx_clients_per_worker;
  transport_options.grpc_bulk_port = options.grpc_bulk_port;
  transport_options.idle_timeout = options.idle_timeout;
  transport_options.keepalive_interval = options.keepalive_interval;
  transport_options.keepalive_timeout = options.keepalive_timeout;
  transport_options.max_unsent_reply_bytes = options.max_unsent_reply_bytes;
  transport_options.tls_cert_file = options.tls_cert_file;
  transport_options.tls_key_file = options.tls_key_file;
  transport_options.tls_ca_file = options.tls_ca_file;
  return transport_options;
}

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(const ServerOptions& options) {
  ConfigureRuntime();
  HETPS_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<ShardServer> server(new ShardServer());
  if (options.transport_instance != nullptr) {
    server->transport_ = options.transport_instance;
  } else {
    const transport::TransportOptions transport_options = TransportOptionsFor(options);
    HETPS_ASSIGN_OR_RETURN(server->transport_,
                           transport::CreateTransport(options.transport, transport_options));
  }
  ShardOptions shard_options;
  shard_options.shard_index = options.shard_index;
  shard_options.num_shards = options.num_shards;
  shard_options.num_workers = options.num_workers;
  shard_options.job_id = options.job_id;
  shard_options.threads = options.threads > 0
                              ? options.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  shard_options.max_pending_steps = options.max_pending_steps;
  shard_options.max_wait = options.max_wait;
  shard_options.max_message_bytes = options.max_message_bytes;
  shard_options.max_memory_bytes = options.max_memory_bytes;
  shard_options.auth_token = options.auth_token;
  shard_options.checkpoint_dir = options.checkpoint_dir;
  shard_options.checkpoint_every = options.checkpoint_every;
  shard_options.replicas = options.replicas;
  shard_options.servers = options.servers;
  shard_options.peer_transport = server->transport_.get();
  shard_options.etcd = options.etcd;
  shard_options.lease_ttl = options.lease_ttl;
  if (shard_options.max_memory_bytes == 0) {
    // 90% of what the process may use: the machine's memory, or its container's limit.
    const MemoryLimit limit = ProcessMemoryLimit();
    shard_options.max_memory_bytes = limit.bytes / 10 * 9;
    LogInfo("shard %d: tensor memory capped at %d bytes, 90%% of %d (%s)", options.shard_index,
            shard_options.max_memory_bytes, limit.bytes, limit.source);
  }
  shard_options.time_requests = !options.metrics_address.empty();
  server->shard_ = std::make_unique<Shard>(shard_options);
  if (!options.metrics_address.empty()) {
    // Before joining the cluster, which may wait for a lost run's lease: probes see a live
    // shard that is not ready yet.
    HETPS_ASSIGN_OR_RETURN(server->metrics_endpoint_,
                           StartMetricsEndpoint(options.metrics_address, server->shard_.get()));
    LogInfo("shard %d: metrics at http://%s/metrics", options.shard_index,
            server->metrics_endpoint_->address());
  }
  if (!options.restore_dir.empty()) {
    HETPS_ASSIGN_OR_RETURN(
        const CheckpointPartData part,
        LoadCheckpointPart(options.restore_dir,
                           CheckpointIdentity{options.job_id, options.shard_index,
                                              options.num_shards, options.num_workers}));
    HETPS_RETURN_IF_ERROR(server->shard_->Restore(part));
    LogInfo("shard %d: restored step %d from %s", options.shard_index, part.header.step(),
            part.path);
  }
  HETPS_RETURN_IF_ERROR(server->shard_->JoinCluster());
  HETPS_ASSIGN_OR_RETURN(server->listener_,
                         server->transport_->Listen(options.listen_address, server->shard_.get()));
  HETPS_RETURN_IF_ERROR(server->shard_->Register(server->listener_->address()));
  return server;
}

ShardServer::~ShardServer() { Shutdown(); }

std::string ShardServer::address() const { return listener_->address(); }

hetps::v1::StatsResponse ShardServer::Stats() const { return shard_->Stats(); }

bool ShardServer::stop_requested() const { return shard_->stop_requested(); }

uint64_t ShardServer::resume_step() const { return shard_->resume_step(); }

uint64_t ShardServer::last_checkpoint() const { return shard_->last_checkpoint(); }

absl::Status ShardServer::CheckpointNow(absl::Duration timeout) {
  return shard_->CheckpointNow(hetps::Now() + timeout);
}

uint64_t ShardServer::StateDigest() { return shard_->StateDigest(); }

std::vector<Shard::PartitionDigest> ShardServer::PartitionDigests() {
  return shard_->PartitionDigests();
}

void ShardServer::Shutdown() {
  if (shard_ == nullptr) return;
  // Waiting pulls are answered first, so the listener's streams can finish promptly.
  shard_->Stop();
  if (listener_ != nullptr) listener_->Shutdown();
  metrics_endpoint_.reset();
}

std::string ShardServer::metrics_address() const {
  return metrics_endpoint_ != nullptr ? metrics_endpoint_->address() : "";
}

}  // namespace hetps::server
