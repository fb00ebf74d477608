// LeaseHolder: holds an etcd lease for this process, renewing it on its own thread every third
// of its time to live.
//
// valid_until() is the latest moment the lease is sure to hold: when the last acknowledged
// renewal was *sent*, plus the time to live etcd granted. A renewal delayed on the way shortens
// it, never lengthens it, so a holder that acts only while now < valid_until() never acts after
// etcd has ended the lease (clocks of one machine; etcd measures from when it got the renewal,
// which is later). Once renewals fail, the holder keeps trying until that moment; past it the
// lease is lost for good (etcd has ended it, or will) and held() says so.
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
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/etcd_client.h"

namespace hetps::server {

class LeaseHolder {
 public:
  // Grants a lease of `ttl` (whole seconds; etcd may grant more, see GrantLease) and starts
  // renewing it. `etcd` must outlive the holder.
  static absl::StatusOr<std::unique_ptr<LeaseHolder>> Start(EtcdClient* etcd, absl::Duration ttl);
  ~LeaseHolder();  // Stop(/*revoke=*/false)

  int64_t id() const { return id_; }
  absl::Duration ttl() const { return ttl_; }  // as granted
  using Clock = std::chrono::steady_clock;
  Clock::time_point valid_until() const {
    return Clock::time_point(Clock::duration(valid_until_.load(std::memory_order_acquire)));
  }
  // Lock-free: shards ask on every request.
  bool held() const { return Clock::now() < valid_until(); }
  // Stops renewing; with `revoke`, ends the lease at once (its keys go now, not after the time
  // to live). Idempotent.
  void Stop(bool revoke);

 private:
  LeaseHolder(EtcdClient* etcd, int64_t id, absl::Duration ttl, Clock::time_point valid_until);
  void ExtendTo(Clock::time_point until);
  void Run();

  EtcdClient* const etcd_;
  const int64_t id_;
  const absl::Duration ttl_;
  // Written by the renewing thread (and Stop), read by any.
  std::atomic<Clock::rep> valid_until_;  // Clock ticks since its epoch
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::once_flag joined_;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_LEASE_HOLDER_H_
