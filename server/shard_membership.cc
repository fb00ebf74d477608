// A shard's membership in etcd (ShardOptions::etcd): the lease it holds while it runs, its
// address registered under the lease, the rule that a shard acknowledges updates only while
// its lease is held, and who serves and who backs up each group of partitions (failover and
// rejoin).
#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/shard.h"

namespace hetps::server {

namespace {

// A group's key holds "<epoch> <server> <backup or -> <backup's lease> <server's lease>"
// (records of an older layout lack the last field).
std::string FormatGroup(const Shard::GroupRecord& record) {
  return absl::StrCat(record.epoch, " ", record.server, " ",
                      record.backup < 0 ? "-" : absl::StrCat(record.backup), " ",
                      record.backup_lease, " ", record.server_lease);
}

bool ParseGroup(const std::string& value, Shard::GroupRecord* record) {
  const std::vector<std::string> fields = absl::StrSplit(value, ' ');
  if ((fields.size() != 4 && fields.size() != 5) || !absl::SimpleAtoi(fields[0], &record->epoch) ||
      !absl::SimpleAtoi(fields[1], &record->server) ||
      !absl::SimpleAtoi(fields[3], &record->backup_lease) ||
      (fields.size() == 5 && !absl::SimpleAtoi(fields[4], &record->server_lease))) {
    return false;
  }
  record->backup = -1;
  return fields[2] == "-" || absl::SimpleAtoi(fields[2], &record->backup);
}

}  // namespace

std::string Shard::MemberKey(uint32_t index) const {
  return absl::StrCat("/hetps/", options_.job_id, "/shards/", index);
}

std::string Shard::GroupKey(uint32_t group) const {
  return absl::StrCat("/hetps/", options_.job_id, "/groups/", group);
}

std::string Shard::StateRunKey(uint32_t index) const {
  return absl::StrCat("/hetps/", options_.job_id, "/state_runs/", index);
}

std::string Shard::ProcessKey(uint32_t index) const {
  return absl::StrCat("/hetps/", options_.job_id, "/processes/", index);
}

absl::Status Shard::CheckStillThisShardsProcess() const {
  const uint32_t me = options_.shard_index;
  HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> process, etcd_->Get(ProcessKey(me)));
  if (process.has_value() && process->value == absl::StrCat(first_lease_)) return absl::OkStatus();
  return absl::AbortedError(absl::StrFormat(
      "another process runs shard %d now (etcd key %s names %s, this process %d)", me,
      ProcessKey(me), process.has_value() ? process->value : "none", first_lease_));
}

absl::StatusOr<Shard::GroupRecord> Shard::ParseGroupKey(uint32_t group,
                                                        const EtcdClient::Value& value) const {
  GroupRecord record;
  if (!ParseGroup(value.value, &record) || record.server >= options_.num_shards ||
      record.backup >= static_cast<int64_t>(options_.num_shards)) {
    return absl::DataLossError(
        absl::StrFormat("etcd key %s is malformed: '%s'", GroupKey(group), value.value));
  }
  record.mod_revision = value.mod_revision;
  return record;
}

absl::StatusOr<Shard::GroupRecord> Shard::ReadGroup(uint32_t group) const {
  HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> value, etcd_->Get(GroupKey(group)));
  if (!value.has_value()) {
    return absl::NotFoundError(absl::StrFormat("etcd has no key %s", GroupKey(group)));
  }
  return ParseGroupKey(group, *value);
}

absl::StatusOr<std::vector<std::optional<Shard::GroupRecord>>> Shard::ReadGroups() const {
  // One read for all: every shard does this every quarter lease.
  const std::string prefix = absl::StrCat("/hetps/", options_.job_id, "/groups/");
  HETPS_ASSIGN_OR_RETURN(auto values, etcd_->GetPrefix(prefix));
  std::vector<std::optional<GroupRecord>> records(options_.num_shards);
  for (uint32_t group = 0; group < options_.num_shards; ++group) {
    auto it = values.find(GroupKey(group));
    if (it == values.end()) continue;
    absl::StatusOr<GroupRecord> record = ParseGroupKey(group, it->second);
    if (record.ok()) records[group] = *record;
  }
  return records;
}

absl::StatusOr<bool> Shard::WriteGroup(uint32_t group, const GroupRecord& record) {
  return etcd_->PutIf(GroupKey(group), record.mod_revision, FormatGroup(record));
}

