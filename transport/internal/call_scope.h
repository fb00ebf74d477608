// The callback rule of transport.h (and worker/client.h): a call's callback never runs inside
// the Call that started it, so a caller may hold a lock its callback takes, and a thread inside
// Call always leaves it promptly (shutdown can wait for it without a time limit).
//
// A Connection marks its thread while inside Call; a completion found there (an error found at
// once, an immediate reply) goes to a transport thread instead:
//
//   void MyConnection::Call(Request request, ResponseCallback done) {
//     CallScope scope;
//     if (shut_down) return CompleteOutsideCall(timers_, std::move(done), Error());
//
// Elsewhere (a transport thread, a waiter that drives the transport) callbacks run at once.
#ifndef HETPS_TRANSPORT_INTERNAL_CALL_SCOPE_H_
#define HETPS_TRANSPORT_INTERNAL_CALL_SCOPE_H_

#include <utility>

#include "common/timer_queue.h"

namespace hetps::transport::internal {

class CallScope {
 public:
  CallScope();
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

  // True on a thread inside a Call.
  static bool Inside();
};

// Runs done(result) now, or on `timers`' thread when this thread is inside a Call. Either way
// it runs exactly once (TimerQueue::Post loses nothing).
template <typename Callback, typename Result>
void CompleteOutsideCall(TimerQueue* timers, Callback done, Result result) {
  if (!CallScope::Inside()) {
    done(std::move(result));
    return;
  }
  timers->Post(
      [done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); });
}

}  // namespace hetps::transport::internal

#endif  // HETPS_TRANSPORT_INTERNAL_CALL_SCOPE_H_
