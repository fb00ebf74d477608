// Now() and NowNanos(): the wall-clock time (CLOCK_REALTIME) read from the kernel, which every
// deadline, timer and timeout in hetps is computed and compared with: one clock on both sides
// of each comparison. absl::Now() stands for the same clock, but Debian's Abseil extrapolates
// it from the CPU's cycle counter (rdtsc) between kernel reads: slower on the project's VM
// (about 90 ns a call against 25 ns), and in one CI rehearsal it ran about 4 s ahead of the
// monotonic clock within a test, which ends every timer due within that much at once.
// The results compare with absl::Now()'s and with absl deadlines (same clock).
#ifndef HETPS_COMMON_CLOCK_H_
#define HETPS_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/time/time.h"

namespace hetps {

inline absl::Time Now() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return absl::TimeFromTimespec(now);
}

inline int64_t NowNanos() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

}  // namespace hetps

#endif  // HETPS_COMMON_CLOCK_H_
