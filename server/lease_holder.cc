#include "server/lease_holder.h"

#include <algorithm>

#include "common/await.h"
#include "common/log.h"

namespace hetps::server {

absl::StatusOr<std::unique_ptr<LeaseHolder>> LeaseHolder::Start(EtcdClient* etcd,
                                                                absl::Duration ttl) {
  const Clock::time_point asked = Clock::now();
  absl::StatusOr<EtcdClient::Lease> lease = etcd->GrantLease(ttl);
  if (!lease.ok()) return lease.status();
  return std::unique_ptr<LeaseHolder>(
      new LeaseHolder(etcd, lease->id, lease->ttl, asked + absl::ToChronoNanoseconds(lease->ttl)));
}

LeaseHolder::LeaseHolder(EtcdClient* etcd, int64_t id, absl::Duration ttl,
                         Clock::time_point valid_until)
    : etcd_(etcd), id_(id), ttl_(ttl), valid_until_(valid_until.time_since_epoch().count()) {
  thread_ = std::thread([this] { Run(); });
}

void LeaseHolder::ExtendTo(Clock::time_point until) {
  valid_until_.store(std::max(valid_until_.load(), until.time_since_epoch().count()),
                     std::memory_order_release);
}

LeaseHolder::~LeaseHolder() { Stop(/*revoke=*/false); }

void LeaseHolder::Run() {
  const absl::Duration period = ttl_ / 3;
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // Renew a third of the way through; after a failure, try again sooner, until it is lost.
    if (!held()) {
      LogWarning("etcd lease %x ended: it could not be renewed in time", id_);
      return;
    }
    mu_.Unlock();
    const Clock::time_point sent = Clock::now();
    absl::StatusOr<absl::Duration> renewed = etcd_->RenewLease(id_);
    mu_.Lock();
    absl::Duration pause = period;
    if (renewed.ok()) {
      ExtendTo(sent + absl::ToChronoNanoseconds(*renewed));
    } else if (renewed.status().code() == absl::StatusCode::kNotFound) {
      valid_until_.store(0, std::memory_order_release);  // etcd has ended it
      LogWarning("etcd lease %x ended: %s", id_, renewed.status().ToString());
      return;
    } else {
      pause = std::min(period, absl::Milliseconds(200));
      LogWarning("etcd lease %x not renewed, trying again: %s", id_, renewed.status().ToString());
    }
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    AwaitFor(mu_, absl::Condition(&stop), pause);
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
    valid_until_.store(0, std::memory_order_release);
  }
}

}  // namespace hetps::server
