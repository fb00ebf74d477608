// A lease holder measures its lease on the monotonic clock, as etcd does, so a step of the wall
// clock (NTP stepping it, a VM resumed after a pause) neither ends a good lease (every shard of
// the machine would stop acknowledging at once) nor stretches one that etcd has ended (a step
// back would let a shard acknowledge after another took its partitions over).
//
// This binary steps its own wall clock: it defines clock_gettime(), which every library in the
// process (Abseil's absl::Now(), gRPC, the C++ library) calls, and adds an offset to
// CLOCK_REALTIME. It has its own executable so that no other test runs under a stepped clock.
#include <dlfcn.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "server/lease_holder.h"
#include "tests/testing/etcd_process.h"

namespace {

std::atomic<int64_t> wall_clock_step_ns{0};

}  // namespace

extern "C" int clock_gettime(clockid_t clock, timespec* time) noexcept {
  using ClockGettime = int (*)(clockid_t, timespec*);
  static const auto real = reinterpret_cast<ClockGettime>(dlsym(RTLD_NEXT, "clock_gettime"));
  const int result = real(clock, time);
  if (result != 0 || (clock != CLOCK_REALTIME && clock != CLOCK_REALTIME_COARSE)) return result;
  int64_t nanos = int64_t{time->tv_sec} * 1000000000 + time->tv_nsec + wall_clock_step_ns.load();
  time->tv_sec = nanos / 1000000000;
  time->tv_nsec = nanos % 1000000000;
  return result;
}

namespace hetps::server {
namespace {

using Steady = std::chrono::steady_clock;

// Steps the wall clock to the real time plus `step`, and waits (bounded) until absl::Now()
// shows it (Abseil reads the kernel's time only now and then).
bool StepWallClock(absl::Duration step) {
  const absl::Duration before = absl::Now() - absl::FromUnixNanos(0);
  const int64_t change = absl::ToInt64Nanoseconds(step) - wall_clock_step_ns.load();
  wall_clock_step_ns.store(absl::ToInt64Nanoseconds(step));
  const Steady::time_point deadline = Steady::now() + std::chrono::seconds(10);
  while (Steady::now() < deadline) {
    const absl::Duration moved = absl::Now() - absl::FromUnixNanos(0) - before;
    if (change > 0 ? moved > absl::Nanoseconds(change) / 2
                   : moved < absl::Nanoseconds(change) / 2) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class LeaseClockTest : public testing::EtcdTest {
 protected:
  LeaseClockTest() : EtcdTest(/*call_timeout=*/absl::Seconds(1)) {}
  void TearDown() override { wall_clock_step_ns.store(0); }
};

TEST_F(LeaseClockTest, AStepOfTheWallClockNeitherEndsALeaseNorStretchesIt) {
  absl::StatusOr<std::unique_ptr<LeaseHolder>> holder =
      LeaseHolder::Start(client_.get(), absl::Seconds(1));
  ASSERT_TRUE(holder.ok()) << holder.status();

  // An hour forward: the lease is renewed as before, and held all along.
  ASSERT_TRUE(StepWallClock(absl::Hours(1))) << "absl::Now() did not follow the stepped clock";
  for (const Steady::time_point end = Steady::now() + std::chrono::seconds(3);
       Steady::now() < end;) {
    ASSERT_TRUE((*holder)->held()) << "a step of the wall clock ended a lease that etcd keeps";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // An hour back, then etcd stops answering: within a time to live the holder no longer
  // claims the lease, as if the clock had never moved.
  ASSERT_TRUE(StepWallClock(-absl::Hours(1))) << "absl::Now() did not follow the stepped clock";
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
