// CycleClock: a cheap timer for latencies measured on every request (the metrics' histograms):
// the CPU's time-stamp counter, about 10 ns a read on the project's VM against 25 ns for
// clock_gettime, with its rate measured once against CLOCK_MONOTONIC_RAW (a 5 ms spin, on the
// first call of Calibrate or TicksToDuration). Only for intervals within one process. Where the
// counter does not tick at a constant rate (no invariant TSC, or not x86-64) it reads
// CLOCK_MONOTONIC in nanoseconds instead.
//
//   const int64_t start = CycleClock::Now();
//   ...
//   histogram.Observe(CycleClock::TicksToDuration(CycleClock::Now() - start));
//
// Thread-safe.
#ifndef HETPS_COMMON_CYCLE_CLOCK_H_
#define HETPS_COMMON_CYCLE_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/time/time.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace hetps {

class CycleClock {
 public:
  static int64_t Now() {
#if defined(__x86_64__)
    if (UsesTsc()) return static_cast<int64_t>(__rdtsc());
#endif
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
  }

  static absl::Duration TicksToDuration(int64_t ticks) {
    return absl::Nanoseconds(static_cast<double>(ticks) * NanosecondsPerTick());
  }

  // Measures the rate now (off the hot path), if it was not yet.
  static void Calibrate() { NanosecondsPerTick(); }
  static double NanosecondsPerTick();

 private:
  static bool UsesTsc();
};

}  // namespace hetps

#endif  // HETPS_COMMON_CYCLE_CLOCK_H_
