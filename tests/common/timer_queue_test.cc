#include "common/timer_queue.h"

#include <atomic>
#include <thread>
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

TEST(TimerQueueTest, PostedTasksRunInOrderAndNoneIsLostAtDestruction) {
  std::vector<int> ran;
  absl::Mutex mu;
  {
    TimerQueue timers;
    absl::Notification first_started;
    timers.Post([&] {
      first_started.Notify();
      absl::SleepFor(absl::Milliseconds(100));  // the destructor comes meanwhile
      absl::MutexLock lock(&mu);
      ran.push_back(0);
    });
    first_started.WaitForNotification();
    for (int i = 1; i <= 3; ++i) {
      timers.Post([&, i] {
        absl::MutexLock lock(&mu);
        ran.push_back(i);
      });
    }
  }
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
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

// RunHereOrPost runs a task on the caller's thread only when nothing else is queued or
// running; from several threads at once, tasks never overlap and each thread's keep their order.
TEST(TaskThreadTest, RunHereOrPostRunsOnTheCallerWhenIdleAndNeverOverlaps) {
  TaskThread thread("test");
  std::thread::id ran_on;
  ASSERT_TRUE(thread.RunHereOrPost([&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // idle: ran right here

  // While a posted task holds the thread, the next one is queued behind it.
  absl::Notification release;
  std::atomic<bool> second_ran{false};
  ASSERT_TRUE(thread.Post([&] { release.WaitForNotification(); }));
  ASSERT_TRUE(thread.RunHereOrPost([&] { second_ran = true; }));
  EXPECT_FALSE(second_ran.load());  // not run here: it waits its turn
  release.Notify();

  constexpr int kThreads = 4, kTasks = 2000;
  std::atomic<int> running{0}, overlaps{0};
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        thread.RunHereOrPost([&, t, i] {
          if (running.fetch_add(1) != 0) ++overlaps;
          seen[t].push_back(i);
          running.fetch_sub(1);
        });
      }
    });
  }
  for (auto& caller : callers) caller.join();
  thread.Stop();
  EXPECT_TRUE(second_ran.load());
  EXPECT_EQ(overlaps.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kTasks));
    for (int i = 0; i < kTasks; ++i) ASSERT_EQ(seen[t][i], i);
  }
  EXPECT_FALSE(thread.RunHereOrPost([] {}));
}

}  // namespace
}  // namespace hetps
