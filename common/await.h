// AwaitUntil(): Mutex::AwaitWithDeadline on the monotonic clock.
//
//   absl::MutexLock lock(&mu);
//   if (!AwaitUntil(mu, absl::Condition(&done), hetps::Now() + timeout)) { ... timed out ... }
//
// Abseil's timed waits sleep until an absolute CLOCK_REALTIME time: a step of the wall clock
// back stretches them by the step (a lease not renewed for an hour), a step forward ends them
// early. AwaitUntil waits without a timeout and has a timer thread that sleeps on the monotonic
// clock release `mu` at the deadline (Abseil evaluates waiters' conditions whenever `mu` is
// released; if someone else holds it then, their release does), so only Now()
// (common/clock.h) decides when the deadline has passed.
#ifndef HETPS_COMMON_AWAIT_H_
#define HETPS_COMMON_AWAIT_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace hetps {

// Like mu.AwaitWithDeadline(condition, deadline): `mu` is held on entry and on return; returns
// whether `condition` holds (false: the deadline passed first). `deadline` is a time of Now().
bool AwaitUntil(absl::Mutex& mu, const absl::Condition& condition, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// AwaitUntil(mu, condition, Now() + timeout).
bool AwaitFor(absl::Mutex& mu, const absl::Condition& condition, absl::Duration timeout)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// absl::Notification with its timed wait on Now()'s clock (AwaitFor).
class TimedNotification {
 public:
  void Notify() {
    absl::MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() {
    absl::MutexLock lock(&mu_);
    return notified_;
  }
  // Whether it was notified within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return AwaitFor(mu_, absl::Condition(&notified_), timeout);
  }

 private:
  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace hetps

#endif  // HETPS_COMMON_AWAIT_H_
