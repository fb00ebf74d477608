#include "common/timer_queue.h"

#include <algorithm>

#include "common/clock.h"

namespace hetps {
namespace {

// absl::Mutex as the BasicLockable that std::condition_variable_any takes.
class LockableMutex {
 public:
  explicit LockableMutex(absl::Mutex& mu) : mu_(mu) {}
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION(mu_) { mu_.Lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION(mu_) { mu_.Unlock(); }

 private:
  absl::Mutex& mu_;
};

}  // namespace

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // Posted tasks may post more; run until none is left.
  while (true) {
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock lock(&mu_);
      if (posted_.empty()) break;
      task = std::move(posted_.front());
      posted_.pop_front();
    }
    task();
  }
}

void TimerQueue::Post(absl::AnyInvocable<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(task));
    ++wakeups_;
  }
  wake_.notify_one();
}

TimerQueue::TimerId TimerQueue::Schedule(absl::Time when, absl::AnyInvocable<void()> callback) {
  bool wake = false;
  TimerId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    if (when < sleeps_until_) {
      ++wakeups_;
      wake = true;
    }
    ++scheduled_;  // the thread reads the clock, not every caller
    timers_.emplace(Key{when, id}, std::move(callback));
    deadlines_.emplace(id, when);
  }
  if (wake) wake_.notify_one();
  return id;
}

bool TimerQueue::Cancel(TimerId id) {
  absl::AnyInvocable<void()> dropped;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  auto node = timers_.extract(Key{it->second, id});
  dropped = std::move(node.mapped());
  deadlines_.erase(it);
  return true;
}

void TimerQueue::Run() {
  mu_.Lock();
  while (!stopping_) {
    if (!posted_.empty()) {
      absl::AnyInvocable<void()> task = std::move(posted_.front());
      posted_.pop_front();
      mu_.Unlock();
      task();
      task = nullptr;
      mu_.Lock();
      continue;
    }
    const absl::Time now = hetps::Now();
    if (scheduled_ != scheduled_seen_) {
      scheduled_seen_ = scheduled_;
      last_scheduled_ = now;
    }
    absl::Time next = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
    if (now < next) {
      if (now - last_scheduled_ < kIdle) next = std::min(next, now + kTick);
      sleeps_until_ = next;
      const uint64_t seen = wakeups_;
      auto woken = [this, seen]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wakeups_ != seen; };
      LockableMutex lockable(mu_);
      if (next == absl::InfiniteFuture()) {
        wake_.wait(lockable, woken);
      } else {
        wake_.wait_until(lockable, ToSteady(next), woken);
      }
      continue;
    }
    auto node = timers_.extract(timers_.begin());
    deadlines_.erase(node.key().second);
    mu_.Unlock();
    node.mapped()();
    node.mapped() = nullptr;  // release captured state outside the lock
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace hetps
