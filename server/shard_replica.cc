// Replication between shards (--replicas 2): a primary partition's changes go to the backup
// shard through the Replicator; the backup applies them here.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "proto/reused_message.h"
#include "server/random_draws.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {

absl::Status Shard::CheckPeerHello(const hetps::v1::HelloRequest& hello) const {
  const uint32_t peer = hello.peer_shard() - 1;
  if (hello.protocol_version() != hetps::v1::PROTOCOL_VERSION_CURRENT ||
      hello.job_id() != options_.job_id || hello.num_shards() != options_.num_shards ||
      hello.shard_index() != options_.shard_index) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d: a shard connecting as shard %d of %d of job '%s' (protocol %d) is not a peer "
        "of shard %d of %d of job '%s'",
        options_.shard_index, peer, hello.num_shards(), hello.job_id(), hello.protocol_version(),
        options_.shard_index, options_.num_shards, options_.job_id));
  }
  if (hello.initializer_draws() != kInitializerDraws) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d draws random initial values with formulas of version %d, shard %d, which sends "
        "it changes, with version %d: their copies would start apart; run one hetps build "
        "across a job's shards",
        options_.shard_index, kInitializerDraws, peer, hello.initializer_draws()));
  }
  if (options_.replicas < 2 || options_.num_shards < 2) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d keeps no backups (started with --replicas %d), shard %d sends it changes: "
        "start every shard with the same --replicas",
        options_.shard_index, options_.replicas, peer));
  }
  if (peer >= options_.num_shards || peer == options_.shard_index) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shard %d: a connection says it is shard %d of %d", options_.shard_index,
                        peer, options_.num_shards));
  }
  return absl::OkStatus();
}

Replicator* Shard::ReplicatorFor(uint32_t backup) {
  absl::MutexLock lock(&replicators_mu_);
  std::unique_ptr<Replicator>& replicator = replicators_[backup];
  if (replicator == nullptr) {
    ReplicatorOptions replication;
    replication.shard_index = options_.shard_index;
    replication.backup_index = backup;
    replication.num_shards = options_.num_shards;
    replication.job_id = options_.job_id;
    replication.auth_token = options_.auth_token;
    if (metrics_->timed) replication.round_trips = &metrics_->replication_duration;
    replication.find_backup = [this, backup]() -> absl::StatusOr<std::string> {
      HETPS_ASSIGN_OR_RETURN(EtcdClient::Value member, FindMember(backup));
      return member.value;
    };
    replicator = std::make_unique<Replicator>(replication, options_.peer_transport, timers_.get());
  }
  return replicator.get();
}

void Shard::RetireReplicator(uint32_t backup) {
  Replicator* retired = nullptr;
  {
    absl::MutexLock lock(&replicators_mu_);
    auto it = replicators_.find(backup);
    if (it == replicators_.end()) return;
    retired = it->second.get();
    retired_replicators_.push_back(std::move(it->second));
    replicators_.erase(it);
  }
  // Without the lock (see Stop). Retired replicators live until the shard goes.
  retired->Stop();
}

bool Shard::ServesGroup(uint32_t peer, uint32_t group) {
  if (group_server_[group].load() == peer) return true;
  // It may have taken the group over since this shard last looked.
  if (etcd_ == nullptr) return false;
  absl::StatusOr<GroupRecord> record = ReadGroup(group);
  if (!record.ok() || !NoteServer(group, *record)) return false;
  return record->server == peer;
}

void Shard::SendToBackup(TensorRef tensor, Partition& partition,
                         std::vector<ReplicatedChange> changes) {
  const uint32_t group =
      ShardOfPartition(changes.front().meta.tensor_key(), partition.index(), options_.num_shards);
  const int32_t backup = replica_target_[group].load();
  if (backup < 0) {
    // Its backup was forgotten (etcd names none) before this change was sent.
    owners_[partition.owner()]->RunHereOrPost(
        [tensor = std::move(tensor), &partition] { partition.DropBackup(); });
    return;
  }
  ReplicatorFor(static_cast<uint32_t>(backup))
      ->Send(std::move(changes),
             [this, tensor = std::move(tensor), &partition, group, backup](absl::Status status) {
               if (status.code() == absl::StatusCode::kNotFound && CheckLease().ok()) {
                 // The backup is gone (its lease ended) or lost its copies: once etcd names no
                 // backup, the group goes on without one rather than stall (the watcher does both).
                 ReportBackupLost(group, static_cast<uint32_t>(backup));
                 return;
               }
               // Cancelled: the shard is stopping, and waiting requests are failed by Stop.
               if (!status.ok()) return;
               ConfirmReplicated(std::move(tensor), partition);
             });
}

