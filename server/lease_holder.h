// LeaseHolder: holds an etcd lease for this process, renewing it on its own thread every third
// of its time to live.
//
// valid_until() is the latest moment the lease is sure to hold: when the last acknowledged
// renewal was *sent*, plus the time to live etcd granted. A renewal delayed on the way shortens
// it, never lengthens it, so a holder that acts only while now < valid_until() never acts after
// etcd has ended the lease (clocks of one machine; etcd measures from when it got the renewal,
// which is later). Once renewals fail, the holder keeps trying until that moment; past it the
// lease is lost (etcd has ended it, or will) and held() says so.
//
// A lost lease is replaced if the holder was given a `replace` function: the holder grants a
// new lease (trying again until etcd answers) and calls `replace` with it, which re-attaches
// what the ended lease held (keys, records that name it). The new lease counts as held only
// once `replace` returned OK. Aborted from `replace` means this process may not hold a lease
// again: the holder gives up (ended() says so) and held() stays false.
//
// Every moment here is on the monotonic clock, as etcd's are: the wall clock may be stepped
// (NTP, a VM resumed), and a step forward would end a good lease while a step back would let
// a holder act after etcd has ended its lease.
//
// Thread-safe.
#ifndef HETPS_SERVER_LEASE_HOLDER_H_
#define HETPS_SERVER_LEASE_HOLDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/etcd_client.h"

namespace hetps::server {

class LeaseHolder {
 public:
  // Called on the holder's thread with the lease that ended and the one granted in its place.
  using Replace = absl::AnyInvocable<absl::Status(int64_t ended, int64_t granted)>;
  // Grants a lease of `ttl` (whole seconds; etcd may grant more, see GrantLease) and starts
  // renewing it. `etcd` must outlive the holder, and `replace` (null: a lost lease stays lost)
  // whatever it uses.
  static absl::StatusOr<std::unique_ptr<LeaseHolder>> Start(EtcdClient* etcd, absl::Duration ttl,
                                                            Replace replace = nullptr);
  ~LeaseHolder();  // Stop(/*revoke=*/false)

  // The lease held, or being replaced.
  int64_t id() const { return id_.load(std::memory_order_acquire); }
  absl::Duration ttl() const { return ttl_; }  // as granted
  using Clock = std::chrono::steady_clock;
  Clock::time_point valid_until() const {
    return Clock::time_point(Clock::duration(valid_until_.load(std::memory_order_acquire)));
  }
  // Lock-free: shards ask on every request.
  bool held() const { return Clock::now() < valid_until(); }
  // valid_until() on hetps::Now()'s clock: a call that ends the lease need not outlive it.
  absl::Time ValidUntil() const;
  // Lost, and no lease will replace it (no `replace`, Aborted from it, or stopped).
  bool ended() const { return ended_.load(std::memory_order_acquire); }
  // Stops renewing; with `revoke`, ends the lease at once (its keys go now, not after the time
  // to live). Idempotent. Ends the etcd client's calls in flight (EtcdClient::CancelCalls), and
  // revokes only a lease that still holds, giving up when it would end by itself: a silent etcd
  // holds a stop for no longer than the lease has left.
  void Stop(bool revoke);

 private:
  LeaseHolder(EtcdClient* etcd, int64_t id, absl::Duration ttl, Clock::time_point valid_until,
              Replace replace);
  void ExtendTo(Clock::time_point until);
  void Run();
  // After the lease was lost: grants new ones and offers them to replace_ until one is taken
  // (true) or the holder gives up or stops (false).
  bool ReplaceLost() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  EtcdClient* const etcd_;
  std::atomic<int64_t> id_;
  const absl::Duration ttl_;
  Replace replace_;  // the holder's thread only
  std::atomic<bool> ended_{false};
  // Written by the renewing thread (and Stop), read by any.
  std::atomic<Clock::rep> valid_until_;  // Clock ticks since its epoch
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::once_flag joined_;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_LEASE_HOLDER_H_
