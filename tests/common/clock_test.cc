#include "common/clock.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace hetps {
namespace {

// The fast clock is absl::Now()'s clock: deadlines made with one are checked with the other.
TEST(ClockTest, NowAgreesWithAbslNow) {
  for (int i = 0; i < 100; ++i) {
    const absl::Time before = absl::Now();
    const absl::Time now = Now();
    const int64_t nanos = NowNanos();
    const absl::Time after = absl::Now();
    // absl::Now() interpolates between kernel readings: allow it a little slack.
    EXPECT_GE(now, before - absl::Milliseconds(1));
    EXPECT_LE(now, after + absl::Milliseconds(1));
    EXPECT_NEAR(static_cast<double>(nanos), static_cast<double>(absl::ToUnixNanos(now)), 1e6);
  }
}

}  // namespace
}  // namespace hetps
