// SendWindow: at most kInFlight large messages are being sent on one UCX endpoint at a time;
// the others wait for their turn. Over TCP one stream carries everything between two workers,
// and large messages queued all at once held back the small rendezvous messages that let the
// other direction flow: a push+pull over a 1 Gbit/s link took its push's time and then its
// pull's (2.06x the link's bound for 16 MiB) instead of both at once (1.13x).
//
//   window.Send([...] { SendFrame(..., [...] { window.Done(); ... }); });
//
// Not thread-safe: only the thread holding the worker uses it.
#ifndef HETPS_TRANSPORT_UCX_SEND_WINDOW_H_
#define HETPS_TRANSPORT_UCX_SEND_WINDOW_H_

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/functional/any_invocable.h"

namespace hetps::transport::ucx_internal {

class SendWindow {
 public:
  // Messages from this size on count against the window (from 512 KiB on they go by
  // rendezvous; between, eagerly, still long enough to hold back the other direction).
  static constexpr size_t kLargeBytes = 256 << 10;
  static constexpr int kInFlight = 1;

  // Runs `send` now if fewer than kInFlight large sends are under way, else after Done() of an
  // earlier one. `send` must lead to exactly one Done().
  void Send(absl::AnyInvocable<void()> send) {
    if (in_flight_ >= kInFlight) {
      waiting_.push_back(std::move(send));
      return;
    }
    ++in_flight_;
    send();
  }
  // A large send ended (sent or failed): the next waiting one starts.
  void Done() {
    if (in_flight_ > 0) --in_flight_;
    if (waiting_.empty()) return;
    absl::AnyInvocable<void()> next = std::move(waiting_.front());
    waiting_.pop_front();
    ++in_flight_;
    next();
  }
  // The endpoint failed: the waiting sends are dropped unrun (their calls fail elsewhere), and
  // the window starts empty for the next endpoint.
  void Clear() {
    waiting_.clear();
    in_flight_ = 0;
  }

 private:
  int in_flight_ = 0;
  std::deque<absl::AnyInvocable<void()>> waiting_;
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_SEND_WINDOW_H_
