#include "server/lease_holder.h"

#include <algorithm>
#include <utility>

#include "common/await.h"
#include "common/clock.h"
#include "common/log.h"

namespace hetps::server {

absl::StatusOr<std::unique_ptr<LeaseHolder>> LeaseHolder::Start(EtcdClient* etcd,
                                                                absl::Duration ttl,
                                                                Replace replace) {
  const Clock::time_point asked = Clock::now();
  absl::StatusOr<EtcdClient::Lease> lease = etcd->GrantLease(ttl, absl::InfiniteFuture());
  if (!lease.ok()) return lease.status();
  return std::unique_ptr<LeaseHolder>(new LeaseHolder(etcd, lease->id, lease->ttl,
                                                      asked + absl::ToChronoNanoseconds(lease->ttl),
                                                      std::move(replace)));
}

LeaseHolder::LeaseHolder(EtcdClient* etcd, int64_t id, absl::Duration ttl,
                         Clock::time_point valid_until, Replace replace)
    : etcd_(etcd),
      id_(id),
      ttl_(ttl),
      replace_(std::move(replace)),
      valid_until_(valid_until.time_since_epoch().count()) {
  thread_ = std::thread([this] { Run(); });
}

absl::Time LeaseHolder::ValidUntil() const {
  return hetps::Now() + absl::FromChrono(valid_until() - Clock::now());
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
      LogWarning("etcd lease %x ended: it could not be renewed in time", id());
      if (!ReplaceLost()) break;
      continue;
    }
    mu_.Unlock();
    const Clock::time_point sent = Clock::now();
    // For a time to live at most: a later answer extends nothing (the lease would run from
    // `sent`), and a renewal held for the client's call timeout (5 s) would keep a holder cut
    // off from etcd from noticing and taking a new lease.
    absl::StatusOr<absl::Duration> renewed = etcd_->RenewLease(id(), hetps::Now() + ttl_);
    mu_.Lock();
    absl::Duration pause = period;
    if (renewed.ok()) {
      ExtendTo(sent + absl::ToChronoNanoseconds(*renewed));
    } else if (renewed.status().code() == absl::StatusCode::kNotFound) {
      valid_until_.store(0, std::memory_order_release);  // etcd has ended it
      LogWarning("etcd lease %x ended: %s", id(), renewed.status().ToString());
      if (!ReplaceLost()) break;
      continue;
    } else {
      pause = std::min(period, absl::Milliseconds(200));
      LogWarning("etcd lease %x not renewed, trying again: %s", id(), renewed.status().ToString());
    }
    auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    AwaitFor(mu_, absl::Condition(&stop), pause);
  }
  ended_.store(!held(), std::memory_order_release);
}

bool LeaseHolder::ReplaceLost() {
  if (!replace_) return false;
  // From a tenth of a second up to a third of the lease: etcd may be back any moment.
  absl::Duration pause = std::min(ttl_ / 3, absl::Milliseconds(100));
  auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  absl::Time last_warning = absl::InfinitePast();
  while (!stopping_) {
    mu_.Unlock();
    const Clock::time_point asked = Clock::now();
    // A lease granted after its time to live would already have ended here.
    absl::StatusOr<EtcdClient::Lease> lease = etcd_->GrantLease(ttl_, hetps::Now() + ttl_);
    absl::Status taken = lease.status();
    if (lease.ok()) {
      const int64_t ended = id();
      id_.store(lease->id, std::memory_order_release);
      taken = replace_(ended, lease->id);
      if (taken.ok()) {
        ExtendTo(asked + absl::ToChronoNanoseconds(lease->ttl));
        LogWarning("new etcd lease %x in place of %x, which ended", lease->id, ended);
      } else {
        id_.store(ended, std::memory_order_release);
        // Unrevoked, it ends within its time to live anyway.
        if (absl::Status revoked = etcd_->RevokeLease(lease->id, hetps::Now() + lease->ttl);
            !revoked.ok()) {
          LogWarning("etcd lease %x not revoked: %s", lease->id, revoked.ToString());
        }
      }
    }
    mu_.Lock();
    if (taken.ok()) return true;
    if (taken.code() == absl::StatusCode::kAborted) {
      LogError("etcd lease %x ended, and no lease may replace it: %s", id(), taken.ToString());
      return false;
    }
    if (absl::Now() - last_warning >= absl::Seconds(10)) {
      last_warning = absl::Now();
      LogWarning("no etcd lease in place of %x yet, trying again: %s", id(), taken.ToString());
    }
    AwaitFor(mu_, absl::Condition(&stop), pause);
    pause = std::min(pause * 2, ttl_ / 3);
  }
  return false;
}

void LeaseHolder::Stop(bool revoke) {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // A renewal or grant in flight would hold the join until etcd answers or its call times out.
  etcd_->CancelCalls();
  std::call_once(joined_, [this] { thread_.join(); });
  // Only a lease that still holds needs revoking, and only until it would end by itself.
  if (revoke && held()) {
    absl::Status revoked = etcd_->RevokeLease(id_, ValidUntil());
    if (!revoked.ok()) LogWarning("etcd lease %x not revoked: %s", id_, revoked.ToString());
  }
  if (revoke) valid_until_.store(0, std::memory_order_release);
}

}  // namespace hetps::server