absl::Status Shard::ClaimOwnGroup() {
  const uint32_t me = options_.shard_index;
  GroupRecord initial;
  initial.epoch = 1;
  initial.server = me;
  initial.server_lease = lease_->id();
  // The next shard starts with the job, with complete copies: it names its lease itself.
  // Restored from a checkpoint, it has none: it becomes the backup by catching up.
  initial.backup = replication_on_ && resume_step_ == 0
                       ? static_cast<int64_t>((me + 1) % options_.num_shards)
                       : -1;
  HETPS_ASSIGN_OR_RETURN(bool created, WriteGroup(me, initial));
  if (created) {
    fresh_member_.store(true);
    return etcd_->Put(StateRunKey(me), absl::StrCat(incarnation_));
  }
  // A restart, or a new run of the job. Wait (bounded) while the last run may still be handed
  // over: its registration has not ended yet, or a backup with complete copies is due to take
  // over.
  const absl::Time deadline = hetps::Now() + 3 * options_.lease_ttl + absl::Seconds(1);
  GroupRecord record;
  while (true) {
    HETPS_ASSIGN_OR_RETURN(record, ReadGroup(me));
    group_server_[me].store(record.server);
    absl::StatusOr<EtcdClient::Value> server = FindMember(record.server);
    if (!server.ok() && server.status().code() != absl::StatusCode::kNotFound) {
      return server.status();
    }
    // The shard that took the group over still runs (the run that took it: it holds the
    // state). A shard restored from a checkpoint waits until a taker seen alive has lasted
    // beyond the last run's leases: a run stopped just before the restore still holds its
    // lease for a while, and its copies are not this run's state.
    const bool taker_runs = record.server != me && server.ok() &&
                            (record.server_lease == 0 || server->lease == record.server_lease);
    if (taker_runs && resume_step_ > 0 && hetps::Now() < deadline) {
      absl::SleepFor(options_.lease_ttl / 4);
      continue;
    }
    if (taker_runs) {
      // Served by the shard that took them over: this shard's state lives on there, and this
      // shard rejoins as a backup, so workers that knew it keep their view of its run.
      HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> run, etcd_->Get(StateRunKey(me)));
      uint64_t adopted = 0;
      if (run.has_value() && absl::SimpleAtoi(run->value, &adopted)) incarnation_ = adopted;
      LogWarning(
          "shard %d: its partitions are served by shard %d since epoch %d (taken over while "
          "this shard was down); it rejoins as a backup",
          me, record.server, record.epoch);
      return absl::OkStatus();
    }
    bool handover_due = record.server == me && server.ok();  // the last run's lease is on
    if (record.server == me && !server.ok() && record.backup >= 0) {
      absl::StatusOr<EtcdClient::Value> backup = FindMember(static_cast<uint32_t>(record.backup));
      handover_due =
          backup.ok() && (record.backup_lease == 0 || backup->lease == record.backup_lease);
    }
    if (!handover_due || hetps::Now() >= deadline) break;
    absl::SleepFor(options_.lease_ttl / 4);
  }
  // A new run of the job, or its state is lost (no backup took it over: workers that knew the
  // last run get DataLoss): this shard's own again, without a backup until one catches up.
  GroupRecord reclaimed{record.epoch + 1, me, -1, 0, lease_->id(), record.mod_revision};
  HETPS_ASSIGN_OR_RETURN(bool won, WriteGroup(me, reclaimed));
  if (!won) return absl::AbortedError("another shard claimed this shard's partitions");
  group_server_[me].store(me);
  replica_target_[me].store(-1);
  return etcd_->Put(StateRunKey(me), absl::StrCat(incarnation_));
}

void Shard::ManageGroups() {
  // A quarter of the lease: a takeover follows a server's lease within that.
  const absl::Duration period = options_.lease_ttl / 4;
  absl::MutexLock lock(&watch_mu_);
  while (!watch_stopped_) {
    std::vector<std::pair<uint32_t, uint32_t>> lost = std::move(lost_backups_);
    lost_backups_.clear();
    watch_mu_.Unlock();
    for (const auto& [group, backup] : lost) ForgetBackup(group, backup);
    absl::StatusOr<std::vector<std::optional<GroupRecord>>> records = ReadGroups();
    for (uint32_t group = 0; records.ok() && group < options_.num_shards && !stopped_.load();
         ++group) {
      if ((*records)[group].has_value()) ManageGroup(group, *(*records)[group]);
    }
    watch_mu_.Lock();
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) {
      return watch_stopped_ || !lost_backups_.empty();
    };
    AwaitFor(watch_mu_, absl::Condition(&wake), period);
  }
}

void Shard::ReportBackupLost(uint32_t group, uint32_t backup) {
  absl::MutexLock lock(&watch_mu_);
  lost_backups_.emplace_back(group, backup);
}

