// The call tracker's deadlines: one timer serves every outstanding call of a connection, so a
// call must expire at its own deadline whatever the calls before it did.
#include "transport/internal/call_tracker.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"

namespace hetps::transport::internal {
namespace {

// Records how and when one call ended.
struct Outcome {
  absl::Notification ended;
  absl::Status status;
  absl::Time when;

  ResponseCallback Callback() {
    return [this](absl::StatusOr<Response> result) {
      status = result.status();
      when = absl::Now();
      ended.Notify();
    };
  }
};

class CallTrackerTest : public ::testing::Test {
 protected:
  TimerQueue timers_;
  CallTracker tracker_{&timers_, "peer"};
};

TEST_F(CallTrackerTest, AShorterDeadlineStartedLaterExpiresFirst) {
  Outcome late, soon;
  const absl::Time start = absl::Now();
  const uint64_t late_id = tracker_.Start(start + absl::Seconds(30), late.Callback());
  tracker_.Start(start + absl::Milliseconds(50), soon.Callback());
  ASSERT_TRUE(soon.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(soon.status.code(), absl::StatusCode::kDeadlineExceeded) << soon.status;
  EXPECT_GE(soon.when, start + absl::Milliseconds(50));
  EXPECT_FALSE(late.ended.HasBeenNotified());
  EXPECT_TRUE(tracker_.Finish(late_id, Response()));
  EXPECT_OK(late.status);
}

// The timer set for a call that ended must still end the calls after it, at their deadlines.
TEST_F(CallTrackerTest, ACallExpiresAtItsDeadlineAfterTheCallsBeforeItEnded) {
  Outcome first, second;
  const absl::Time start = absl::Now();
  const uint64_t first_id = tracker_.Start(start + absl::Milliseconds(50), first.Callback());
  tracker_.Start(start + absl::Milliseconds(150), second.Callback());
  EXPECT_TRUE(tracker_.Finish(first_id, Response()));
  ASSERT_TRUE(second.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kDeadlineExceeded) << second.status;
  EXPECT_GE(second.when, start + absl::Milliseconds(150));
  EXPECT_EQ(tracker_.outstanding(), 0u);
}

TEST_F(CallTrackerTest, CallsThatEndInTimeNeverExpireAndLaterOnesStillDo) {
  constexpr int kCalls = 1000;
  std::atomic<int> expired{0};
  std::vector<uint64_t> ids;
  for (int i = 0; i < kCalls; ++i) {
    ids.push_back(tracker_.Start(
        absl::Now() + absl::Milliseconds(30), [&expired](absl::StatusOr<Response> result) {
          if (result.status().code() == absl::StatusCode::kDeadlineExceeded) {
            ++expired;
          }
        }));
  }
  for (uint64_t id : ids) EXPECT_TRUE(tracker_.Finish(id, Response()));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(expired.load(), 0);
  Outcome later;
  tracker_.Start(absl::Now() + absl::Milliseconds(20), later.Callback());
  ASSERT_TRUE(later.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(later.status.code(), absl::StatusCode::kDeadlineExceeded);
}

// Calls to a peer that vanished, due microseconds apart: each expires, none before its deadline.
TEST_F(CallTrackerTest, ManyCallsDueMicrosecondsApartAllExpireAtOrAfterTheirDeadlines) {
  constexpr int kCalls = 2000;
  std::atomic<int> expired{0}, early{0};
  absl::Notification all;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kCalls; ++i) {
    const absl::Time deadline = start + absl::Milliseconds(20) + i * absl::Microseconds(10);
    tracker_.Start(deadline, [&, deadline](absl::StatusOr<Response> result) {
      if (absl::Now() < deadline) ++early;
      if (result.status().code() == absl::StatusCode::kDeadlineExceeded && ++expired == kCalls) {
        all.Notify();
      }
    });
  }
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(tracker_.outstanding(), 0u);
}

TEST_F(CallTrackerTest, CallsWithoutADeadlineWaitForTheirAnswer) {
  Outcome never, expiring;
  const uint64_t id = tracker_.Start(absl::InfiniteFuture(), never.Callback());
  tracker_.Start(absl::Now() + absl::Milliseconds(20), expiring.Callback());
  ASSERT_TRUE(expiring.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(never.ended.HasBeenNotified());
  EXPECT_TRUE(tracker_.Finish(id, Response()));
}

// The transport hears of expiries (to check on the peer), after the calls have ended; calls
// that end otherwise do not count.
TEST_F(CallTrackerTest, OnExpiryRunsAfterCallsEndAtTheirDeadlineOnly) {
  std::atomic<int> expiries{0};
  std::atomic<bool> call_ended_first{false};
  Outcome answered, expiring;
  tracker_.OnExpiry([&] {
    call_ended_first = expiring.ended.HasBeenNotified();
    ++expiries;
  });
  const uint64_t id = tracker_.Start(absl::Now() + absl::Milliseconds(5), answered.Callback());
  EXPECT_TRUE(tracker_.Finish(id, Response()));
  absl::SleepFor(absl::Milliseconds(30));  // past the answered call's deadline
  EXPECT_EQ(expiries.load(), 0);

  tracker_.Start(absl::Now() + absl::Milliseconds(5), expiring.Callback());
  ASSERT_TRUE(expiring.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (expiries.load() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(expiries.load(), 1);
  EXPECT_TRUE(call_ended_first.load());
  EXPECT_EQ(expiring.status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CallTrackerTest, DestroyingTheTrackerCancelsWhatIsOutstanding) {
  Outcome pending;
  auto tracker = std::make_unique<CallTracker>(&timers_, "peer");
  tracker->Start(absl::Now() + absl::Seconds(30), pending.Callback());
  tracker.reset();
  ASSERT_TRUE(pending.ended.HasBeenNotified());
  EXPECT_EQ(pending.status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace hetps::transport::internal
