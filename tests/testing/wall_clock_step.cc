#include "tests/testing/wall_clock_step.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <thread>

#include "absl/time/clock.h"

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

// Abseil's timed waits are futex waits until an absolute CLOCK_REALTIME time, which the kernel
// measures on its own clock. So that they see the stepped clock as they would a real step
// (including a step while they sleep), such a wait sleeps here in slices of at most 5 ms on
// the monotonic clock until the stepped clock reaches its deadline, or it is woken.
extern "C" long syscall(long number, ...) noexcept {
  va_list list;
  va_start(list, number);
  long args[6];
  for (long& arg : args) arg = va_arg(list, long);
  va_end(list);
  using Syscall = long (*)(long, ...);
  static const auto real = reinterpret_cast<Syscall>(dlsym(RTLD_NEXT, "syscall"));
  const int op = static_cast<int>(args[1]);
  if (number != SYS_futex || (op & FUTEX_CMD_MASK) != FUTEX_WAIT_BITSET ||
      (op & FUTEX_CLOCK_REALTIME) == 0 || args[3] == 0) {
    return real(number, args[0], args[1], args[2], args[3], args[4], args[5]);
  }
  const auto* until = reinterpret_cast<const timespec*>(args[3]);
  const int64_t deadline = int64_t{until->tv_sec} * 1000000000 + until->tv_nsec;
  while (true) {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t left = deadline - (int64_t{now.tv_sec} * 1000000000 + now.tv_nsec);
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    const int64_t slice = std::min<int64_t>(left, 5000000);
    timespec relative{0, static_cast<long>(slice)};
    // FUTEX_WAIT takes a relative time on the monotonic clock; Abseil's bitset matches any.
    const long result = real(SYS_futex, args[0], FUTEX_WAIT | (op & FUTEX_PRIVATE_FLAG), args[2],
                             &relative, 0L, 0L);
    if (result == 0 || errno != ETIMEDOUT) return result;
  }
}

namespace hetps::testing {

void SetWallClockStep(absl::Duration step) {
  wall_clock_step_ns.store(absl::ToInt64Nanoseconds(step));
}

bool StepWallClockAndAwaitAbseil(absl::Duration step) {
  using Steady = std::chrono::steady_clock;
  const absl::Duration before = absl::Now() - absl::FromUnixNanos(0);
  const int64_t change = absl::ToInt64Nanoseconds(step) - wall_clock_step_ns.load();
  SetWallClockStep(step);
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

}  // namespace hetps::testing