void Shard::ManageGroup(uint32_t group, GroupRecord record) {
  if (!NoteServer(group, record)) return;
  const uint32_t me = options_.shard_index;
  if (record.server == me) {
    if (!CheckLease().ok()) return;
    if (record.backup >= 0) {
      WatchBackup(group, record);
    } else if (serving_.load()) {
      // Registered first: a backup takes a server that sent it changes but is not registered
      // for gone (a restored shard copied its partitions before it registered, and its new
      // backup took them over at once).
      CatchUp(group, record);
    }
    return;
  }
  if (record.backup != static_cast<int64_t>(me) || lease_ == nullptr) return;
  // Registered first: a primary that finds a backup's lease in the record but the backup not
  // registered takes it for gone (at the start, this watcher runs before Register).
  if (record.backup_lease == 0 && fresh_member_.load() && serving_.load()) {
    // Named at the job's start, with copies complete since: this run's lease makes it so.
    GroupRecord named = record;
    named.backup_lease = lease_->id();
    absl::StatusOr<bool> written = WriteGroup(group, named);
    if (!written.ok() || !*written) return;
    absl::StatusOr<GroupRecord> again = ReadGroup(group);
    if (!again.ok()) return;
    record = *again;
  }
  if (record.backup_lease != lease_->id()) return;  // not this run's copies
  // Only a server seen alive in this epoch can be gone (at the start, it may not have
  // registered yet): registered, or sending changes.
  if (changes_received_[group].exchange(false)) seen_epoch_[group] = record.epoch;
  absl::StatusOr<EtcdClient::Value> server = FindMember(record.server);
  // Registered under another lease than the record names: the server restarted (within its
  // lease, so its key never went), and its new run holds nothing of the group. The old lease
  // is over a lease after this is first seen (the new run revoked it, or nobody renews it).
  const bool restarted =
      server.ok() && record.server_lease != 0 && server->lease != record.server_lease;
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point>& restart_seen = server_restart_seen_[group];
  if (!restarted) restart_seen.reset();
  if (server.ok() && !restarted) {
    seen_epoch_[group] = record.epoch;
  } else if (seen_epoch_[group] == record.epoch) {
    if (restarted && !restart_seen) restart_seen = Clock::now();
    const bool gone =
        restarted ? Clock::now() >= *restart_seen + absl::ToChronoNanoseconds(options_.lease_ttl)
                  : server.status().code() == absl::StatusCode::kNotFound;
    if (gone) TakeOver(group, record);
  }
}

bool Shard::NoteServer(uint32_t group, const GroupRecord& record) {
  // Named by a record of this shard's earlier run: that run took the group over, and its
  // copies went with its memory. This run serves it only by claiming it anew.
  if (record.server == options_.shard_index && record.server_lease != 0 && lease_ != nullptr &&
      record.server_lease != lease_->id()) {
    return false;
  }
  const uint32_t was = group_server_[group].exchange(record.server);
  if (was == options_.shard_index && record.server != was) LetGo(group, record.epoch);
  return true;
}

void Shard::LetGo(uint32_t group, uint64_t epoch) {
  const uint32_t server = group_server_[group].load();
  // At the start a record may still name the shard that served the group in the last run.
  if (serving_.load()) {
    LogWarning(
        "shard %d: shard %d serves the partitions placed on shard %d since epoch %d: this shard "
        "serves them no more",
        options_.shard_index, server, group, epoch);
  }
  const absl::Status moved = absl::UnavailableError(
      absl::StrFormat("shard %d serves the partitions placed on shard %d since epoch %d, not "
                      "this shard %d",
                      server, group, epoch, options_.shard_index));
  ForEachPartitionOfGroup(group, [this, moved](const TensorRef& tensor, Partition* p) {
    owners_[p->owner()]->Post([tensor, p, moved] { p->FailWaiters(moved); });
  });
}

void Shard::WatchBackup(uint32_t group, const GroupRecord& record) {
  const uint32_t backup = static_cast<uint32_t>(record.backup);
  absl::StatusOr<EtcdClient::Value> member = FindMember(backup);
  if (member.ok()) {
    int64_t& seen = backup_lease_seen_[group];
    if (seen == 0) seen = member->lease;
    // Restarted (a new lease): its copies start empty.
    if (member->lease != seen ||
        (record.backup_lease != 0 && member->lease != record.backup_lease)) {
      ForgetBackup(group, backup);
    }
  } else if (member.status().code() == absl::StatusCode::kNotFound &&
             (backup_lease_seen_[group] != 0 || record.backup_lease != 0)) {
    ForgetBackup(group, backup);
  }
}

