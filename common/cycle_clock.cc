#include "common/cycle_clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace hetps {
namespace {

#if defined(__x86_64__)
// CPUID 0x80000007, EDX bit 8: the counter ticks at a constant rate in every power state.
bool HasInvariantTsc() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
}
#endif

int64_t MonotonicRawNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_RAW, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

}  // namespace

bool CycleClock::UsesTsc() {
#if defined(__x86_64__)
  static const bool invariant = HasInvariantTsc();
  return invariant;
#else
  return false;
#endif
}

double CycleClock::NanosecondsPerTick() {
  static const double rate = [] {
    if (!UsesTsc()) return 1.0;
    constexpr int64_t kSpinNanos = 5'000'000;
    const int64_t start_nanos = MonotonicRawNanos();
    const int64_t start_ticks = Now();
    int64_t end_nanos = start_nanos;
    while (end_nanos - start_nanos < kSpinNanos) end_nanos = MonotonicRawNanos();
    const int64_t end_ticks = Now();
    return static_cast<double>(end_nanos - start_nanos) /
           static_cast<double>(end_ticks - start_ticks);
  }();
  return rate;
}

}  // namespace hetps
