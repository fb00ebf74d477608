// Now() and NowNanos(): the time every deadline, timer and timeout in hetps is computed and
// compared with. It is the monotonic clock (CLOCK_MONOTONIC) shifted by the wall clock's offset
// at the process's first read: it reads like the wall-clock time but never steps. A step of the
// wall clock (NTP stepping it, a VM resumed after a pause) would otherwise end every deadline
// in the process at once (forward) or stretch them by the step (back: a hang). Times that
// people read (log lines) come from WallNow().
//
// Abseil's timed waits (Mutex::AwaitWithDeadline/AwaitWithTimeout, CondVar, Notification)
// sleep until an absolute CLOCK_REALTIME time, so a step of the wall clock cuts them short or
// stretches them; hetps waits with AwaitUntil() (common/await.h) or on ToSteady() instead.
// absl::Now() is not the same clock either: Debian's Abseil extrapolates it from the CPU's
// cycle counter between kernel reads (in one CI rehearsal it ran 4 s ahead of the kernel).
#ifndef HETPS_COMMON_CLOCK_H_
#define HETPS_COMMON_CLOCK_H_

#include <time.h>

#include <chrono>
#include <cstdint>

#include "absl/time/time.h"

namespace hetps {
namespace clock_internal {

inline int64_t ReadNanos(clockid_t clock) {
  timespec now;
  clock_gettime(clock, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

// The wall clock minus the monotonic clock, as first read by this process.
inline int64_t MonotonicToUnixNanos() {
  static const int64_t offset = ReadNanos(CLOCK_REALTIME) - ReadNanos(CLOCK_MONOTONIC);
  return offset;
}

}  // namespace clock_internal

inline int64_t NowNanos() {
  return clock_internal::ReadNanos(CLOCK_MONOTONIC) + clock_internal::MonotonicToUnixNanos();
}

inline absl::Time Now() { return absl::FromUnixNanos(NowNanos()); }

// The wall-clock time, for people to read; never for deadlines.
inline absl::Time WallNow() {
  return absl::FromUnixNanos(clock_internal::ReadNanos(CLOCK_REALTIME));
}

// `t` (a time of Now()'s clock) on std::chrono::steady_clock, which is CLOCK_MONOTONIC: what
// standard waits take (std::condition_variable waits on it with pthread_cond_clockwait).
// InfiniteFuture() is time_point::max().
inline std::chrono::steady_clock::time_point ToSteady(absl::Time t) {
  using Steady = std::chrono::steady_clock;
  if (t == absl::InfiniteFuture()) return Steady::time_point::max();
  if (t == absl::InfinitePast()) return Steady::time_point::min();
  return Steady::time_point(
      std::chrono::nanoseconds(absl::ToUnixNanos(t) - clock_internal::MonotonicToUnixNanos()));
}

}  // namespace hetps

#endif  // HETPS_COMMON_CLOCK_H_