void Shard::TakeOver(uint32_t group, const GroupRecord& record) {
  // Only a shard that holds its own lease may take over; etcd decides between contenders.
  if (!CheckLease().ok()) return;
  GroupRecord next{record.epoch + 1, options_.shard_index, -1, 0,
                   lease_->id(),     record.mod_revision};
  absl::StatusOr<bool> won = WriteGroup(group, next);
  if (!won.ok() || !*won) return;
  LogWarning(
      "shard %d: shard %d is gone (its etcd lease ended): this shard serves the partitions "
      "placed on shard %d from its backups from now on (epoch %d), without copies until a "
      "shard rejoins",
      options_.shard_index, record.server, group, next.epoch);
  group_server_[group].store(options_.shard_index);
  replica_target_[group].store(-1);
  ForEachPartitionOfGroup(group, [this](const TensorRef& tensor, Partition* p) {
    owners_[p->owner()]->Post([tensor, p] { p->Promote(); });
  });
}

void Shard::ForgetBackup(uint32_t group, uint32_t backup) {
  absl::StatusOr<GroupRecord> record = ReadGroup(group);
  if (!record.ok()) {
    ReportBackupLost(group, backup);  // etcd unreachable: acknowledgements wait meanwhile
    return;
  }
  if (record->server != options_.shard_index) return;  // not this shard's to decide
  if (record->backup == static_cast<int64_t>(backup)) {
    // The record first: once it names no backup, that one can never take over with copies
    // that miss what this shard acknowledges from now on.
    GroupRecord next = *record;
    next.backup = -1;
    next.backup_lease = 0;
    absl::StatusOr<bool> written = WriteGroup(group, next);
    if (!written.ok() || !*written) {
      ReportBackupLost(group, backup);
      return;
    }
    LogWarning(
        "shard %d: backup shard %d of the partitions placed on shard %d is gone or lost its "
        "copies: they go on without a copy until it rejoins",
        options_.shard_index, backup, group);
  }
  backup_lease_seen_[group] = 0;
  if (replica_target_[group].exchange(-1) < 0) return;
  RetireReplicator(backup);
  ForEachPartitionOfGroup(group, [this](const TensorRef& tensor, Partition* p) {
    owners_[p->owner()]->Post([tensor, p] { p->DropBackup(); });
  });
}

void Shard::ForEachPartitionOfGroup(uint32_t group,
                                    absl::FunctionRef<void(const TensorRef&, Partition*)> f) {
  table_.ForEach([&](const Tensor& tensor) {
    const TensorRef held = tensor.shared_from_this();
    for (const auto& partition : tensor.partitions) {
      if (partition != nullptr &&
          ShardOfPartition(tensor.decl.key(), partition->index(), options_.num_shards) == group) {
        f(held, partition.get());
      }
    }
  });
}

absl::Status Shard::JoinCluster() {
  if (options_.etcd.empty()) return absl::OkStatus();
  HETPS_ASSIGN_OR_RETURN(etcd_, EtcdClient::Connect(options_.etcd));
  HETPS_ASSIGN_OR_RETURN(lease_, LeaseHolder::Start(etcd_.get(), options_.lease_ttl,
                                                    [this](int64_t ended, int64_t granted) {
                                                      return ReplaceLease(ended, granted);
                                                    }));
  // A new run of this shard index ends the last one's lease: its registration goes now, not
  // when the lease runs out, and a process of it that still runs stops acknowledging and
  // takes no lease again (named here first: ReplaceLease).
  first_lease_ = lease_->id();
  HETPS_RETURN_IF_ERROR(etcd_->Put(ProcessKey(options_.shard_index), absl::StrCat(first_lease_)));
  if (absl::StatusOr<EtcdClient::Value> last = FindMember(options_.shard_index);
      last.ok() && last->lease != lease_->id()) {
    if (absl::Status revoked = etcd_->RevokeLease(last->lease, absl::InfiniteFuture());
        !revoked.ok()) {
      LogWarning("shard %d: could not end the last run's etcd lease %x: %s", options_.shard_index,
                 last->lease, revoked.ToString());
    }
  }
  HETPS_ASSIGN_OR_RETURN(auto records, ReadGroups());
  for (uint32_t group = 0; group < options_.num_shards; ++group) {
    if (records[group].has_value()) NoteServer(group, *records[group]);
  }
  HETPS_RETURN_IF_ERROR(ClaimOwnGroup());
  if (replication_on_) watcher_ = std::thread([this] { ManageGroups(); });
  return absl::OkStatus();
}