void Shard::ConfirmReplicated(TensorRef tensor, Partition& partition) {
  if (!CheckLease().ok()) {
    // Confirmed while the lease is lost: the partition acknowledges nothing until a new lease
    // holds (its waiting requests end at their deadlines, saying why), and nothing ever if
    // none will.
    if (stopped_.load() || lease_->ended()) return;
    timers_->Schedule(hetps::Now() + options_.lease_ttl / 8,
                      [this, tensor = std::move(tensor), &partition]() mutable {
                        ConfirmReplicated(std::move(tensor), partition);
                      });
    return;
  }
  owners_[partition.owner()]->RunHereOrPost([tensor, &partition] { partition.Replicated(); });
}

absl::Status Shard::DeclareFromSnapshot(const hetps::v1::ReplicatedChange& snapshot) {
  if (table_.Find(snapshot.tensor_key()) != nullptr) return absl::OkStatus();
  const hetps::v1::TensorDecl& decl = snapshot.decl();
  HETPS_RETURN_IF_ERROR(CheckTensorDecl(decl));
  if (decl.key() != snapshot.tensor_key()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a snapshot of tensor %016x declares tensor '%s'", snapshot.tensor_key(), decl.name()));
  }
  // The copies of the groups this shard does not serve wait for their snapshots (a rejoining
  // shard serves none): their initial values are drawn only if a change or a takeover comes
  // first (a tensor declared while the copying goes on replicates from its start).
  HETPS_ASSIGN_OR_RETURN(auto created, CreateTensor(decl, CopiedValues::kBackups));
  const Tensor& tensor = *created.first;
  absl::MutexLock lock(&tensor.schedule_mu);
  for (const hetps::v1::ScheduleEntry& entry : snapshot.schedule()) {
    tensor.schedule[entry.from_version()] =
        OptimizerParams(entry.params().begin(), entry.params().end());
  }
  return absl::OkStatus();
}

absl::StatusOr<Shard::Schedule> Shard::ScheduleOf(const hetps::v1::ReplicatedChange& snapshot) {
  Schedule schedule;
  for (const hetps::v1::ScheduleEntry& entry : snapshot.schedule()) {
    const OptimizerParams params(entry.params().begin(), entry.params().end());
    HETPS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> rule,
                           CreateOptimizer(snapshot.decl().optimizer().name(), params));
    schedule.emplace_back(entry.from_version(), std::move(rule));
  }
  return schedule;
}

