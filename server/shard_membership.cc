// A shard's membership in etcd (ShardOptions::etcd): the lease it holds while it runs, its
// address registered under the lease, and the rule that a shard acknowledges updates only
// while its lease is held.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/shard.h"

namespace hetps::server {

std::string Shard::MemberKey(uint32_t index) const {
  return absl::StrCat("/hetps/", options_.job_id, "/shards/", index);
}

absl::Status Shard::JoinCluster() {
  if (options_.etcd.empty()) return absl::OkStatus();
  HETPS_ASSIGN_OR_RETURN(etcd_, EtcdClient::Connect(options_.etcd));
  HETPS_ASSIGN_OR_RETURN(lease_, LeaseHolder::Start(etcd_.get(), options_.lease_ttl));
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
    return absl::UnavailableError(
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
