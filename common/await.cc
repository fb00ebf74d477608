#include "common/await.h"

#include <memory>
#include <mutex>

#include "common/clock.h"
#include "common/timer_queue.h"

namespace hetps {
namespace {

// Retried this often while someone else holds the waiter's mutex (whose release then evaluates
// the waiter's condition anyway).
constexpr absl::Duration kRetry = absl::Milliseconds(1);

// What a deadline's timer touches. `mu` is cleared (under `guard`) when the wait ends, so a
// timer that fires later never touches a mutex that may be gone.
struct Alarm {
  std::mutex guard;
  absl::Mutex* mu = nullptr;
};

TimerQueue& AlarmTimers() {
  static TimerQueue* const timers = new TimerQueue();  // never destroyed: waits may outlive main
  return *timers;
}

// Releases the waiter's mutex so that Abseil evaluates its condition. Never blocks on it (the
// timer thread serves every wait: one mutex held for long must not hold up the others' alarms).
void Ring(const std::shared_ptr<Alarm>& alarm) {
  {
    std::lock_guard<std::mutex> guard(alarm->guard);
    if (alarm->mu == nullptr) return;  // the wait has ended
    if (alarm->mu->TryLock()) {
      alarm->mu->Unlock();
      return;
    }
  }
  AlarmTimers().Schedule(Now() + kRetry, [alarm] { Ring(alarm); });
}

}  // namespace

bool AwaitUntil(absl::Mutex& mu, const absl::Condition& condition, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {
    mu.Await(condition);
    return true;
  }
  auto due = [&condition, deadline]() { return condition.Eval() || Now() >= deadline; };
  if (due()) return condition.Eval();
  auto alarm = std::make_shared<Alarm>();
  alarm->mu = &mu;
  const TimerQueue::TimerId timer = AlarmTimers().Schedule(deadline, [alarm] { Ring(alarm); });
  mu.Await(absl::Condition(&due));
  {
    std::lock_guard<std::mutex> guard(alarm->guard);
    alarm->mu = nullptr;
  }
  AlarmTimers().Cancel(timer);
  return condition.Eval();
}

bool AwaitFor(absl::Mutex& mu, const absl::Condition& condition, absl::Duration timeout) {
  return AwaitUntil(mu, condition, Now() + timeout);
}

}  // namespace hetps
