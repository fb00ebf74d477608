// SendWindow: how many large messages are being sent on one UCX endpoint at a time; the others
// wait for their turn. Over TCP one stream carries everything between two workers, and large
// messages queued all at once held back the small rendezvous messages that let the other
// direction flow: a push+pull over a 1 Gbit/s link took its push's time and then its pull's
// (2.06x the link's bound for 16 MiB) instead of both at once (1.13x with one at a time).
//
// One at a time costs a fast link an idle gap between messages (the rendezvous' round trip): a
// 64 MiB push+pull over loopback TCP took 1.3x the raw round trip. So the window follows how
// long a large message takes the link (the time between its start, or the previous one's end,
// and its end; the mean of the last two): under kQuickSendNanos, two may be under way (the
// other direction waits at most two such messages' time); slower, or before anything was
// measured, one.
//
//   window.Send([...] { SendFrame(..., [...] { window.Done(); ... }); });
//
// Not thread-safe: only the thread holding the worker uses it.
#ifndef HETPS_TRANSPORT_UCX_SEND_WINDOW_H_
#define HETPS_TRANSPORT_UCX_SEND_WINDOW_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "common/clock.h"

namespace hetps::transport::ucx_internal {

class SendWindow {
 public:
  // Messages from this size on count against the window (from 512 KiB on they go by
  // rendezvous; between, eagerly, still long enough to hold back the other direction).
  static constexpr size_t kLargeBytes = 256 << 10;
  // A large message that the link moves faster than this lets a second one go at once.
  static constexpr int64_t kQuickSendNanos = 2'000'000;
  static constexpr int kMaxInFlight = 2;

  // `now`: nanoseconds of a monotonic clock (tests pass their own).
  explicit SendWindow(int64_t (*now)() = &NowNanos) : now_(now) {}

  // Runs `send` now if the window has room, else after Done() of an earlier one. `send` must
  // lead to exactly one Done().
  void Send(absl::AnyInvocable<void()> send) {
    if (started_.size() >= static_cast<size_t>(limit())) {
      waiting_.push_back(std::move(send));
      return;
    }
    Start(std::move(send));
  }
  // A large send ended (sent or failed): waiting ones start while the window has room.
  void Done() {
    if (!started_.empty()) {  // else a send from before Clear()
      const int64_t now = now_();
      // Sends on one endpoint end in the order they started.
      const int64_t began = std::max(started_.front(), last_end_);
      started_.pop_front();
      // Two under way share the link and tend to end together (one after the pair's time, the
      // other at once): judge by the last two.
      const int64_t took = now - began;
      quick_ = (last_took_ < 0 ? took : (took + last_took_) / 2) < kQuickSendNanos;
      last_took_ = took;
      last_end_ = now;
    }
    while (!waiting_.empty() && started_.size() < static_cast<size_t>(limit())) {
      absl::AnyInvocable<void()> next = std::move(waiting_.front());
      waiting_.pop_front();
      Start(std::move(next));
    }
  }
  // The endpoint failed: the waiting sends are dropped unrun (their calls fail elsewhere), and
  // the window starts empty, and at one, for the next endpoint.
  void Clear() {
    waiting_.clear();
    started_.clear();
    quick_ = false;
    last_took_ = -1;
  }

  // How many large sends may be under way now.
  int limit() const { return quick_ ? kMaxInFlight : 1; }

 private:
  void Start(absl::AnyInvocable<void()> send) {
    started_.push_back(now_());
    send();  // may call Done() at once
  }

  int64_t (*const now_)();
  bool quick_ = false;
  int64_t last_end_ = 0;
  int64_t last_took_ = -1;       // none yet
  std::deque<int64_t> started_;  // of the sends under way, oldest first
  std::deque<absl::AnyInvocable<void()>> waiting_;
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_SEND_WINDOW_H_
