// SpinPacer and DriveWindow: how long a polling thread spins before it gives up its CPU.
#ifdef HETPS_HAVE_UCX
#include "transport/ucx/spin_pacer.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/one_cpu.h"

namespace hetps::transport::ucx_internal {
namespace {

constexpr int64_t kMax = 50000;

// Until `stop`: works a while, as a thread that answers would, then yields (counting its turns
// in `turns` where given).
void WorkBetweenYields(const std::atomic<bool>& stop, std::atomic<int>* turns = nullptr) {
  while (!stop.load()) {
    if (turns != nullptr) turns->fetch_add(1);
    const int64_t until = NowNanos() + 4 * SpinPacer::kAnotherWorkedNs;
    while (NowNanos() < until) {
    }
    sched_yield();
  }
}

TEST(SpinPacerTest, DropsToItsMinimumOnceAYieldLetAnotherThreadRun) {
  SpinPacer pacer(kMax);
  EXPECT_EQ(pacer.spin_ns(), kMax);
  pacer.OnYield(false);
  pacer.OnEvent();
  EXPECT_EQ(pacer.spin_ns(), kMax);
  pacer.OnYield(true);
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
  // The event came after a yield that let another thread run: that thread may have sent it.
  pacer.OnEvent();
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
}

TEST(SpinPacerTest, DoublesBackWithEachEventThatCameWhileItsYieldsFoundTheCpuFree) {
  SpinPacer pacer(kMax);
  pacer.OnYield(true);
  pacer.OnEvent();
  int64_t expected = SpinPacer::kMinSpinNs;
  while (expected < kMax) {
    pacer.OnYield(false);
    pacer.OnYield(false);
    pacer.OnEvent();
    expected = std::min(expected * 2, kMax);
    EXPECT_EQ(pacer.spin_ns(), expected);
  }
  // A free yield and one that let another thread run since the last event: no doubling.
  pacer.OnYield(true);
  pacer.OnEvent();
  pacer.OnYield(false);
  pacer.OnYield(true);
  pacer.OnEvent();
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
}

TEST(SpinPacerTest, AnEventWithoutYieldsOrAfterASleepChangesNothing) {
  SpinPacer pacer(kMax);
  pacer.OnYield(true);
  pacer.OnEvent();
  pacer.OnEvent();  // caught while spinning
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
  pacer.OnYield(false);
  pacer.Restart();  // slept: the event that wakes it says nothing about the yields before
  pacer.OnEvent();
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
}

TEST(SpinPacerTest, TheMinimumIsNeverAboveTheMaximum) {
  SpinPacer pacer(SpinPacer::kMinSpinNs / 2);
  pacer.OnYield(true);
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs / 2);
}

// Yield() itself: under SCHED_FIFO on one CPU a yield runs the other runnable thread of the
// same priority, and no other (normal threads wait for both), so whether one ran is decided.
TEST(SpinPacerTest, YieldFindsWhetherAnotherThreadWorked) {
  testing::OneCpuFifo one_cpu;
  if (!one_cpu.active()) GTEST_SKIP() << one_cpu.reason();
  SpinPacer pacer(kMax);
  for (int i = 0; i < 5; ++i) pacer.Yield();  // alone on the CPU
  pacer.OnEvent();
  EXPECT_EQ(pacer.spin_ns(), kMax);

  std::atomic<bool> stop{false};
  std::atomic<int> turns{0};
  std::thread other([&] { WorkBetweenYields(stop, &turns); });
  // The new thread waits for this one's CPU (same priority); the yield lets it run.
  pacer.Yield();
  EXPECT_GT(turns.load(), 0);
  EXPECT_EQ(pacer.spin_ns(), SpinPacer::kMinSpinNs);
  stop.store(true);
  other.join();
}

TEST(SpinPacerTest, MovesOnceItsYieldsHandedTheCpuOverManyTimesInARow) {
  SpinPacer pacer(kMax);
  for (uint32_t i = 1; i < SpinPacer::kHandOversBeforeMoving; ++i) {
    pacer.OnYield(true);
    pacer.OnEvent();  // the thread it handed the CPU to answered: still in a row
    EXPECT_FALSE(pacer.move_due()) << i;
  }
  pacer.OnYield(false);  // a yield that found the CPU free: the row starts again
  for (uint32_t i = 1; i < SpinPacer::kHandOversBeforeMoving; ++i) pacer.OnYield(true);
  EXPECT_FALSE(pacer.move_due());
  pacer.OnYield(true);
  EXPECT_TRUE(pacer.move_due());
  pacer.OnMoved(0);
  EXPECT_FALSE(pacer.move_due());
}

TEST(SpinPacerTest, EachMoveWithinASecondOfTheLastWaitsForTwiceTheHandOvers) {
  SpinPacer pacer(kMax);
  const int64_t ms = 1'000'000;
  int64_t now = 0;
  pacer.OnMoved(now);
  EXPECT_EQ(pacer.hand_overs_before_moving(), SpinPacer::kHandOversBeforeMoving);
  uint32_t expected = SpinPacer::kHandOversBeforeMoving;
  while (expected < SpinPacer::kMostHandOversBeforeMoving) {
    for (uint32_t i = 0; i < pacer.hand_overs_before_moving(); ++i) pacer.OnYield(true);
    ASSERT_TRUE(pacer.move_due());
    now += ms;
    pacer.OnMoved(now);
    expected *= 2;
    EXPECT_EQ(pacer.hand_overs_before_moving(), expected);
  }
  pacer.OnMoved(now += ms);
  EXPECT_EQ(pacer.hand_overs_before_moving(), SpinPacer::kMostHandOversBeforeMoving);
  // A second after the last move it is forgotten.
  pacer.OnMoved(now + SpinPacer::kMovesRememberedNs);
  EXPECT_EQ(pacer.hand_overs_before_moving(), SpinPacer::kHandOversBeforeMoving);
}

// Yield() itself, with the kernel's scheduling: a thread that may run on two CPUs shares one
// with a thread that works between its yields (kept to that CPU), as a worker and a shard do
// once the kernel put them together. The kernel's balancer leaves two such threads together
// for milliseconds; the pacer moves off within its row of hand-overs.
TEST(SpinPacerTest, AThreadWhoseYieldsKeepHandingItsCpuOverMovesToAnother) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "this process may run on one CPU only";
  int shared_cpu = 0;
  while (!CPU_ISSET(shared_cpu, &allowed)) ++shared_cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(shared_cpu, &one);

