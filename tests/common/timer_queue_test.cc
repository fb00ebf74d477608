#include "common/timer_queue.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/task_thread.h"
#include "gtest/gtest.h"

namespace hetps {
namespace {

TEST(TimerQueueTest, RunsTimersInDeadlineOrder) {
  TimerQueue timers;
  std::vector<int> order;
  absl::Mutex mu;
  absl::Notification done;
  const absl::Time now = absl::Now();
  timers.Schedule(now + absl::Milliseconds(60), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(3);
    done.Notify();
  });
  timers.Schedule(now + absl::Milliseconds(20), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(1);
  });
  timers.Schedule(now + absl::Milliseconds(40), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimerQueueTest, EarlierTimerWakesTheThread) {
  TimerQueue timers;
  timers.Schedule(absl::Now() + absl::Hours(1), [] {});
  absl::Notification fired;
  const absl::Time start = absl::Now();
  timers.Schedule(absl::Now() + absl::Milliseconds(10), [&] { fired.Notify(); });
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(TimerQueueTest, CancelledTimerDoesNotRun) {
  TimerQueue timers;
  std::atomic<bool> ran{false};
  TimerQueue::TimerId id =
      timers.Schedule(absl::Now() + absl::Milliseconds(50), [&] { ran = true; });
  EXPECT_TRUE(timers.Cancel(id));
  EXPECT_FALSE(timers.Cancel(id));
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_FALSE(ran);
}

TEST(TimerQueueTest, DestructionDropsPendingTimers) {
  std::atomic<bool> ran{false};
  {
    TimerQueue timers;
    timers.Schedule(absl::Now() + absl::Hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

TEST(TaskThreadTest, RunsTasksInOrderAndDrainsOnStop) {
  std::vector<int> order;
  {
    TaskThread thread("test");
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(thread.Post([&order, i] { order.push_back(i); }));
    }
    thread.Stop();
    EXPECT_FALSE(thread.Post([] {}));
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace hetps
