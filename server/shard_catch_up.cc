// Rejoin (--replicas 2): a shard that serves a group without a backup copies its partitions to
// the shard that comes back, one at a time while training goes on, and names it the backup in
// etcd once it holds them all.
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

// What the watcher thread waits for while a copy is under way: set once, from any thread.
struct Outcome {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool ok ABSL_GUARDED_BY(mu) = false;
  bool sent ABSL_GUARDED_BY(mu) = false;  // a snapshot went (the partition was not replicated)

  void Set(bool succeeded) {
    absl::MutexLock lock(&mu);
    done = true;
    ok = succeeded;
  }
};

// A partition's copy: its bytes over the link, within the replicator's own deadline.
constexpr absl::Duration kCopyDeadline = absl::Seconds(60);

// A change naming a tensor's declaration and hyperparameter schedule.
hetps::v1::ReplicatedChange TensorChange(const Tensor& tensor, hetps::v1::ChangeKind kind,
                                         uint32_t partition) {
  hetps::v1::ReplicatedChange change;
  change.set_kind(kind);
  change.set_tensor_key(tensor.decl.key());
  change.set_partition(partition);
  *change.mutable_decl() = tensor.decl;
  absl::MutexLock lock(&tensor.schedule_mu);
  for (const auto& [from_version, params] : tensor.schedule) {
    hetps::v1::ScheduleEntry* entry = change.add_schedule();
    entry->set_from_version(from_version);
    entry->mutable_params()->insert(params.begin(), params.end());
  }
  return change;
}

}  // namespace

absl::Status Shard::AwaitOutcome(const std::shared_ptr<void>& awaited, const std::string& what) {
  Outcome& outcome = *std::static_pointer_cast<Outcome>(awaited);
  const absl::Time deadline = hetps::Now() + kCopyDeadline;
  absl::MutexLock lock(&outcome.mu);
  auto done = [&outcome]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(outcome.mu) { return outcome.done; };
  while (!AwaitFor(outcome.mu, absl::Condition(&done), absl::Milliseconds(100))) {
    if (stopped_.load()) return absl::CancelledError("the shard is stopping");
    if (hetps::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s did not reach the backup within %s", what, absl::FormatDuration(kCopyDeadline)));
    }
  }
  if (!outcome.ok) return absl::UnavailableError(absl::StrCat("the backup did not take ", what));
  return absl::OkStatus();
}

void Shard::CatchUp(uint32_t group, const GroupRecord& record) {
  const uint32_t me = options_.shard_index;
  // A group's copies live on its own shard and the next: the backup is whichever of the two
  // does not serve it.
  const uint32_t backup = group == me ? (me + 1) % options_.num_shards : group;
  absl::StatusOr<EtcdClient::Value> member = FindMember(backup);
  if (!member.ok()) return;
  LogInfo("shard %d: copying the partitions placed on shard %d to shard %d, one at a time", me,
          group, backup);
  const absl::Time start = hetps::Now();
  replica_target_[group].store(static_cast<int32_t>(backup));
  // Tensors declared meanwhile replicate from their start; a pass finds any left over.
  absl::flat_hash_set<uint64_t> declared;
  size_t copied = 0;
  for (bool more = true; more;) {
    more = false;
    std::vector<std::pair<TensorRef, Partition*>> partitions;
    table_.ForEach([&](const Tensor& tensor) {
      for (const auto& partition : tensor.partitions) {
        // Backups too: one just taken over may not be promoted yet (it refuses the copy, and the
        // next round tries again).
        if (partition == nullptr ||
            ShardOfPartition(tensor.decl.key(), partition->index(), options_.num_shards) != group) {
          continue;
        }
        partitions.emplace_back(tensor.shared_from_this(), partition.get());
      }
    });
    // The tensors first, before any partition waits for the backup: a large one takes a
    // while to set up there, and the backup applies nothing else meanwhile.
    absl::Status declared_there = absl::OkStatus();
    const absl::Time declaring = hetps::Now();
    const size_t declared_before = declared.size();
    for (const auto& [tensor, partition] : partitions) {
      if (declared_there.ok() && declared.insert(tensor->decl.key()).second) {
        declared_there = DeclareOnBackup(backup, *tensor, partition->index());
      }
    }
    if (declared.size() > declared_before) {
      LogInfo("shard %d: shard %d declared %d tensors in %s", me, backup,
              declared.size() - declared_before, absl::FormatDuration(hetps::Now() - declaring));
    }
    for (const auto& [tensor, partition] : partitions) {
      const absl::StatusOr<bool> sent =
          declared_there.ok() ? CopyPartition(*tensor, *partition) : declared_there;
      if (!sent.ok()) {
        LogWarning("shard %d: copying to shard %d stopped: %s", me, backup,
                   sent.status().ToString());
        ForgetBackup(group, backup);
        return;
      }
      if (*sent) {
        ++copied;
        more = true;
      }
    }
  }
  GroupRecord next = record;
  next.backup = backup;
  next.backup_lease = member->lease;
  absl::StatusOr<EtcdClient::Value> still = FindMember(backup);
  absl::StatusOr<bool> named = absl::AbortedError("the new backup restarted meanwhile");
  if (still.ok() && still->lease == member->lease) named = WriteGroup(group, next);
  if (!named.ok() || !*named) {
    ForgetBackup(group, backup);
    return;
  }
  backup_lease_seen_[group] = member->lease;
  LogInfo(
      "shard %d: shard %d is a full backup of the partitions placed on shard %d again (%d "
      "partitions copied in %s)",
      me, backup, group, copied, absl::FormatDuration(hetps::Now() - start));
}

absl::Status Shard::DeclareOnBackup(uint32_t backup, const Tensor& tensor, uint32_t partition) {
  auto outcome = std::make_shared<Outcome>();
  std::vector<ReplicatedChange> changes(1);
  changes[0].meta = TensorChange(tensor, hetps::v1::CHANGE_KIND_DECLARE, partition);
  ReplicatorFor(backup)->Send(std::move(changes),
                              [outcome](absl::Status status) { outcome->Set(status.ok()); });
  return AwaitOutcome(outcome,
                      absl::StrFormat("the declaration of tensor '%s'", tensor.decl.name()));
}

absl::StatusOr<bool> Shard::CopyPartition(const Tensor& tensor, Partition& partition) {
  auto outcome = std::make_shared<Outcome>();
  Partition* p = &partition;
  hetps::v1::ReplicatedChange meta =
      TensorChange(tensor, hetps::v1::CHANGE_KIND_SNAPSHOT, partition.index());
  const bool posted = owners_[p->owner()]->Post(
      [held = tensor.shared_from_this(), p, outcome, meta = std::move(meta)]() mutable {
        {
          absl::MutexLock lock(&outcome->mu);
          outcome->sent = !p->replicated();
        }
        p->StartReplica(std::move(meta), [outcome](bool copied) { outcome->Set(copied); });
      });
  if (!posted) return absl::CancelledError("the shard is stopping");
  HETPS_RETURN_IF_ERROR(AwaitOutcome(
      outcome, absl::StrFormat("partition %d of tensor '%s'", p->index(), tensor.decl.name())));
  absl::MutexLock lock(&outcome->mu);
  return outcome->sent;
}

}  // namespace hetps::server
