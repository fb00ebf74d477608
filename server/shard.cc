#include "server/shard.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth_token.h"
#include "common/cycle_clock.h"
#include "common/log.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "server/request_util.h"

namespace hetps::server {

Shard::Shard(const ShardOptions& options)
    : options_(options),
      incarnation_(NewRandomId()),
      metrics_(std::make_shared<ShardMetrics>()),
      timers_(std::make_unique<TimerQueue>()),
      barrier_(options.num_workers, timers_.get()),
      replication_on_(options.replicas > 1 && options.num_shards > 1 &&
                      options.peer_transport != nullptr && !options.etcd.empty()),
      group_server_(new std::atomic<uint32_t>[options.num_shards]),
      replica_target_(new std::atomic<int32_t>[options.num_shards]),
      bsp_partitions_(new std::atomic<size_t>[options.num_shards]()),
      changes_received_(new std::atomic<bool>[options.num_shards]()),
      runs_(new std::atomic<uint64_t>[options.num_workers]()) {
  metrics_->timed = options.time_requests;  // before any request
  if (metrics_->timed) CycleClock::Calibrate();
  if (!options_.checkpoint_dir.empty()) {
    checkpoints_.resize(options_.num_shards);
    for (uint32_t group : CopiedGroups()) {
      // A group's part has as many copies as its partitions while this shard serves it, and
      // none otherwise (the shard serving it writes it).
      checkpoints_[group] = std::make_unique<CheckpointWriter>(
          options_.checkpoint_dir,
          CheckpointIdentity{options_.job_id, group, options_.num_shards, options_.num_workers},
          [this] { return CheckpointCatalog(); },
          [this, group]() -> size_t {
            return group_server_[group].load() == options_.shard_index
                       ? bsp_partitions_[group].load()
                       : 0;
          });
    }
  }
  const int threads = std::max(1, options_.threads);
  for (int i = 0; i < threads; ++i) {
    owners_.push_back(std::make_unique<TaskThread>(absl::StrCat("shard-owner-", i)));
  }
  declarer_ = std::make_unique<TaskThread>("shard-declare");
  // The owner that spreads an update works on it too: one pool thread fewer than CPUs wanted.
  if (threads > 1) kernels_ = std::make_unique<ThreadPool>(threads - 1, "shard-kernels");
  seen_epoch_.assign(options_.num_shards, 0);
  backup_lease_seen_.assign(options_.num_shards, 0);
  server_restart_seen_.assign(options_.num_shards, std::nullopt);
  for (uint32_t group = 0; group < options_.num_shards; ++group) {
    group_server_[group].store(group);
    replica_target_[group].store(-1);
  }
  if (replication_on_) {
    replica_target_[options_.shard_index].store(
        static_cast<int32_t>((options_.shard_index + 1) % options_.num_shards));
  }
}

Shard::~Shard() {
  Stop();
  timers_.reset();  // no timer may fire into the members below once they start to go
}

void Shard::Stop() {
  if (stopped_.exchange(true)) return;
  const absl::Status stopping =
      absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index));
  barrier_.FailAll(stopping);
  declarer_->Stop();  // declarations in progress finish first: they hand values to the owners
  // Stopped without the lock: a replicator's thread may be finishing a batch whose next one
  // looks its replicator up (ReplicatorFor), and stopping joins that thread.
  std::vector<Replicator*> replicators;
  {
    absl::MutexLock lock(&replicators_mu_);
    for (auto& [backup, replicator] : replicators_) replicators.push_back(replicator.get());
  }
  for (Replicator* replicator : replicators) replicator->Stop();
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stopped_ = true;
  }
  // The watcher's etcd calls: it sees stopped_ before the next one.
  if (etcd_ != nullptr) etcd_->CancelCalls();
  if (watcher_.joinable()) watcher_.join();
  if (lease_ != nullptr) lease_->Stop(/*revoke=*/true);
  for (size_t owner = 0; owner < owners_.size(); ++owner) {
    owners_[owner]->Post([this, owner, stopping] {
      table_.ForEach([&](const Tensor& tensor) {
        for (const auto& partition : tensor.partitions) {
          if (partition != nullptr && partition->owner() == owner) {
            partition->FailWaiters(stopping);
          }
        }
      });
    });
  }
  for (auto& owner : owners_) owner->Stop();
}

