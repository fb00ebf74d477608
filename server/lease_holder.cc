#include "server/lease_holder.h"

#include <algorithm>

#include "common/log.h"

namespace hetps::server {

absl::StatusOr<std::unique_ptr<LeaseHolder>> LeaseHolder::Start(EtcdClient* etcd,
                                                                absl::Duration ttl) {
  const absl::Time asked = absl::Now();
  absl::StatusOr<EtcdClient::Lease> lease = etcd->GrantLease(ttl);
  if (!lease.ok()) return lease.status();
  return std::unique_ptr<LeaseHolder>(
      new LeaseHolder(etcd, lease->id, lease->ttl, asked + lease->ttl));
}

LeaseHolder::LeaseHolder(EtcdClient* etcd, int64_t id, absl::Duration ttl, absl::Time valid_until)
    : etcd_(etcd), id_(id), ttl_(ttl), valid_until_ns_(absl::ToUnixNanos(valid_until)) {
  thread_ = std::thread([this] { Run(); });
}

LeaseHolder::~LeaseHolder() { Stop(/*revoke=*/false); }

void LeaseHolder::Run() {
  const absl::Duration period = ttl_ / 3;
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // Renew a third of the way through; after a failure, try again sooner, until it is lost.
    const absl::Time now = absl::Now();
    if (now >= valid_until()) {
      LogWarning("etcd lease %x ended: it could not be renewed in time", id_);
      return;
    }
    mu_.Unlock();
    const absl::Time sent = absl::Now();
    absl::StatusOr<absl::Duration> renewed = etcd_->RenewLease(id_);
    mu_.Lock();
    absl::Duration pause = period;
    if (renewed.ok()) {
      valid_until_ns_.store(std::max(valid_until_ns_.load(), absl::ToUnixNanos(sent + *renewed)),
                            std::memory_order_release);
    } else if (renewed.status().code() == absl::StatusCode::kNotFound) {
      valid_until_ns_.store(0, std::memory_order_release);  // etcd has ended it
      LogWarning("etcd lease %x ended: %s", id_, renewed.status().ToString());
      return;
    } else {
      pause = std::min(period, absl::Milliseconds(200));
      LogWarning("etcd lease %x not renewed, trying again: %s", id_, renewed.status().ToString());
    }
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stop), pause);
  }
}

void LeaseHolder::Stop(bool revoke) {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  std::call_once(joined_, [this] { thread_.join(); });
  if (revoke) {
    absl::Status revoked = etcd_->RevokeLease(id_);
    if (!revoked.ok()) LogWarning("etcd lease %x not revoked: %s", id_, revoked.ToString());
    valid_until_ns_.store(0, std::memory_order_release);
  }
}

}  // namespace hetps::server
