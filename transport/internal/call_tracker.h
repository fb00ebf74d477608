// CallTracker: the outstanding calls of one client connection. Each call completes exactly once:
// with its response, with an error, or with DeadlineExceeded when its deadline passes first.
// Transports use it so that no call can wait forever, whatever the network does.
//
//   uint64_t id = tracker.Start(request.deadline, std::move(done));
//   ... send id with the request ...
//   tracker.Finish(id, response);   // false if it had already completed (e.g. expired)
//
// Thread-safe. Callbacks run without the tracker's lock, on the thread that finishes the call
// (the timer thread for expiries), or on the timer thread when that thread is inside a Call
// (internal/call_scope.h).
#ifndef HETPS_TRANSPORT_INTERNAL_CALL_TRACKER_H_
#define HETPS_TRANSPORT_INTERNAL_CALL_TRACKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/timer_queue.h"
#include "transport/transport.h"

namespace hetps::transport::internal {

class CallTracker {
 public:
  // `peer` names the other end in error messages.
  // REQUIRES: `timers` outlives the tracker.
  CallTracker(TimerQueue* timers, std::string peer);
  // Completes the calls still outstanding with Cancelled.
  ~CallTracker();
  CallTracker(const CallTracker&) = delete;
  CallTracker& operator=(const CallTracker&) = delete;

  uint64_t Start(absl::Time deadline, ResponseCallback done);
  bool Finish(uint64_t id, absl::StatusOr<Response> result);
  // Takes call `id` out of the tracker (no deadline will end it any more) and hands over its
  // callback and deadline; nullopt if it already completed. For transports that must finish
  // receiving into the caller's memory before the call may end.
  struct Detached {
    ResponseCallback done;
    absl::Time deadline;
  };
  std::optional<Detached> Detach(uint64_t id);
  // Completes every outstanding call with `status`.
  void FailAll(const absl::Status& status);
  // `expired` runs, on the timer thread, each time calls have ended at their deadlines (a
  // transport may then check whether the peer is still there).
  void OnExpiry(std::function<void()> expired);
  size_t outstanding() const;
  bool IsOutstanding(uint64_t id) const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with expiry timers that may still be queued
};

}  // namespace hetps::transport::internal

#endif  // HETPS_TRANSPORT_INTERNAL_CALL_TRACKER_H_
