// UcxWorker's progress thread and the CPU it may share with other threads.
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/ucx_worker.h"

#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
