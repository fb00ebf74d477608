// Steps this process's wall clock, for tests of what a step of the real one (NTP stepping it, a
// VM resumed after a pause) does. wall_clock_step.cc defines clock_gettime(), which every
// library in the process calls (Abseil's absl::Now(), gRPC, the C++ library), and adds an
// offset to CLOCK_REALTIME; and syscall(), through which Abseil's timed waits sleep until a
// CLOCK_REALTIME time, so that they wake when the stepped clock reaches it (as they would
// under a real step, even one made while they sleep). The kernel's other timers (glibc's own
// futex calls, timerfd, gRPC's) do not see the step. Link the .cc only into an executable of
// its own (clock_step_test), so that no other test runs under a stepped clock.
#ifndef HETPS_TESTS_TESTING_WALL_CLOCK_STEP_H_
#define HETPS_TESTS_TESTING_WALL_CLOCK_STEP_H_

#include "absl/time/time.h"

namespace hetps::testing {

// From now on CLOCK_REALTIME reads the real time plus `step`.
void SetWallClockStep(absl::Duration step);

// SetWallClockStep(step), then waits (bounded) until absl::Now() shows it (Abseil reads the
// kernel's time only now and then). False if it did not within 10 s.
bool StepWallClockAndAwaitAbseil(absl::Duration step);

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_WALL_CLOCK_STEP_H_
