#include "transport/internal/call_tracker.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "transport/internal/call_scope.h"

namespace hetps::transport::internal {

// Deadlines: one timer per tracker at a time, due at the earliest deadline of the outstanding
// calls (or earlier: the call it was set for may have ended), rather than one per call. Calls
// mostly end long before their deadlines, and scheduling and cancelling a timer for each cost
// more than the rest of a call's bookkeeping. When it fires it ends the calls that are due and
// sets itself for the next deadline, at least kExpiryBatch later: each firing scans every
// outstanding call, and many calls to a vanished peer, due microseconds apart, must not cost a
// scan each.
constexpr absl::Duration kExpiryBatch = absl::Milliseconds(1);

struct CallTracker::State : std::enable_shared_from_this<State> {
  struct Call {
    ResponseCallback done;
    absl::Time deadline;
  };

  State(TimerQueue* timers, std::string peer) : timers(timers), peer(std::move(peer)) {}

  // Removes call `id`; the returned callback is empty if it was not outstanding.
  ResponseCallback Take(uint64_t id, absl::Time* deadline = nullptr) {
    absl::MutexLock lock(&mu);
    auto it = calls.find(id);
    if (it == calls.end()) return nullptr;
    ResponseCallback done = std::move(it->second.done);
    if (deadline != nullptr) *deadline = it->second.deadline;
    calls.erase(it);
    return done;
  }

  // Sets the timer for `when` unless it is due by then already.
  void ArmFor(absl::Time when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (when >= timer_due || when == absl::InfiniteFuture()) return;
    if (timer != 0) timers->Cancel(timer);
    timer_due = when;
    timer = timers->Schedule(when, [weak = weak_from_this()] {
      if (std::shared_ptr<State> state = weak.lock()) state->Expire();
    });
  }

  void Expire() {
    std::vector<ResponseCallback> expired;
    std::function<void()> after;
    {
      absl::MutexLock lock(&mu);
      after = on_expiry;
      timer = 0;
      timer_due = absl::InfiniteFuture();
      const absl::Time now = hetps::Now();
      absl::Time next = absl::InfiniteFuture();
      for (auto it = calls.begin(); it != calls.end();) {
        auto call = it++;
        if (call->second.deadline <= now) {
          expired.push_back(std::move(call->second.done));
          calls.erase(call);
        } else {
          next = std::min(next, call->second.deadline);
        }
      }
      if (next != absl::InfiniteFuture()) ArmFor(std::max(next, now + kExpiryBatch));
    }
    for (ResponseCallback& done : expired) {
      done(absl::DeadlineExceededError(
          absl::StrCat("no response from ", peer, " before the call's deadline")));
    }
    if (!expired.empty() && after) after();
  }

  TimerQueue* const timers;
  const std::string peer;
  mutable absl::Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<uint64_t, Call> calls ABSL_GUARDED_BY(mu);
  TimerQueue::TimerId timer ABSL_GUARDED_BY(mu) = 0;  // 0: none set
  absl::Time timer_due ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  std::function<void()> on_expiry ABSL_GUARDED_BY(mu);
};

CallTracker::CallTracker(TimerQueue* timers, std::string peer)
    : state_(std::make_shared<State>(timers, std::move(peer))) {}

CallTracker::~CallTracker() {
  FailAll(absl::CancelledError(absl::StrCat("connection to ", state_->peer, " closed")));
  absl::MutexLock lock(&state_->mu);
  if (state_->timer != 0) state_->timers->Cancel(state_->timer);
  state_->timer = 0;
}

uint64_t CallTracker::Start(absl::Time deadline, ResponseCallback done) {
  absl::MutexLock lock(&state_->mu);
  const uint64_t id = state_->next_id++;
  State::Call& call = state_->calls[id];
  call.done = std::move(done);
  call.deadline = deadline;
  state_->ArmFor(deadline);
  return id;
}

bool CallTracker::Finish(uint64_t id, absl::StatusOr<Response> result) {
  ResponseCallback done = state_->Take(id);
  if (!done) return false;
  CompleteOutsideCall(state_->timers, std::move(done), std::move(result));
  return true;
}

std::optional<CallTracker::Detached> CallTracker::Detach(uint64_t id) {
  Detached detached;
  detached.done = state_->Take(id, &detached.deadline);
  if (!detached.done) return std::nullopt;
  return detached;
}

void CallTracker::FailAll(const absl::Status& status) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&state_->mu);
    for (const auto& [id, call] : state_->calls) ids.push_back(id);
  }
  for (uint64_t id : ids) Finish(id, status);
}

size_t CallTracker::outstanding() const {
  absl::MutexLock lock(&state_->mu);
  return state_->calls.size();
}

bool CallTracker::IsOutstanding(uint64_t id) const {
  absl::MutexLock lock(&state_->mu);
  return state_->calls.contains(id);
}

void CallTracker::OnExpiry(std::function<void()> expired) {
  absl::MutexLock lock(&state_->mu);
  state_->on_expiry = std::move(expired);
}

}  // namespace hetps::transport::internal
