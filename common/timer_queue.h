// TimerQueue runs callbacks at given times on one background thread.
//
//   TimerQueue timers;
//   TimerQueue::TimerId id = timers.Schedule(Now() + absl::Seconds(1), [] { ... });
//   timers.Cancel(id);  // true if it had not started yet
//
// Thread-safe. Callbacks run one at a time on the timer thread, without the queue's lock held,
// so they may schedule or cancel timers; they should be short (hand long work elsewhere).
// Destruction stops the thread; timers that have not fired by then are dropped unrun, but tasks
// given to Post() all run (on the destroying thread if need be).
//
// Most timers are deadlines that get cancelled long before they are due, one per call: while
// timers come and go, the thread wakes at least every kTick by itself, so scheduling a timer due
// after its next wake-up costs no thread wake-up (a futex call and a context switch per call
// otherwise). After kIdle without a timer it sleeps until the next one.
//
// Times are Now()'s (common/clock.h), and the thread sleeps on the monotonic clock: a step of
// the wall clock neither fires timers early nor holds them back.
#ifndef HETPS_COMMON_TIMER_QUEUE_H_
#define HETPS_COMMON_TIMER_QUEUE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace hetps {

class TimerQueue {
 public:
  using TimerId = uint64_t;

  TimerQueue();
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `callback` once, at or soon after `when`.
  TimerId Schedule(absl::Time when, absl::AnyInvocable<void()> callback);

  // Removes a timer that has not started; returns false if it already ran, is running, or
  // never existed.
  bool Cancel(TimerId id);

  // Runs `task` soon on the timer thread, ahead of due timers. Unlike a timer it always runs:
  // what the destructor finds queued it runs itself (a completion that must not be lost).
  void Post(absl::AnyInvocable<void()> task);

 private:
  using Key = std::pair<absl::Time, TimerId>;

  static constexpr absl::Duration kTick = absl::Milliseconds(50);
  static constexpr absl::Duration kIdle = absl::Seconds(2);

  void Run();

  absl::Mutex mu_;
  // Signalled when wakeups_ changes or stopping_ is set: the thread waits on it with a
  // steady_clock deadline (Abseil's timed waits follow the wall clock).
  std::condition_variable_any wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bumped to wake the thread: a timer is due before the thread would wake by itself.
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time sleeps_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Timers scheduled so far, and how many of them the thread had seen when it last looked: it
  // notes the time of the last one it noticed (at most kTick late), for kIdle.
  uint64_t scheduled_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t scheduled_seen_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_scheduled_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<Key, absl::AnyInvocable<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::AnyInvocable<void()>> posted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TimerId, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace hetps

#endif  // HETPS_COMMON_TIMER_QUEUE_H_
