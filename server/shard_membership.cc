// A shard's membership in etcd (ShardOptions::etcd): the lease it holds while it runs, its
// address registered under the lease, and the rule that a shard acknowledges updates only
// while its lease is held.
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/shard.h"

namespace hetps::server {

namespace {

// "<epoch> <shard>", the value of a group's key.
bool ParseGroup(const std::string& value, uint64_t* epoch, uint32_t* shard) {
  const std::vector<std::string> fields = absl::StrSplit(value, ' ');
  return fields.size() == 2 && absl::SimpleAtoi(fields[0], epoch) &&
         absl::SimpleAtoi(fields[1], shard);
}

}  // namespace

std::string Shard::MemberKey(uint32_t index) const {
  return absl::StrCat("/hetps/", options_.job_id, "/shards/", index);
}

std::string Shard::GroupKey(uint32_t group) const {
  return absl::StrCat("/hetps/", options_.job_id, "/groups/", group);
}

absl::Status Shard::ClaimOwnGroup() {
  const uint32_t me = options_.shard_index;
  HETPS_ASSIGN_OR_RETURN(bool created, etcd_->PutIf(GroupKey(me), 0, absl::StrCat(1, " ", me)));
  if (created) {
    fresh_member_.store(true);
    return absl::OkStatus();
  }
  HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> group, etcd_->Get(GroupKey(me)));
  uint64_t epoch = 0;
  uint32_t server = 0;
  if (!group.has_value() || !ParseGroup(group->value, &epoch, &server)) {
    return absl::DataLossError(absl::StrFormat("etcd key %s is malformed", GroupKey(me)));
  }
  // Whoever the key names is alive if registered (this shard is not registered yet: a
  // registration of its own index is its previous run's, whose lease has not ended).
  absl::StatusOr<std::string> registered = FindMember(server);
  if (!registered.ok() && registered.status().code() != absl::StatusCode::kNotFound) {
    return registered.status();
  }
  const bool alive = registered.ok();
  if (server != me && alive) {
    own_group_moved_.store(true);
    own_group_server_.store(server);
    LogWarning(
        "shard %d: its partitions are served by shard %d since epoch %d (taken over while this "
        "shard was down); it does not serve them",
        me, server, epoch);
  } else if (server == me && alive) {
    // Restarted before its last run's lease ended: the copies it keeps of another shard's
    // partitions start empty, so it must never take over with them.
    LogWarning(
        "shard %d: restarted while its last run was still registered: it will not take "
        "another shard's partitions over (its copies of them start empty)",
        me);
  } else {
    // A new run of the job (the shard the key names is gone): this shard's own again.
    HETPS_ASSIGN_OR_RETURN(bool reclaimed, etcd_->PutIf(GroupKey(me), group->mod_revision,
                                                        absl::StrCat(epoch + 1, " ", me)));
    if (!reclaimed) return absl::AbortedError("another shard claimed this shard's partitions");
    fresh_member_.store(true);
  }
  return absl::OkStatus();
}

void Shard::WatchPrimary() {
  const uint32_t primary = PrimaryOfBackups();
  // A quarter of the lease: the takeover follows the primary's lease within that.
  const absl::Duration period = options_.lease_ttl / 4;
  // Not registered yet is not gone: only a primary seen alive (registered, or sending
  // changes) can be gone.
  absl::MutexLock lock(&watch_mu_);
  while (!took_over_.load()) {
    watch_mu_.Unlock();
    absl::StatusOr<std::string> member = FindMember(primary);
    if (member.ok()) primary_seen_.store(true);
    if (primary_seen_.load() && member.status().code() == absl::StatusCode::kNotFound) {
      TakeOver(primary);
    }
    watch_mu_.Lock();
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return watch_stopped_; };
    if (watch_mu_.AwaitWithTimeout(absl::Condition(&stopped), period)) return;
  }
}

void Shard::TakeOver(uint32_t group) {
  // Only a shard that holds its own lease, and has held copies since the job began, may take
  // over; etcd decides between contenders.
  if (!CheckLease().ok() || !fresh_member_.load()) return;
  absl::StatusOr<std::optional<EtcdClient::Value>> current = etcd_->Get(GroupKey(group));
  uint64_t epoch = 0;
  uint32_t server = 0;
  if (!current.ok() || !current->has_value() || !ParseGroup((*current)->value, &epoch, &server) ||
      server != group) {
    return;
  }
  absl::StatusOr<bool> won = etcd_->PutIf(GroupKey(group), (*current)->mod_revision,
                                          absl::StrCat(epoch + 1, " ", options_.shard_index));
  if (!won.ok() || !*won) return;
  LogWarning(
      "shard %d: shard %d is gone (its etcd lease ended): this shard serves its partitions "
      "from its backups from now on (epoch %d), without copies until a shard rejoins",
      options_.shard_index, group, epoch + 1);
  took_over_.store(true);
  table_.ForEach([&](const Tensor& tensor) {
    for (const auto& partition : tensor.partitions) {
      if (partition == nullptr || !partition->is_backup()) continue;
      Partition* p = partition.get();
      owners_[p->owner()]->Post([p] { p->Promote(); });
    }
  });
}

absl::Status Shard::JoinCluster() {
  if (options_.etcd.empty()) return absl::OkStatus();
  HETPS_ASSIGN_OR_RETURN(etcd_, EtcdClient::Connect(options_.etcd));
  HETPS_ASSIGN_OR_RETURN(lease_, LeaseHolder::Start(etcd_.get(), options_.lease_ttl));
  HETPS_RETURN_IF_ERROR(ClaimOwnGroup());
  if (replicator_ != nullptr) watcher_ = std::thread([this] { WatchPrimary(); });
  return absl::OkStatus();
}

absl::Status Shard::Register(const std::string& address) {
  if (lease_ == nullptr) return absl::OkStatus();
  // Where the others reach it: as the server list names it if there is one (a shard listening
  // on 0.0.0.0 is not reached there).
  const std::string advertised = options_.servers.size() == options_.num_shards
                                     ? options_.servers[options_.shard_index]
                                     : address;
  HETPS_RETURN_IF_ERROR(etcd_->Put(MemberKey(options_.shard_index), advertised, lease_->id()));
  LogInfo("shard %d: registered %s in etcd at %s (key %s, lease %x of %s)", options_.shard_index,
          advertised, options_.etcd, MemberKey(options_.shard_index), lease_->id(),
          absl::FormatDuration(lease_->ttl()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Shard::FindMember(uint32_t index) const {
  if (etcd_ == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("shard %d has not joined the cluster in etcd yet", options_.shard_index));
  }
  HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> member, etcd_->Get(MemberKey(index)));
  if (!member.has_value()) {
    return absl::NotFoundError(
        absl::StrFormat("shard %d is not registered in etcd at %s (%s): not started, or gone",
                        index, options_.etcd, MemberKey(index)));
  }
  return member->value;
}

absl::Status Shard::CheckLease() const {
  if (lease_ == nullptr || lease_->held()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "shard %d lost its etcd lease (%s could not be reached to renew it in time): it "
      "acknowledges no update, since another shard may have taken its partitions over",
      options_.shard_index, options_.etcd));
}

}  // namespace hetps::server
