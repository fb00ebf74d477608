#include "common/await.h"

#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace hetps {
namespace {

using Steady = std::chrono::steady_clock;

absl::Duration Since(Steady::time_point start) { return absl::FromChrono(Steady::now() - start); }

TEST(AwaitTest, EndsAtTheDeadlineWhenTheConditionNeverHolds) {
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  const Steady::time_point start = Steady::now();
  EXPECT_FALSE(AwaitFor(mu, absl::Condition(&never), absl::Milliseconds(200)));
  EXPECT_GE(Since(start), absl::Milliseconds(190));
  EXPECT_LT(Since(start), absl::Seconds(5));
}

// (A condition that comes to hold ends the wait:
// ClockStepTest.AwaitUntilReturnsWhenItsConditionHolds.)
TEST(AwaitTest, APastDeadlineReturnsTheConditionAtOnce) {
  absl::Mutex mu;
  bool ready = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(AwaitUntil(mu, absl::Condition(&ready), Now() - absl::Seconds(1)));
  ready = false;
  EXPECT_FALSE(AwaitUntil(mu, absl::Condition(&ready), Now() - absl::Seconds(1)));
}

// One wait's mutex held by someone else at its deadline holds up neither that wait beyond the
// holder's release nor other waits' deadlines (one timer thread serves them all).
TEST(AwaitTest, AMutexHeldAtTheDeadlineHoldsUpNoOtherWait) {
  absl::Mutex held_mu, free_mu;
  bool waiting = false;  // guarded by held_mu
  bool never = false;
  absl::Duration first_waited, second_waited;
  std::thread first([&] {
    absl::MutexLock lock(&held_mu);
    waiting = true;
    const Steady::time_point start = Steady::now();
    EXPECT_FALSE(AwaitFor(held_mu, absl::Condition(&never), absl::Milliseconds(100)));
    first_waited = Since(start);
  });
  held_mu.LockWhen(absl::Condition(&waiting));  // `first` is in its wait
  absl::Notification second_done;
  std::thread second([&] {
    absl::MutexLock lock(&free_mu);
    const Steady::time_point start = Steady::now();
    EXPECT_FALSE(AwaitFor(free_mu, absl::Condition(&never), absl::Milliseconds(300)));
    second_waited = Since(start);
    second_done.Notify();
  });
  // Holding the first wait's mutex well past its deadline, and past the second's.
  const bool second_in_time = second_done.WaitForNotificationWithTimeout(absl::Seconds(5));
  held_mu.Unlock();
  second.join();
  first.join();
  ASSERT_TRUE(second_in_time) << "a wait was held up by another wait's mutex";
  EXPECT_GE(second_waited, absl::Milliseconds(290));
  EXPECT_GE(first_waited, absl::Milliseconds(100));
  EXPECT_LT(first_waited, absl::Seconds(5));
}

}  // namespace
}  // namespace hetps
