#include "transport/internal/call_tracker.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace hetps::transport::internal {

struct CallTracker::State {
  struct Call {
    ResponseCallback done;
    TimerQueue::TimerId timer = 0;
    absl::Time deadline;
  };

  State(TimerQueue* timers, std::string peer) : timers(timers), peer(std::move(peer)) {}

  // Removes call `id`; the returned callback is empty if it was not outstanding.
  ResponseCallback Take(uint64_t id, absl::Time* deadline = nullptr) {
    Call call;
    {
      absl::MutexLock lock(&mu);
      auto it = calls.find(id);
      if (it == calls.end()) return nullptr;
      call = std::move(it->second);
      calls.erase(it);
    }
    if (call.timer != 0) timers->Cancel(call.timer);
    if (deadline != nullptr) *deadline = call.deadline;
    return std::move(call.done);
  }

  TimerQueue* const timers;
  const std::string peer;
  mutable absl::Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<uint64_t, Call> calls ABSL_GUARDED_BY(mu);
};

CallTracker::CallTracker(TimerQueue* timers, std::string peer)
    : state_(std::make_shared<State>(timers, std::move(peer))) {}

CallTracker::~CallTracker() {
  FailAll(absl::CancelledError(absl::StrCat("connection to ", state_->peer, " closed")));
}

uint64_t CallTracker::Start(absl::Time deadline, ResponseCallback done) {
  uint64_t id;
  {
    absl::MutexLock lock(&state_->mu);
    id = state_->next_id++;
    State::Call& call = state_->calls[id];
    call.done = std::move(done);
    call.deadline = deadline;
  }
  if (deadline == absl::InfiniteFuture()) return id;
  std::weak_ptr<State> weak = state_;
  TimerQueue::TimerId timer = state_->timers->Schedule(deadline, [weak, id] {
    std::shared_ptr<State> state = weak.lock();
    if (state == nullptr) return;
    ResponseCallback done = state->Take(id);
    if (done) {
      done(absl::DeadlineExceededError(
          absl::StrCat("no response from ", state->peer, " before the call's deadline")));
    }
  });
  absl::MutexLock lock(&state_->mu);
  auto it = state_->calls.find(id);
  // If the call already finished, the timer finds nothing to expire when it fires.
  if (it != state_->calls.end()) it->second.timer = timer;
  return id;
}

bool CallTracker::Finish(uint64_t id, absl::StatusOr<Response> result) {
  ResponseCallback done = state_->Take(id);
  if (!done) return false;
  done(std::move(result));
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

}  // namespace hetps::transport::internal
