#include "server/shard.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth_token.h"
#include "common/cycle_clock.h"
#include "common/log.h"
#include "common/partitioning.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "server/initializer.h"
#include "server/request_util.h"

namespace hetps::server {
namespace {

std::map<std::string, double> ParamsOf(const hetps::v1::OptimizerConfig& config) {
  return {config.params().begin(), config.params().end()};
}

// How two declarations of one tensor differ, or "" if they agree. Initial values carried in the
// payload are not compared: the first declaration's are used.
std::string DescribeMismatch(const hetps::v1::TensorDecl& have, const hetps::v1::TensorDecl& got) {
  if (have.name() != got.name()) {
    return absl::StrFormat("key %016x is taken by tensor '%s'", have.key(), have.name());
  }
  if (have.num_elements() != got.num_elements()) {
    return absl::StrFormat("it has %d elements, not %d", have.num_elements(), got.num_elements());
  }
  if (have.dtype() != got.dtype()) return "its dtype differs";
  if (have.sync_mode() != got.sync_mode()) return "its sync mode differs";
  if (have.partition_elements() != got.partition_elements()) {
    return absl::StrFormat("it is cut into partitions of %d elements, not %d",
                           have.partition_elements(), got.partition_elements());
  }
  if (have.optimizer().name() != got.optimizer().name() ||
      ParamsOf(have.optimizer()) != ParamsOf(got.optimizer())) {
    return "its optimizer or hyperparameters differ";
  }
  const auto& a = have.init();
  const auto& b = got.init();
  if (a.kind() != b.kind() || a.a() != b.a() || a.b() != b.b() || a.seed() != b.seed()) {
    return "its initializer differs";
  }
  return "";
}

}  // namespace

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
      changes_received_(new std::atomic<bool>[options.num_shards]()),
      runs_(new std::atomic<uint64_t>[options.num_workers]()) {
  metrics_->timed = options.time_requests;  // before any request
  if (metrics_->timed) CycleClock::Calibrate();
  if (!options_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<CheckpointWriter>(
        options_.checkpoint_dir,
        CheckpointIdentity{options_.job_id, options_.shard_index, options_.num_shards,
                           options_.num_workers},
        [this] { return CheckpointCatalog(); }, [this] { return bsp_partitions_.load(); });
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

void Shard::Declare(transport::Request request, transport::ReplyCallback reply) {
  // Creating a tensor allocates and fills it (seconds for gigabytes): on a thread of its own,
  // so that the transport threads keep serving the other workers meanwhile.
  auto once = std::make_shared<transport::ReplyCallback>(std::move(reply));
  const bool posted = declarer_->Post([this, request = std::move(request), once]() mutable {
    DeclareNow(std::move(request), std::move(*once));
  });
  if (!posted) {
    (*once)(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
  }
}

void Shard::DeclareNow(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::DeclareRequest> declare = CheckDeclaration(request);
  if (!declare.ok()) {
    reply(declare.status());
    return;
  }
  const hetps::v1::TensorDecl& decl = declare->tensor();
  TensorRef tensor = table_.Find(decl.key());
  bool created = false;
  if (tensor == nullptr) {
    absl::StatusOr<std::pair<TensorRef, bool>> inserted = CreateTensor(decl);
    if (!inserted.ok()) {
      reply(inserted.status());
      return;
    }
    std::tie(tensor, created) = *inserted;
  }
  if (!created) {
    if (std::string mismatch = DescribeMismatch(tensor->decl, decl); !mismatch.empty()) {
      reply(absl::AlreadyExistsError(absl::StrFormat(
          "tensor '%s' is already declared differently: %s", decl.name(), mismatch)));
      return;
    }
  }
  if (declare->mark_lost()) tensor->lost.store(true, std::memory_order_relaxed);
  if (absl::Status lost = CheckNotLost(*tensor); !lost.ok()) {
    reply(lost);
    return;
  }
  absl::StatusOr<std::vector<DataItem>> values =
      ResolveInitialValues(*tensor, *declare, request.payload);
  if (!values.ok()) {
    reply(values.status());
    return;
  }
  hetps::v1::DeclareResponse response;
  response.set_created(created);
  response.set_num_partitions(tensor->layout.num_partitions());
  uint32_t owned = 0;
  uint64_t max_version = 0;
  for (const auto& partition : tensor->partitions) {
    if (partition == nullptr || partition->is_backup()) continue;
    ++owned;
    max_version = std::max(max_version, partition->version());
  }
  response.set_owned_partitions(owned);
  response.set_max_version(max_version);
  if (values->empty()) {
    reply(HeaderResponse(response));
    return;
  }
  // The values are written by the partitions' owner threads; the reply waits for them.
  std::vector<hetps::v1::PartitionItem> metas(values->size());
  auto pending =
      std::make_shared<PendingRequest>(std::move(metas), /*returns_weights=*/false,
                                       std::move(reply), metrics_, response.SerializeAsString());
  for (size_t slot = 0; slot < values->size(); ++slot) {
    DataItem& item = (*values)[slot];
    const bool posted = owners_[item.partition->owner()]->Post(
        [pending, slot, tensor = item.tensor, partition = item.partition,
         payload = std::move(item.gradient)] {
          partition->SetInitialValues(payload);
          pending->CompleteItem(slot);
        });
    if (!posted) {
      pending->Fail(absl::UnavailableError("the shard is shutting down"));
      return;
    }
  }
}

absl::StatusOr<hetps::v1::DeclareRequest> Shard::CheckDeclaration(
    const transport::Request& request) const {
  HETPS_ASSIGN_OR_RETURN(auto declare, ParseHeader<hetps::v1::DeclareRequest>(request.header));
  HETPS_RETURN_IF_ERROR(CheckRank(declare.worker_rank()));
  HETPS_RETURN_IF_ERROR(CheckStateRun(declare.shard_incarnation()));
  const hetps::v1::TensorDecl& decl = declare.tensor();
  HETPS_RETURN_IF_ERROR(CheckTensorDecl(decl));
  if (!declare.value_partitions().empty() && decl.init().kind() != hetps::v1::INIT_KIND_VALUES) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': initial values sent, but its initializer is not 'values'", decl.name()));
  }
  return declare;
}

absl::Status Shard::CheckTensorDecl(const hetps::v1::TensorDecl& decl) {
  if (decl.name().empty()) return absl::InvalidArgumentError("a tensor needs a name");
  if (decl.key() != TensorKeyFromName(decl.name())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key %016x does not match tensor name '%s'", decl.key(), decl.name()));
  }
  if (decl.dtype() != hetps::v1::DTYPE_FP32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': unsupported dtype %d", decl.name(), decl.dtype()));
  }
  if (decl.sync_mode() != hetps::v1::SYNC_MODE_BSP &&
      decl.sync_mode() != hetps::v1::SYNC_MODE_ASP) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s': unknown sync mode %d", decl.name(), decl.sync_mode()));
  }
  return ValidateInitializer(decl.init());
}

absl::StatusOr<std::vector<Shard::DataItem>> Shard::ResolveInitialValues(
    const Tensor& tensor, const hetps::v1::DeclareRequest& declare,
    const transport::Payload& values) const {
  if (declare.value_partitions().empty()) {
    if (!values.empty()) {
      return absl::InvalidArgumentError("a declaration without value partitions has a payload");
    }
    return std::vector<DataItem>();
  }
  // The values are checked like a push of those partitions.
  google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem> items;
  for (uint32_t partition : declare.value_partitions()) {
    hetps::v1::PartitionItem* item = items.Add();
    item->set_tensor_key(tensor.decl.key());
    item->set_partition(partition);
    item->set_dtype(tensor.decl.dtype());
    item->set_num_bytes(partition < tensor.layout.num_partitions()
                            ? tensor.layout.partition(partition).size * sizeof(float)
                            : 0);
  }
  return ResolveItems(items, &values, /*backups=*/true);
}

absl::StatusOr<std::pair<TensorRef, bool>> Shard::CreateTensor(const hetps::v1::TensorDecl& decl) {
  HETPS_ASSIGN_OR_RETURN(PartitionLayout layout,
                         PartitionLayout::Create(decl.num_elements(), decl.partition_elements()));
  HETPS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                         CreateOptimizer(decl.optimizer().name(), ParamsOf(decl.optimizer())));
  HETPS_ASSIGN_OR_RETURN(const uint64_t reserved, ReserveMemory(decl, layout, *optimizer));
  absl::StatusOr<std::unique_ptr<Tensor>> built = BuildTensor(decl, layout, std::move(optimizer));
  if (!built.ok()) {
    ReleaseMemory(reserved);
    return built.status();
  }
  (*built)->reserved_bytes = reserved;
  std::pair<TensorRef, bool> inserted = table_.Insert(*std::move(built));
  if (!inserted.second) {
    ReleaseMemory(reserved);  // another worker's declaration came first
    return inserted;
  }
  {
    absl::MutexLock lock(&dropped_mu_);
    dropped_keys_.erase(decl.key());
  }
  if (decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) {
    const ShardShare share =
        ShareOfShard(layout, decl.key(), options_.num_shards, options_.shard_index);
    bsp_partitions_.fetch_add(share.partitions);
  }
  return inserted;
}

absl::StatusOr<std::unique_ptr<Tensor>> Shard::BuildTensor(const hetps::v1::TensorDecl& decl,
                                                           const PartitionLayout& layout,
                                                           std::shared_ptr<Optimizer> optimizer) {
  auto tensor = std::make_unique<Tensor>(decl, layout);
  {
    absl::MutexLock lock(&tensor->schedule_mu);
    tensor->schedule[0] = optimizer->params();
  }
  tensor->optimizer = std::move(optimizer);
  tensor->partitions.resize(layout.num_partitions());
  // This shard's own partitions, and with replication the copies of the previous shard's:
  // each a backup unless this shard serves that group now.
  const uint32_t me = options_.shard_index;
  HETPS_RETURN_IF_ERROR(BuildPartitions(*tensor, me, /*backup=*/group_server_[me].load() != me));
  if (replication_on_) {
    const uint32_t previous = (me + options_.num_shards - 1) % options_.num_shards;
    HETPS_RETURN_IF_ERROR(
        BuildPartitions(*tensor, previous, /*backup=*/group_server_[previous].load() != me));
  }
  return tensor;
}

absl::Status Shard::BuildPartitions(Tensor& tensor, uint32_t shard, bool backup) {
  const hetps::v1::TensorDecl& decl = tensor.decl;
  const PartitionLayout& layout = tensor.layout;
  const ShardShare share = ShareOfShard(layout, decl.key(), options_.num_shards, shard);
  for (uint32_t i = 0; i < share.partitions; ++i) {
    const uint32_t p = share.first_partition + i * options_.num_shards;
    const PartitionRange range = layout.partition(p);
    HETPS_ASSIGN_OR_RETURN(AlignedBuffer weights, InitialWeights(decl.init(), range));
    Partition::Config config;
    config.tensor_key = decl.key();
    config.backup = backup;
    config.index = p;
    config.range = range;
    config.sync_mode = decl.sync_mode();
    config.num_workers = options_.num_workers;
    config.optimizer = tensor.optimizer;
    config.owner = next_owner_.fetch_add(1) % owners_.size();
    config.kernel_pool = kernels_.get();
    if (metrics_->timed) config.apply_duration = &metrics_->apply_duration;
    config.awaits_values = decl.init().kind() == hetps::v1::INIT_KIND_VALUES;
    if (replication_on_) {
      // Backups too: one taken over replicates to a shard that rejoins.
      // A partition changes only while something holds its tensor (shared_from_this works).
      config.replicate = [this, owner = &tensor](Partition& partition,
                                                 std::vector<ReplicatedChange> changes) {
        SendToBackup(owner->shared_from_this(), partition, std::move(changes));
      };
      config.replicating = replica_target_[shard].load() >= 0;
    }
    if (checkpoints_ != nullptr && decl.sync_mode() == hetps::v1::SYNC_MODE_BSP && !backup) {
      config.checkpoint_every = options_.checkpoint_every;
      config.checkpoint = [writer = checkpoints_.get(), key = decl.key()](PartitionCopy copy) {
        writer->Offer(key, std::move(copy));
      };
      config.periodic_wanted = [writer = checkpoints_.get()](uint64_t version) {
        return writer->TakesPeriodic(version);
      };
    }
    HETPS_ASSIGN_OR_RETURN(tensor.partitions[p], Partition::Create(config, std::move(weights)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Shard::ReserveMemory(const hetps::v1::TensorDecl& decl,
                                              const PartitionLayout& layout,
                                              const Optimizer& optimizer) {
  const ShardShare share =
      ShareOfShard(layout, decl.key(), options_.num_shards, options_.shard_index);
  // Weights, the optimizer's state and the buffer the step's gradients are summed into (with
  // checkpoints, a second weights buffer for copy on write; replicated, a buffer for the sum
  // sent to the backup); each partition's own bookkeeping; the tensor's table of partitions.
  // The backup copies take weights, state and a buffer for the step they apply. Values come
  // from the wire: every product is checked, so that a huge one cannot wrap around to a small
  // one.
  const uint64_t buffers =
      2 + optimizer.state_slots() +
      (checkpoints_ != nullptr && decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) + replication_on_;
  const ShardShare backups =
      replication_on_
          ? ShareOfShard(layout, decl.key(), options_.num_shards,
                         (options_.shard_index + options_.num_shards - 1) % options_.num_shards)
          : ShardShare();
  uint64_t bytes = 0, backup_bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(share.elements, sizeof(float) * buffers, &bytes) ||
      __builtin_mul_overflow(backups.elements, sizeof(float) * (2 + optimizer.state_slots()),
                             &backup_bytes) ||
      __builtin_add_overflow(bytes, backup_bytes, &bytes) ||
      __builtin_add_overflow(bytes,
                             uint64_t{share.partitions + backups.partitions} *
                                 Partition::BookkeepingBytes(options_.num_workers),
                             &bytes) ||
      __builtin_add_overflow(bytes, uint64_t{layout.num_partitions()} * sizeof(void*), &bytes);
  absl::MutexLock lock(&memory_mu_);
  if (overflow || bytes > options_.max_memory_bytes - reserved_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "tensor '%s' needs %s bytes on shard %d, which holds %d of its %d (--max_memory_bytes)",
        decl.name(), overflow ? "more than 2^64" : absl::StrCat(bytes), options_.shard_index,
        reserved_bytes_, options_.max_memory_bytes));
  }
  reserved_bytes_ += bytes;
  return bytes;
}

void Shard::ReleaseMemory(uint64_t bytes) {
  absl::MutexLock lock(&memory_mu_);
  reserved_bytes_ -= bytes;
}

}  // namespace hetps::server