absl::Status Shard::Register(const std::string& address) {
  if (lease_ == nullptr) {
    serving_.store(true);
    return absl::OkStatus();
  }
  // Where the others reach it: as the server list names it if there is one (a shard listening
  // on 0.0.0.0 is not reached there).
  const std::string advertised = options_.servers.size() == options_.num_shards
                                     ? options_.servers[options_.shard_index]
                                     : address;
  {
    absl::MutexLock lock(&member_mu_);
    HETPS_RETURN_IF_ERROR(etcd_->Put(MemberKey(options_.shard_index), advertised, lease_->id()));
    advertised_ = advertised;
  }
  LogInfo("shard %d: registered %s in etcd at %s (key %s, lease %x of %s)", options_.shard_index,
          advertised, options_.etcd, MemberKey(options_.shard_index), lease_->id(),
          absl::FormatDuration(lease_->ttl()));
  serving_.store(true);
  return absl::OkStatus();
}

absl::Status Shard::ReplaceLease(int64_t ended, int64_t granted) {
  ended_leases_.push_back(ended);
  // A new run of this shard index (which ended this run's lease) has the last word: checked
  // before anything is written, and again after, since it may start meanwhile.
  HETPS_RETURN_IF_ERROR(CheckStillThisShardsProcess());
  // Registered again first: a backup that finds this shard registered under another lease
  // than the record names waits a lease before it takes the group over (ManageGroup), which
  // the records' update below ends.
  {
    absl::MutexLock lock(&member_mu_);
    if (!advertised_.empty()) HETPS_RETURN_IF_ERROR(RegisterAgain(granted));
  }
  for (uint32_t group = 0; group < options_.num_shards; ++group) {
    HETPS_RETURN_IF_ERROR(ReclaimGroup(group, granted));
  }
  return CheckStillThisShardsProcess();
}

bool Shard::IsOwnLease(int64_t lease, int64_t granted) const {
  return lease == granted ||
         std::find(ended_leases_.begin(), ended_leases_.end(), lease) != ended_leases_.end();
}

absl::Status Shard::RegisterAgain(int64_t granted) {
  const std::string key = MemberKey(options_.shard_index);
  HETPS_ASSIGN_OR_RETURN(std::optional<EtcdClient::Value> member, etcd_->Get(key));
  // Never over another process's registration (a new run of this index).
  if (member.has_value() && !IsOwnLease(member->lease, granted)) {
    return absl::AbortedError(
        absl::StrFormat("another process registered shard %d at %s (etcd key %s)",
                        options_.shard_index, member->value, key));
  }
  HETPS_ASSIGN_OR_RETURN(
      bool written,
      etcd_->PutIf(key, member.has_value() ? member->mod_revision : 0, advertised_, granted));
  if (!written) return absl::UnavailableError(absl::StrCat("etcd key ", key, " changed meanwhile"));
  return absl::OkStatus();
}

absl::Status Shard::ReclaimGroup(uint32_t group, int64_t granted) {
  const uint32_t me = options_.shard_index;
  // A few tries: the watcher may write the record meanwhile (e.g. it forgets a backup).
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<GroupRecord> record = ReadGroup(group);
    if (record.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    if (!record.ok()) return record.status();
    const bool named_here = record->server == me && (record->server_lease == 0 ||
                                                     IsOwnLease(record->server_lease, granted));
    if (!named_here) {
      bool serves_some = false;
      ForEachPartitionOfGroup(group, [&](const TensorRef&, Partition* partition) {
        serves_some = serves_some || !partition->is_backup();
      });
      if (!serves_some) return absl::OkStatus();
      return absl::AbortedError(absl::StrFormat(
          "shard %d serves the partitions placed on shard %d since epoch %d, taken over while "
          "shard %d's lease was lost: this process's copies of them are out of date (restart "
          "it: it rejoins as a backup)",
          record->server, group, record->epoch, me));
    }
    if (record->server_lease == granted) return absl::OkStatus();
    GroupRecord renewed = *record;
    renewed.server_lease = granted;
    HETPS_ASSIGN_OR_RETURN(bool written, WriteGroup(group, renewed));
    if (written) return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrFormat("the etcd record of group %d kept changing", group));
}

absl::StatusOr<EtcdClient::Value> Shard::FindMember(uint32_t index) const {
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
  return *std::move(member);
}

absl::Status Shard::CheckLease() const {
  if (lease_ == nullptr || lease_->held()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "shard %d lost its etcd lease (%s could not be reached to renew it in time): it "
      "acknowledges no update, since another shard may have taken its partitions over",
      options_.shard_index, options_.etcd));
}

}  // namespace hetps::server
