// Deadlines, timers and timed waits keep their length when the wall clock steps (NTP stepping
// it, a VM resumed after a pause): an hour forward must not end them at once, an hour back must
// not hold them for an hour. The wall clock is stepped as tests/testing/wall_clock_step.h
// describes (so each case steps both ways); waits here are bounded on steady_clock.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/timer_queue.h"
#include "gtest/gtest.h"
#include "tests/testing/transports.h"
#include "tests/testing/wall_clock_step.h"
#include "transport/grpc/grpc_transport.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"

namespace hetps {
namespace {

using Steady = std::chrono::steady_clock;

absl::Duration Since(Steady::time_point start) { return absl::FromChrono(Steady::now() - start); }

// A flag set once, awaited on steady_clock with a bound. Not TimedNotification: the test's
// bounds must not rest on the waits under test.
class Event {
 public:
  void Set() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool AwaitFor(std::chrono::seconds bound) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, bound, [this] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

class ClockStepTest : public ::testing::TestWithParam<int> {
 protected:
  // +1 h or -1 h.
  absl::Duration step() const { return absl::Hours(GetParam()); }
  void TearDown() override { testing::SetWallClockStep(absl::ZeroDuration()); }
};

TEST_P(ClockStepTest, NowDoesNotFollowTheWallClock) {
  const absl::Time before = Now();
  testing::SetWallClockStep(step());
  EXPECT_LT(absl::AbsDuration(Now() - before), absl::Seconds(1));
  EXPECT_GT(absl::AbsDuration(WallNow() - before), absl::Minutes(59));
}

TEST_P(ClockStepTest, ATimerFiresWhenDueThoughTheWallClockStepsWhileItWaits) {
  TimerQueue timers;
  Event fired;
  Steady::time_point fired_at;
  const Steady::time_point start = Steady::now();
  timers.Schedule(Now() + absl::Milliseconds(500), [&] {
    fired_at = Steady::now();
    fired.Set();
  });
  testing::SetWallClockStep(step());
  ASSERT_TRUE(fired.AwaitFor(std::chrono::seconds(10)))
      << "a timer due in 500 ms has not fired 10 s after a step of the wall clock";
  EXPECT_GE(absl::FromChrono(fired_at - start), absl::Milliseconds(450));
}

TEST_P(ClockStepTest, AwaitUntilEndsAtItsDeadlineNotTheWallClocks) {
  testing::SetWallClockStep(step());
  absl::Mutex mu;
  bool released = false;  // guarded by mu; set if the wait overstays, to end it
  std::atomic<bool> result{true};
  std::atomic<int64_t> waited_ms{-1};
  Event ended;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    const Steady::time_point start = Steady::now();
    result = AwaitUntil(mu, absl::Condition(&released), Now() + absl::Milliseconds(500));
    waited_ms = absl::ToInt64Milliseconds(Since(start));
    ended.Set();
  });
  ended.AwaitFor(std::chrono::seconds(10));
  {
    absl::MutexLock lock(&mu);
    released = true;
  }
  waiter.join();
  EXPECT_FALSE(result.load()) << "the wait outlasted 10 s (released by the test)";
  EXPECT_GE(waited_ms.load(), 450);
  EXPECT_LT(waited_ms.load(), 5000);
}

TEST_P(ClockStepTest, AwaitUntilReturnsWhenItsConditionHolds) {
  testing::SetWallClockStep(step());
  absl::Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    ready = true;
  });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(AwaitUntil(mu, absl::Condition(&ready), Now() + absl::Seconds(30)));
  setter.join();
}

INSTANTIATE_TEST_SUITE_P(Steps, ClockStepTest, ::testing::Values(1, -1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param > 0 ? std::string("Forward") : std::string("Back");
                         });

// A call nobody answers ends at its deadline, over every transport, with the wall clock stepped
// before the connection is made.
class NeverReplies : public transport::RequestHandler {
 public:
  ~NeverReplies() override {
    for (auto& reply : held_) reply(absl::CancelledError("test over"));
  }
  void HandleRequest(transport::Request request, transport::ReplyCallback reply) override {
    absl::MutexLock lock(&mu_);
    held_.push_back(std::move(reply));
  }

 private:
  absl::Mutex mu_;
  std::vector<transport::ReplyCallback> held_ ABSL_GUARDED_BY(mu_);
};

class CallClockStepTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void TearDown() override { testing::SetWallClockStep(absl::ZeroDuration()); }
};

TEST_P(CallClockStepTest, AnUnansweredCallEndsAtItsDeadline) {
  const auto& [name, hours] = GetParam();
  std::shared_ptr<transport::Transport> transport;
  std::string address = "127.0.0.1:0";
  if (name == "inproc") {
    transport = transport::NewInProcTransport(transport::TransportOptions());
    address = "test:0";
  } else if (name == "grpc") {
    transport = transport::NewGrpcTransport(transport::TransportOptions());
  } else {
    transport = testing::NewTestTransport(name);
  }
  NeverReplies handler;
  auto listener = transport->Listen(address, &handler);
  ASSERT_TRUE(listener.ok()) << listener.status();
  testing::SetWallClockStep(absl::Hours(hours));
  auto connection = transport->Connect((*listener)->address(), Now() + absl::Seconds(10));
  ASSERT_TRUE(connection.ok()) << connection.status();

  transport::Request request;
  request.method = 1;
  request.deadline = Now() + absl::Milliseconds(500);
  Event ended;
  absl::Status status;
  Steady::time_point ended_at;
  const Steady::time_point start = Steady::now();
  (*connection)->Call(std::move(request), [&](absl::StatusOr<transport::Response> response) {
    status = response.status();
    ended_at = Steady::now();
    ended.Set();
  });
  const bool in_time = ended.AwaitFor(std::chrono::seconds(10));
  (*connection)->Shutdown();  // ends the call if it is still waiting
  ASSERT_TRUE(ended.AwaitFor(std::chrono::seconds(10)));
  (*listener)->Shutdown();
  ASSERT_TRUE(in_time) << "a call with a 500 ms deadline was still waiting after 10 s";
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(absl::FromChrono(ended_at - start), absl::Milliseconds(450)) << status;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, CallClockStepTest,
    ::testing::Combine(::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                       ::testing::Values(1, -1)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
      return absl::StrCat(testing::TestName(std::get<0>(info.param)),
                          std::get<1>(info.param) > 0 ? "_Forward" : "_Back");
    });

}  // namespace
}  // namespace hetps
