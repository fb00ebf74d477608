// Replication between shards (--replicas 2): a primary partition's changes go to the backup
// shard through the Replicator; the backup applies them here.
#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/reused_message.h"
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
  if (options_.replicas < 2 || options_.num_shards < 2) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d keeps no backups (started with --replicas %d), shard %d sends it changes: "
        "start every shard with the same --replicas",
        options_.shard_index, options_.replicas, peer));
  }
  if (peer != PrimaryOfBackups()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("shard %d keeps the backups of shard %d, not of shard %d",
                        options_.shard_index, PrimaryOfBackups(), peer));
  }
  return absl::OkStatus();
}

void Shard::SendToBackup(Partition& partition, std::vector<ReplicatedChange> changes) {
  replicator_->Send(std::move(changes), [this, &partition](absl::Status status) {
    if (status.code() == absl::StatusCode::kNotFound && CheckLease().ok()) {
      // The backup is gone (its lease ended): go on without a copy rather than stall.
      owners_[partition.owner()]->RunHereOrPost([&partition] { partition.DropBackup(); });
      return;
    }
    // Cancelled: the shard is stopping, and waiting requests are failed by Stop.
    if (!status.ok()) return;
    // Confirmed too late to be acknowledged: the partition acknowledges nothing from now on
    // (its waiting requests end at their deadlines, saying why).
    if (!CheckLease().ok()) return;
    owners_[partition.owner()]->RunHereOrPost([&partition] { partition.Replicated(); });
  });
}

void Shard::Replicate(transport::Request request, transport::ReplyCallback reply) {
  {
    absl::MutexLock lock(&peers_mu_);
    if (!peer_connections_.contains(request.connection)) {
      reply(absl::PermissionDeniedError(absl::StrFormat(
          "shard %d takes replicated changes only from its primary, shard %d, on the connection "
          "it opened",
          options_.shard_index, PrimaryOfBackups())));
      return;
    }
  }
  primary_seen_.store(true, std::memory_order_relaxed);
  ReusedMessage<hetps::v1::ReplicateRequest> replicate;
  if (absl::Status parsed = ParseHeaderInto(request.header, *replicate); !parsed.ok()) {
    reply(parsed);
    return;
  }
  // Checked whole first: each change's partition must be a backup here, its bytes in the
  // payload.
  struct Item {
    Partition* partition;
    transport::Payload bytes;
  };
  std::vector<Item> items;
  items.reserve(replicate->changes_size());
  uint64_t offset = 0;
  for (const hetps::v1::ReplicatedChange& change : replicate->changes()) {
    absl::StatusOr<std::pair<const Tensor*, Partition*>> located =
        LocatePartition(change.tensor_key(), change.partition(), /*backup=*/true);
    if (located.ok() && !located->second->is_backup()) {
      located = absl::FailedPreconditionError(absl::StrFormat(
          "shard %d serves partition %d of tensor '%s' itself: it is not a backup here",
          options_.shard_index, change.partition(), located->first->decl.name()));
    }
    if (!located.ok()) {
      reply(located.status());
      return;
    }
    if (change.num_bytes() > request.payload.size() - offset) {
      reply(absl::InvalidArgumentError("the payload ends before the changes' bytes do"));
      return;
    }
    items.push_back(Item{located->second, request.payload.Subrange(offset, change.num_bytes())});
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
      absl::Status applied = items[i].partition->ApplyReplicated(
          changes->changes(static_cast<int>(i)), std::move(items[i].bytes));
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