  std::atomic<bool> stop{false};
  std::thread other([&] {
    sched_setaffinity(0, sizeof(one), &one);
    WorkBetweenYields(stop);
  });
  int yields = 0;
  int cpu = shared_cpu;
  std::thread yielder([&] {
    // On the other thread's CPU, then free to run anywhere: the kernel leaves it there.
    sched_setaffinity(0, sizeof(one), &one);
    sched_setaffinity(0, sizeof(allowed), &allowed);
    SpinPacer pacer(kMax);
    const int most = static_cast<int>(SpinPacer::kHandOversBeforeMoving) + 8;
    for (cpu = sched_getcpu(); cpu == shared_cpu && yields < most; cpu = sched_getcpu()) {
      pacer.Yield();
      ++yields;
    }
  });
  yielder.join();
  stop.store(true);
  other.join();
  EXPECT_NE(cpu, shared_cpu) << "still on CPU " << shared_cpu << " after " << yields << " yields";
}

TEST(DriveWindowTest, ShortAfterAFullWindowWentByWithNothingInItsSecondHalf) {
  DriveWindow window;
  EXPECT_EQ(window.Begin(kMax), kMax);
  window.End(/*done=*/false, /*idle_ns=*/kMax / 2);
  EXPECT_TRUE(window.shortened());
  // Short, except every kProbeEvery-th wait, which tries the full window again.
  for (uint32_t wait = 1; wait < DriveWindow::kProbeEvery; ++wait) {
    EXPECT_EQ(window.Begin(kMax), SpinPacer::kMinSpinNs) << wait;
    window.End(/*done=*/true, 0);  // a short window says nothing
    EXPECT_TRUE(window.shortened());
  }
  EXPECT_EQ(window.Begin(kMax), kMax);
  window.End(/*done=*/false, kMax);  // the probe went by too
  EXPECT_TRUE(window.shortened());
  for (uint32_t wait = 1; wait < DriveWindow::kProbeEvery; ++wait) {
    EXPECT_EQ(window.Begin(kMax), SpinPacer::kMinSpinNs) << wait;
    window.End(/*done=*/false, kMax);
  }
  EXPECT_EQ(window.Begin(kMax), kMax);
  window.End(/*done=*/true, 0);  // the answer came within the probe: full windows again
  EXPECT_FALSE(window.shortened());
  EXPECT_EQ(window.Begin(kMax), kMax);
}

TEST(DriveWindowTest, AWindowThatEndsWhileThingsStillHappenStaysFull) {
  DriveWindow window;
  window.Begin(kMax);
  window.End(/*done=*/false, /*idle_ns=*/kMax / 2 - 1);  // a long transfer under way
  EXPECT_FALSE(window.shortened());
  EXPECT_EQ(window.Begin(kMax), kMax);
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
#endif  // HETPS_HAVE_UCX