void Shard::HandleRequest(transport::Request request, transport::ReplyCallback reply) {
  if (stopped_.load()) {
    reply(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
    return;
  }
  // Every answer is counted (and timed), whichever path gives it.
  reply = [metrics = metrics_, method = ShardMetrics::MethodIndex(request.method),
           start = metrics_->Start(),
           reply = std::move(reply)](absl::StatusOr<transport::Response> result) mutable {
    if (!result.ok()) ShardMetrics::Add(metrics->failed_requests, 1);
    metrics->Answered(method, result.status(), start);
    reply(std::move(result));
  };
  // Without its lease the shard may have been replaced: it changes and serves no state.
  if (lease_ != nullptr && request.method != hetps::v1::METHOD_HELLO &&
      request.method != hetps::v1::METHOD_STATS && request.method != hetps::v1::METHOD_ECHO) {
    if (absl::Status leased = CheckLease(); !leased.ok()) {
      reply(leased);
      return;
    }
  }
  // Replicated, updates wait for the registration: a backup takes a server that sent it
  // changes but is not registered for gone.
  const bool updates = request.method == hetps::v1::METHOD_PUSH ||
                       request.method == hetps::v1::METHOD_PUSH_PULL ||
                       request.method == hetps::v1::METHOD_WRITE_STATE;
  if (updates && replication_on_ && lease_ != nullptr && !serving_.load()) {
    reply(absl::UnavailableError(
        absl::StrFormat("shard %d is not registered in etcd yet", options_.shard_index)));
    return;
  }
  switch (request.method) {
    case hetps::v1::METHOD_HELLO:
      reply(Hello(request));
      return;
    case hetps::v1::METHOD_DECLARE:
      Declare(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_STATS:
      reply(HeaderResponse(Stats()));
      return;
    case hetps::v1::METHOD_BARRIER:
      Barrier(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_SET_OPTIMIZER:
      SetOptimizer(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_ECHO:
      reply(Echo(std::move(request)));
      return;
    case hetps::v1::METHOD_READ_STATE:
      ReadState(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_WRITE_STATE:
      WriteState(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_CHECKPOINT:
      Checkpoint(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_REPLICATE:
      Replicate(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_DROP:
      Drop(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_STOP:
      RequestStop(std::move(request), std::move(reply));
      return;
    case hetps::v1::METHOD_PUSH:
    case hetps::v1::METHOD_PULL:
    case hetps::v1::METHOD_PUSH_PULL:
      Data(std::move(request), std::move(reply));
      return;
    default:
      reply(absl::UnimplementedError(absl::StrFormat("unknown method %d", request.method)));
  }
}

absl::Status Shard::CheckRank(uint32_t rank) const {
  if (rank >= options_.num_workers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker rank %d is out of range: this job has %d workers", rank, options_.num_workers));
  }
  return absl::OkStatus();
}

absl::Status Shard::CheckRun(uint32_t rank, uint64_t incarnation) const {
  HETPS_RETURN_IF_ERROR(CheckRank(rank));
  if (incarnation == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker %d: the request names no run (incarnation)", rank));
  }
  // Almost always the run Hello set: a plain load, no write to the shared line.
  uint64_t current = runs_[rank].load(std::memory_order_acquire);
  if (current == incarnation) return absl::OkStatus();
  if (current == 0 &&
      (runs_[rank].compare_exchange_strong(current, incarnation) || current == incarnation)) {
    return absl::OkStatus();  // the first request after a shard restart names the run
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "worker rank %d was taken over by another process (run %016x; this one is run %016x): "
      "two processes started with rank %d, or this one was replaced after it stalled",
      rank, current, incarnation, rank));
}

absl::Status Shard::CheckStateRun(uint64_t shard_incarnation) const {
  if (shard_incarnation == 0 || shard_incarnation == incarnation_) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "shard %d restarted without its state: the worker knew it as run %016x, it is now run "
      "%016x, which no replica or checkpoint restored (the weights, optimizer state and versions "
      "the worker had there are lost)",
      options_.shard_index, shard_incarnation, incarnation_));
}

absl::Status Shard::CheckNotLost(const Tensor& tensor) const {
  if (!tensor.lost.load(std::memory_order_relaxed)) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "tensor '%s' lost its state on shard %d: the shard restarted without it (no replica or "
      "checkpoint) while the other shards' partitions had steps applied",
      tensor.decl.name(), options_.shard_index));
}

absl::Status Shard::CheckHello(const hetps::v1::HelloRequest& hello) const {
  if (hello.protocol_version() != hetps::v1::PROTOCOL_VERSION_CURRENT) {
    return absl::FailedPreconditionError(
        absl::StrFormat("client speaks protocol version %d; this server speaks version %d",
                        hello.protocol_version(), hetps::v1::PROTOCOL_VERSION_CURRENT));
  }
  if (hello.job_id() != options_.job_id) {
    return absl::FailedPreconditionError(
        absl::StrFormat("client belongs to job '%s'; this server serves job '%s'", hello.job_id(),
                        options_.job_id));
  }
  // An operator's tool is not one of the job's workers.
  if (!hello.admin() && hello.world_size() != options_.num_workers) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client says the job has %d workers; this server was started for %d (--num_workers)",
        hello.world_size(), options_.num_workers));
  }
  if (!hello.admin()) HETPS_RETURN_IF_ERROR(CheckRank(hello.worker_rank()));
  if (hello.incarnation() == 0) {
    return absl::InvalidArgumentError("hello: the client names no run (incarnation)");
  }
  if (hello.num_shards() != options_.num_shards || hello.shard_index() != options_.shard_index) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client lists this server as shard %d of %d, but it is shard %d of %d "
        "(check the order of the server list)",
        hello.shard_index(), hello.num_shards(), options_.shard_index, options_.num_shards));
  }
  return absl::OkStatus();
}

