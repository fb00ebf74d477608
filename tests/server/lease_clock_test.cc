// A lease holder measures its lease on the monotonic clock, as etcd does, so a step of the wall
// clock (NTP stepping it, a VM resumed after a pause) neither ends a good lease (every shard of
// the machine would stop acknowledging at once) nor stretches one that etcd has ended (a step
// back would let a shard acknowledge after another took its partitions over).
//
// The wall clock is stepped as tests/testing/wall_clock_step.h describes.
#include <signal.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "server/lease_holder.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/wall_clock_step.h"

namespace hetps::server {
namespace {

using Steady = std::chrono::steady_clock;

class LeaseClockTest : public testing::EtcdTest {
 protected:
  LeaseClockTest() : EtcdTest(/*call_timeout=*/absl::Seconds(1)) {}
  void TearDown() override { testing::SetWallClockStep(absl::ZeroDuration()); }
};

TEST_F(LeaseClockTest, AStepOfTheWallClockNeitherEndsALeaseNorStretchesIt) {
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder =
      LeaseHolder::Start(client_.get(), absl::Seconds(1));
  ASSERT_TRUE(holder.ok()) << holder.status();

  // An hour forward: the lease is renewed as before, and held all along.
  ASSERT_TRUE(testing::StepWallClockAndAwaitAbseil(absl::Hours(1)))
      << "absl::Now() did not follow the stepped clock";
  for (const Steady::time_point end = Steady::now() + std::chrono::seconds(3);
       Steady::now() < end;) {
    ASSERT_TRUE((*holder)->held()) << "a step of the wall clock ended a lease that etcd keeps";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // An hour back, then etcd stops answering: within a time to live the holder no longer
  // claims the lease, as if the clock had never moved.
  ASSERT_TRUE(testing::StepWallClockAndAwaitAbseil(-absl::Hours(1)))
      << "absl::Now() did not follow the stepped clock";
  ASSERT_TRUE((*holder)->held());
  ASSERT_TRUE(etcd_->process().Stop());
  const Steady::time_point stopped = Steady::now();
  while ((*holder)->held() && Steady::now() < stopped + std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE((*holder)->held()) << "a step back of the wall clock stretched the lease";
  EXPECT_LE(Steady::now() - stopped, std::chrono::milliseconds(1500));
  etcd_->process().Signal(SIGCONT);
  (*holder)->Stop(/*revoke=*/false);
}

}  // namespace
}  // namespace hetps::server