void Shard::Replicate(transport::Request request, transport::ReplyCallback reply) {
  uint32_t peer = 0;
  {
    absl::MutexLock lock(&connections_mu_);
    auto it = peer_connections_.find(request.connection);
    if (it == peer_connections_.end()) {
      reply(absl::PermissionDeniedError(absl::StrFormat(
          "shard %d takes replicated changes only from the shards that serve the partitions it "
          "keeps copies of, on connections they opened",
          options_.shard_index)));
      return;
    }
    peer = it->second;
  }
  ReusedMessage<hetps::v1::ReplicateRequest> replicate;
  if (absl::Status parsed = ParseHeaderInto(request.header, *replicate); !parsed.ok()) {
    reply(parsed);
    return;
  }
  // Checked whole first: each change's partition must be a backup here, its bytes in the
  // payload.
  struct Item {
    int change;        // its index in the request
    TensorRef tensor;  // keeps `partition` alive
    Partition* partition;
    transport::Payload bytes;
    Schedule schedule;  // snapshots
  };
  std::vector<Item> items;
  items.reserve(replicate->changes_size());
  uint64_t offset = 0;
  for (int c = 0; c < replicate->changes_size(); ++c) {
    const hetps::v1::ReplicatedChange& change = replicate->changes(c);
    const uint32_t group =
        ShardOfPartition(change.tensor_key(), change.partition(), options_.num_shards);
    if (!ServesGroup(peer, group)) {
      reply(absl::PermissionDeniedError(absl::StrFormat(
          "shard %d: shard %d does not serve the partitions placed on shard %d (partition %d of "
          "tensor %016x), so it may not change their copies here",
          options_.shard_index, peer, group, change.partition(), change.tensor_key())));
      return;
    }
    changes_received_[group].store(true, std::memory_order_relaxed);
    if (change.num_bytes() > request.payload.size() - offset) {
      reply(absl::InvalidArgumentError("the payload ends before the changes' bytes do"));
      return;
    }
    // Dropped here before its primary dropped it (a drop reaches the shards one by one): what
    // the primary still sends of it is taken and ignored, never declared again.
    const bool declares = change.kind() == hetps::v1::CHANGE_KIND_DECLARE ||
                          change.kind() == hetps::v1::CHANGE_KIND_SNAPSHOT;
    if (declares && WasDropped(change.tensor_key())) {
      offset += change.num_bytes();
      continue;
    }
    if (change.kind() == hetps::v1::CHANGE_KIND_DECLARE) {
      // A rejoining shard learns a tensor before its partitions' snapshots: created (seconds
      // for gigabytes) on the declaring thread, as workers' declarations are.
      if (replicate->changes_size() != 1 || change.num_bytes() != 0) {
        reply(absl::InvalidArgumentError("a declaration comes alone, without bytes"));
        return;
      }
      auto once = std::make_shared<transport::ReplyCallback>(std::move(reply));
      const bool posted = declarer_->Post([this, change, once] {
        absl::Status declared = DeclareFromSnapshot(change);
        (*once)(declared.ok() ? absl::StatusOr<transport::Response>(
                                    HeaderResponse(hetps::v1::ReplicateResponse()))
                              : absl::StatusOr<transport::Response>(declared));
      });
      if (!posted) {
        (*once)(absl::UnavailableError(
            absl::StrFormat("shard %d is shutting down", options_.shard_index)));
      }
      return;
    }
    if (change.kind() == hetps::v1::CHANGE_KIND_SNAPSHOT) {
      if (absl::Status declared = DeclareFromSnapshot(change); !declared.ok()) {
        reply(declared);
        return;
      }
    }
    absl::StatusOr<std::pair<TensorRef, Partition*>> located =
        LocatePartition(change.tensor_key(), change.partition(), /*backup=*/true);
    if (located.ok() && !located->second->is_backup()) {
      located = absl::FailedPreconditionError(absl::StrFormat(
          "shard %d serves partition %d of tensor '%s' itself: it is not a backup here",
          options_.shard_index, change.partition(), located->first->decl.name()));
    }
    if (!located.ok() && absl::IsNotFound(located.status()) && WasDropped(change.tensor_key())) {
      offset += change.num_bytes();
      continue;
    }
    if (!located.ok()) {
      reply(located.status());
      return;
    }
    Schedule schedule;
    if (change.kind() == hetps::v1::CHANGE_KIND_SNAPSHOT) {
      absl::StatusOr<Schedule> rules = ScheduleOf(change);
      if (!rules.ok()) {
        reply(rules.status());
        return;
      }
      schedule = *std::move(rules);
    }
    items.push_back(Item{c, located->first, located->second,
                         request.payload.Subrange(offset, change.num_bytes()),
                         std::move(schedule)});
    offset += change.num_bytes();
  }
  if (offset != request.payload.size()) {
    reply(absl::InvalidArgumentError("the payload is longer than the changes' bytes"));
    return;
  }
  // The changes of one batch are of one partition, in order: one owner applies them.
  std::vector<hetps::v1::PartitionItem> slots(1);
  auto pending = std::make_shared<PendingRequest>(
      std::move(slots), /*returns_weights=*/false, std::move(reply), metrics_,
      hetps::v1::ReplicateResponse().SerializeAsString());
  auto changes = std::make_shared<hetps::v1::ReplicateRequest>(*replicate);
  size_t owner = items.empty() ? 0 : items.front().partition->owner();
  const bool one_owner = std::all_of(items.begin(), items.end(), [owner](const Item& item) {
    return item.partition->owner() == owner;
  });
  if (!one_owner) {
    pending->Fail(
        absl::InvalidArgumentError("a batch of changes spans partitions of several "
                                   "owner threads"));
    return;
  }
  auto apply = [pending, changes, items = std::move(items)]() mutable {
    for (size_t i = 0; i < items.size(); ++i) {
      const hetps::v1::ReplicatedChange& change = changes->changes(items[i].change);
      absl::Status applied =
          change.kind() == hetps::v1::CHANGE_KIND_SNAPSHOT
              ? items[i].partition->LoadSnapshot(change, std::move(items[i].schedule),
                                                 items[i].bytes)
              : items[i].partition->ApplyReplicated(change, std::move(items[i].bytes));
      if (!applied.ok()) {
        pending->Fail(applied);
        return;
      }
    }
    pending->CompleteItem(0);
  };
  // A small batch is applied on the receiving thread when its owner is idle (as small data
  // requests are): waking the owner would cost more than the update.
  const bool posted = request.payload.size() <= kRunHereBytes
                          ? owners_[owner]->RunHereOrPost(std::move(apply))
                          : owners_[owner]->Post(absl::AnyInvocable<void()>(std::move(apply)));
  if (!posted) {
    pending->Fail(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
  }
}

}  // namespace hetps::server