absl::Status Shard::Admit(const transport::ConnectionInfo& connection) {
  if (!options_.auth_token.empty()) {
    // First, and the same answer whatever else is wrong: nothing else is told to a stranger.
    hetps::v1::HelloRequest hello;
    if (!hello.ParseFromString(connection.greeting) ||
        !AuthTokensEqual(hello.auth_token(), options_.auth_token)) {
      return absl::UnauthenticatedError(absl::StrFormat(
          "shard %d takes only workers that present the job's token (ClientOptions::"
          "auth_token_file or $%s): this connection's is missing or wrong",
          options_.shard_index, kAuthTokenEnvironment));
    }
  }
  if (connection.greeting.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d: the connection did not say who it is (a hetps client sends its hello when it "
        "connects: an older client, or not a hetps worker?)",
        options_.shard_index));
  }
  hetps::v1::HelloRequest hello;
  if (!hello.ParseFromString(connection.greeting)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %d: the connection's greeting is malformed", options_.shard_index));
  }
  if (hello.peer_shard() == 0) {
    HETPS_RETURN_IF_ERROR(CheckHello(hello));
    absl::MutexLock lock(&connections_mu_);
    if (hello.admin()) {
      admin_connections_.insert(connection.id);
      return absl::OkStatus();
    }
    worker_connections_[connection.id] = hello.worker_rank();
    return absl::OkStatus();
  }
  HETPS_RETURN_IF_ERROR(CheckPeerHello(hello));
  absl::MutexLock lock(&connections_mu_);
  peer_connections_[connection.id] = hello.peer_shard() - 1;
  return absl::OkStatus();
}

void Shard::Disconnected(uint64_t connection_id) {
  {
    absl::MutexLock lock(&connections_mu_);
    peer_connections_.erase(connection_id);
    worker_connections_.erase(connection_id);
    admin_connections_.erase(connection_id);
  }
  waiting_.FailAll(connection_id, absl::CancelledError("the client disconnected"));
}

absl::StatusOr<transport::Response> Shard::Hello(const transport::Request& request) const {
  HETPS_ASSIGN_OR_RETURN(auto hello, ParseHeader<hetps::v1::HelloRequest>(request.header));
  HETPS_RETURN_IF_ERROR(CheckHello(hello));
  // A new run of this rank takes it over: requests of the one before are refused from now on.
  const uint64_t previous =
      hello.admin() ? 0 : runs_[hello.worker_rank()].exchange(hello.incarnation());
  if (previous != 0 && previous != hello.incarnation()) {
    LogWarning(
        "shard %d: worker %d is now run %016x, which replaces run %016x (a restart, or "
        "two processes with one rank)",
        options_.shard_index, hello.worker_rank(), hello.incarnation(), previous);
  }
  hetps::v1::HelloResponse response;
  response.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
  response.set_job_id(options_.job_id);
  response.set_shard_index(options_.shard_index);
  response.set_num_shards(options_.num_shards);
  response.set_num_workers(options_.num_workers);
  response.set_max_message_bytes(options_.max_message_bytes);
  response.set_barriers_completed(barrier_.completed());
  response.set_shard_incarnation(incarnation_);
  response.set_resume_step(resume_step_);
  response.set_replicas(replication_on_ ? options_.replicas : 1);
  return HeaderResponse(response);
}

}  // namespace hetps::server
