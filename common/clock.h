// Now() and NowNanos(): the wall-clock time, as absl::Now() gives it, for the per-message paths.
// Debian's Abseil reads the time through its own calibrated path, about 90 ns a call on the
// project's VM; clock_gettime() goes straight to the vDSO, about 25 ns. Same clock
// (CLOCK_REALTIME), so the results compare with absl::Now()'s and with absl deadlines.
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
