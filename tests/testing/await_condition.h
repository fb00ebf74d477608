// AwaitCondition(): a bounded poll, for what other threads or processes leave in files, etcd or
// a shard's stats, which give no other signal. Waits on events (absl::Notification, a Mutex
// condition) where there are any.
#ifndef HETPS_TESTS_TESTING_AWAIT_CONDITION_H_
#define HETPS_TESTS_TESTING_AWAIT_CONDITION_H_

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hetps::testing {

// Asks `done()` every `period` until it holds (true) or `timeout` has passed (false).
inline bool AwaitCondition(absl::FunctionRef<bool()> done, absl::Duration timeout,
                           absl::Duration period = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(period);
  }
  return true;
}

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_AWAIT_CONDITION_H_
