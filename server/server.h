// ShardServer: one shard of a hetps cluster, listening for workers. This is what `ps-server`
// runs; it can also be embedded (tests start shards in-process this way).
//
//   ServerOptions options;
//   options.listen_address = "0.0.0.0:7000";
//   options.shard_index = 0;
//   options.num_shards = 2;
//   options.num_workers = 4;
//   HETPS_ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> server, ShardServer::Start(options));
//   ...
//   server->Shutdown();
//
// Thread-safe.
#ifndef HETPS_SERVER_SERVER_H_
#define HETPS_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http_endpoint.h"
#include "proto/ps.pb.h"
#include "server/shard.h"
#include "transport/transport.h"

namespace hetps::server {

class Shard;

struct ServerOptions {
  // --- Affects behaviour ---

  // This shard's place in the cluster; every worker must list the shards in index order.
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  // Workers (world size) of the job; BSP waits for this many gradients per step.
  uint32_t num_workers = 1;
  // Workers of another job are refused.
  std::string job_id = "hetps";
  // BSP: how many steps ahead of a partition's version a push may be.
  uint32_t max_pending_steps = 4;
  // The longest a pull or barrier waits, whatever deadline the worker asked for.
  absl::Duration max_wait = absl::Minutes(10);
  // Tensor memory (weights, optimizer state, a gradient buffer per partition) the shard may
  // hold; declarations beyond it get ResourceExhausted instead of running the machine out of
  // memory. 0: 90% of the machine's memory.
  uint64_t max_memory_bytes = 0;
  // The job's shared secret (see common/auth_token.h); when set, only workers that present it
  // are served, every other connection gets UNAUTHENTICATED. Empty: no authentication.
  std::string auth_token;
  // Consistent checkpoints (server/checkpoint.h): every `checkpoint_every` BSP steps into
  // `checkpoint_dir`, a directory the job's shards share; 0 or empty: none.
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;
  // Start from a checkpoint: a checkpoint directory (its newest committed step) or one step's
  // directory. Start fails, naming the file, for a checkpoint that is missing, corrupt, or of
  // another job, shard count or worker count.
  std::string restore_dir;
  // Copies of each partition: 1, or 2 (each partition also on the next shard, which takes
  // every change before a worker's push is acknowledged, takes the partitions over when their
  // server goes and catches up when it comes back; needs 2 shards or more and etcd).
  // `servers`: every shard's address in shard order, as the shards advertise them in etcd;
  // empty: the address each listens on.
  uint32_t replicas = 1;
  std::vector<std::string> servers;
  // etcd ("host:port"), needed with 2 replicas: the shards hold leases there and find each
  // other; `lease_ttl` (whole seconds) is how long a shard that stops renewing its lease keeps
  // it.
  std::string etcd;
  absl::Duration lease_ttl = absl::Seconds(2);

  // --- Where and how it listens ---

  // "host:port"; port 0 picks a free port (see ShardServer::address()).
  std::string listen_address = "127.0.0.1:0";
  // Transport by name, unless transport_instance is set (tests: in-process). "ucx" listens
  // on UCX and on gRPC at once, so gRPC workers are served too; "grpc" on gRPC only.
  std::string transport = "grpc";
  std::shared_ptr<transport::Transport> transport_instance;
  // UCX: network devices ("auto": lo when listening on a loopback address, UCX's choice
  // otherwise) and busy polling instead of sleeping when idle.
  std::string ucx_net_devices = "auto";
  bool ucx_busy_poll = false;
  // UCX: new clients go to a new UCX worker once this many have left the current one (UCX
  // frees what a departed client held only with the worker).
  int ucx_clients_per_worker = 64;
  // gRPC: the port of the connection for large calls (transport::TransportOptions).
  int grpc_bulk_port = 0;
  // Largest message accepted or sent; clients learn it when they connect.
  size_t max_message_bytes = 64 << 20;
  // Connections (see transport::TransportOptions): one with nothing in progress for
  // idle_timeout is closed (workers reconnect by themselves); a silent peer is found by
  // keepalive pings; a worker's replies not yet taken beyond max_unsent_reply_bytes stop the
  // shard reading its requests. Ignored with transport_instance, which has its own.
  absl::Duration idle_timeout = absl::Minutes(10);
  absl::Duration keepalive_interval = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  size_t max_unsent_reply_bytes = 256 << 20;
  // TLS for gRPC and UCX bootstraps (transport::TransportOptions): this shard's certificate and
  // key, and a CA to require client certificates from; empty: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // "host:port" of an HTTP endpoint with /metrics (Prometheus' text format), /healthz
  // (liveness) and /readyz (200 while the shard serves); port 0 picks a free one (see
  // ShardServer::metrics_address()). Empty: none, and requests are not timed.
  std::string metrics_address;

  // --- Affects performance ---

  // Threads that own partitions and apply updates (0: one per CPU; at most kMaxThreads).
  int threads = 0;
  static constexpr int kMaxThreads = 1024;
};

// The transport settings `options` asks for (what a shard passes to CreateTransport).
transport::TransportOptions TransportOptionsFor(const ServerOptions& options);

class ShardServer {
 public:
  // InvalidArgument for inconsistent options; Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(const ServerOptions& options);
  ~ShardServer();  // Shutdown()
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // The address workers connect to (with the chosen port).
  std::string address() const;
  // The metrics endpoint's address (with the chosen port); empty without one.
  std::string metrics_address() const;
  hetps::v1::StatsResponse Stats() const;
  // An operator's client asked the shard to stop (ps-ctl stop): stop it as on SIGTERM.
  bool stop_requested() const;
  // The step of the restored checkpoint (0: started empty), and the newest checkpoint step of
  // which this shard's part is durable (0: none).
  uint64_t resume_step() const;
  uint64_t last_checkpoint() const;
  // Writes this shard's part of a checkpoint of the current state (what ps-server does on
  // SIGTERM), if it is between two steps: see Shard::CheckpointNow.
  absl::Status CheckpointNow(absl::Duration timeout);
  // Shard::StateDigest: a hash of everything the shard holds (tests).
  uint64_t StateDigest();
  // Shard::PartitionDigests: each partition's, backups included (tests).
  std::vector<Shard::PartitionDigest> PartitionDigests();

  // Answers waiting requests with Unavailable, stops listening and stops the shard's threads.
  // Idempotent; bounded in time.
  void Shutdown();

 private:
  ShardServer() = default;

  std::shared_ptr<transport::Transport> transport_;
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<HttpEndpoint> metrics_endpoint_;  // refers to shard_
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_SERVER_H_
