// UcxWorker's progress thread and the CPU it may share with other threads.
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/ucx_worker.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/one_cpu.h"
#include "tests/testing/status_assertions.h"
#include "transport/ucx/ucx_transport.h"

namespace hetps::transport::ucx_internal {
namespace {

// A server's progress thread (one that no caller drives) polls on after its last event before
// it sleeps; on a CPU that a thread waiting for it shares (a worker, another shard, where a
// machine has fewer CPUs than busy threads), it must let that thread run after
// UcxOptions::poll_alone, not at its window's end. Under SCHED_FIFO on one CPU this thread,
// woken by the task it posted, runs only once the progress thread yields or sleeps.
TEST(UcxWorkerTest, AnUndrivenProgressThreadLetsAThreadOnItsCpuRunBeforeItsPollingWindowEnds) {
  hetps::testing::OneCpuFifo one_cpu;
  if (!one_cpu.active()) GTEST_SKIP() << one_cpu.reason();
  UcxOptions options;
  options.poll_before_sleep = absl::Seconds(5);  // a server's window (1 ms), stretched
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(options, "test-ucx");
  ASSERT_OK(worker.status());
  absl::Notification ran;
  const absl::Time posted = absl::Now();
  (*worker)->Post([&ran] { ran.Notify(); });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_LT(absl::Now() - posted, absl::Seconds(1));
}

// The id of this process's thread named `name` (15 characters at most), or 0.
int ThreadNamed(const std::string& name) {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return 0;
  int found = 0;
  while (dirent* entry = readdir(tasks)) {
    std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string text;
    if (std::getline(comm, text) && text == name) found = std::atoi(entry->d_name);
  }
  closedir(tasks);
  return found;
}

// The scheduler's state of thread `tid` of this process: 'R' running or runnable (a thread
// that polls, even one that yields at once), 'S' asleep; '?' if unknown.
char ThreadState(int tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');  // the name may hold spaces and parentheses
  return name_end == std::string::npos || name_end + 2 >= text.size() ? '?' : text[name_end + 2];
}

// A client's worker whose progress thread is awake (it polls for 30 s after its last event,
// so it stands by only while callers drive) and naps for 30 s when it stands by.
struct StandByWorker {
  explicit StandByWorker(const std::string& name) {
    UcxOptions options;
    options.poll_before_sleep = absl::Seconds(30);
    options.standby_nap = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<UcxWorker>> created = UcxWorker::Create(options, name);
    EXPECT_OK(created.status());
    if (!created.ok()) return;
    worker = *std::move(created);
    absl::Notification ran;
    worker->Post([&ran] { ran.Notify(); });
    EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
    progress_thread = ThreadNamed(name);
    EXPECT_NE(progress_thread, 0);
  }
  // Whether the progress thread is asleep, seen so in 5 samples in a row, within 10 s.
  bool FallsAsleep() const {
    int asleep = 0;
    return hetps::testing::AwaitCondition(
        [&] {
          asleep = ThreadState(progress_thread) == 'S' ? asleep + 1 : 0;
          return asleep >= 5;
        },
        absl::Seconds(10));
  }
  // Whether the progress thread is seen awake (it then polls its 30 s window) within 10 s.
  bool WakesUp() const {
    return hetps::testing::AwaitCondition([&] { return ThreadState(progress_thread) == 'R'; },
                                          absl::Seconds(10));
  }

  std::unique_ptr<UcxWorker> worker;
  int progress_thread = 0;
};

// While a caller drives a client's worker, its progress thread sleeps instead of polling: a
// thread that polls, yielding or not, is busy to the scheduler, which then put the caller and
// the shard it waits for on one CPU of two in a third of unpinned runs.
TEST(UcxWorkerTest, TheProgressThreadSleepsWhileACallerDrivesTheWorker) {
  StandByWorker standby("test-standby");
  ASSERT_NE(standby.progress_thread, 0);
  UcxWorker& worker = *standby.worker;
  worker.BeginDriving();
  bool progressed = false;
  ASSERT_TRUE(worker.DriveOnce(&progressed));
  EXPECT_TRUE(standby.FallsAsleep());
  int asleep = 0;
  constexpr int kSamples = 200;
  for (int sample = 0; sample < kSamples; ++sample) {
    worker.DriveOnce(&progressed);
    if (ThreadState(standby.progress_thread) == 'S') ++asleep;
    absl::SleepFor(absl::Microseconds(500));  // spacing the samples, not waiting for anything
  }
  EXPECT_GE(asleep, kSamples * 9 / 10);
  worker.EndDriving();
}

// A caller that leaves with its calls done does not wake the thread standing by (a system call
// for every call); one that gives up waiting does: it now waits for that thread.
TEST(UcxWorkerTest, TheProgressThreadTakesOverOnlyFromACallerThatGaveUpWaiting) {
  StandByWorker standby("test-takeover");
  ASSERT_NE(standby.progress_thread, 0);
  UcxWorker& worker = *standby.worker;
  worker.BeginDriving();
  ASSERT_TRUE(standby.FallsAsleep());
  worker.EndDriving(/*gave_up=*/false);
  int awake = 0;
  for (int sample = 0; sample < 100; ++sample) {
    if (ThreadState(standby.progress_thread) != 'S') ++awake;
    absl::SleepFor(absl::Milliseconds(1));  // spacing the samples, not waiting for anything
  }
  EXPECT_EQ(awake, 0);
  worker.BeginDriving();
  ASSERT_TRUE(standby.FallsAsleep());
  worker.EndDriving(/*gave_up=*/true);
  EXPECT_TRUE(standby.WakesUp());
}

// Where another caller still drives when one gives up, that one drives on for both; the thread
// standing by takes over when the last caller leaves, even with its own calls done.
TEST(UcxWorkerTest, TheProgressThreadTakesOverWhenTheLastCallerLeavesAfterOneGaveUp) {
  StandByWorker standby("test-lastleaves");
  ASSERT_NE(standby.progress_thread, 0);
  UcxWorker& worker = *standby.worker;
  worker.BeginDriving();
  worker.BeginDriving();
  ASSERT_TRUE(standby.FallsAsleep());
  worker.EndDriving(/*gave_up=*/true);
  worker.EndDriving(/*gave_up=*/false);
  EXPECT_TRUE(standby.WakesUp());
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
