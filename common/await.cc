#include "common/await.h"

#include <condition_variable>
#include <memory>
#include <mutex>

#include "common/clock.h"
#include "common/timer_queue.h"

namespace hetps {
namespace {

// What a deadline's timer touches. `mu` is cleared (under `guard`) when the wait ends, so a
// timer that fires later never touches a mutex that may be gone; one that is releasing `mu`
// (`firing`) is waited for.
struct Alarm {
  std::mutex guard;
  std::condition_variable fired;
  absl::Mutex* mu = nullptr;
  bool firing = false;
};

TimerQueue& AlarmTimers() {
  static TimerQueue* const timers = new TimerQueue();  // never destroyed: waits may outlive main
  return *timers;
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
  const TimerQueue::TimerId timer = AlarmTimers().Schedule(deadline, [alarm] {
    absl::Mutex* mu;
    {
      std::lock_guard<std::mutex> guard(alarm->guard);
      if (alarm->mu == nullptr) return;
      mu = alarm->mu;
      alarm->firing = true;
    }
    mu->Lock();
    mu->Unlock();  // evaluates the waiter's `due`
    {
      std::lock_guard<std::mutex> guard(alarm->guard);
      alarm->firing = false;
    }
    alarm->fired.notify_all();
  });
  mu.Await(absl::Condition(&due));
  std::unique_lock<std::mutex> guard(alarm->guard);
  alarm->mu = nullptr;
  if (alarm->firing) {  // the timer waits for `mu`: let it through before `mu` may go
    mu.Unlock();
    alarm->fired.wait(guard, [&alarm] { return !alarm->firing; });
    guard.unlock();
    mu.Lock();
  } else {
    guard.unlock();
  }
  AlarmTimers().Cancel(timer);
  return condition.Eval();
}

bool AwaitFor(absl::Mutex& mu, const absl::Condition& condition, absl::Duration timeout) {
  return AwaitUntil(mu, condition, Now() + timeout);
}

}  // namespace hetps
