// SendWindow: how many large messages are being sent on one UCX endpoint at a time, and how
// (eagerly or by rendezvous); the others wait for their turn. Over TCP one stream carries
// everything between two workers, and large messages queued all at once held back the small
// rendezvous messages that let the other direction flow: a push+pull over a 1 Gbit/s link took
// its push's time and then its pull's (2.06x the link's bound for 16 MiB) instead of both at
// once (1.13x with one at a time).
//
// One at a time costs a fast link an idle gap between messages (the rendezvous' round trip): a
// 64 MiB push+pull over loopback TCP took 1.3x the raw round trip. So the window follows how
// long a large message takes the link (the time between its start, or the previous one's end,
// and its end; the mean of the last two): under kQuickSendNanos, two may be under way (the
// other direction waits at most two such messages' time); slower, or before anything was
// measured, one.
//
// On a slow link (under kEagerBelowBytesPerSecond, e.g. a 1 Gbit/s NIC) a rendezvous still waits
// for the receiver's answer, which queues behind the data the other direction sends: 2 workers
// x 2 shards at 1 Gbit/s took 1.26x the links' bound for 64 MiB, 1.10x with every message
// eager. There the copies that an eager message costs at each end (a fraction of a millisecond
// per MiB) are small beside the link's time. So on an endpoint that crosses a network over TCP
// (AllowEager; not shared memory or loopback, where copies are what the link costs), once
// kSlowInARow rendezvous sends in a row were that slow, large messages go eagerly for
// kEagerHoldNanos, and then by rendezvous until measured anew. (An eager send ends when the
// socket takes it, and a socket's buffer grows to many MiB: eager sends say nothing of the
// link.) The first kWarmUpSends of an endpoint decide nothing: a process's first large messages
// are slow on any link (buffers faulted in; 4 MiB over loopback TCP took 16 to 116 ms, then
// 7.5). Fast links keep rendezvous (eager took 2.7x as long for 16 MiB over loopback TCP), and
// one that looked slow (its receiver descheduled) returns to it after the hold.
//
//   window.Send(bytes, [...](bool eager) { SendFrame(..., eager, [...] { window.Done(); ... }); });
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
  // Links slower than this (2 Gbit/s) for kSlowInARow rendezvous sends, after the first
  // kWarmUpSends, get their large messages eagerly for kEagerHoldNanos.
  static constexpr int64_t kEagerBelowBytesPerSecond = 250'000'000;
  static constexpr int kSlowInARow = 4;
  static constexpr int kWarmUpSends = 4;
  static constexpr int64_t kEagerHoldNanos = 10'000'000'000;

  // `now`: nanoseconds of a monotonic clock (tests pass their own).
  explicit SendWindow(int64_t (*now)() = &NowNanos) : now_(now) {}

  // Runs `send` (a message of `bytes`) now if the window has room, else after Done() of an
  // earlier one; `eager` says how to send it. `send` must lead to exactly one Done().
  void Send(size_t bytes, absl::AnyInvocable<void(bool eager)> send) {
    if (started_.size() >= static_cast<size_t>(limit())) {
      waiting_.push_back({bytes, std::move(send)});
      return;
    }
    Start(bytes, std::move(send));
  }
  // A large send ended (sent or failed): waiting ones start while the window has room.
  void Done() {
    if (!started_.empty()) {  // else a send from before Clear()
      const int64_t now = now_();
      // Sends on one endpoint end in the order they started.
      const Started send = started_.front();
      const int64_t began = std::max(send.at, last_end_);
      started_.pop_front();
      last_end_ = now;
      if (!send.eager) Measure(send.bytes, now - began, now);
    }
    while (!waiting_.empty() && started_.size() < static_cast<size_t>(limit())) {
      Waiting next = std::move(waiting_.front());
      waiting_.pop_front();
      Start(next.bytes, std::move(next.send));
    }
  }
  // The endpoint failed: the waiting sends are dropped unrun (their calls fail elsewhere), and
  // the window starts empty, at one and by rendezvous, for the next endpoint.
  void Clear() {
    waiting_.clear();
    started_.clear();
    quick_ = false;
    last_took_ = -1;
    measured_ = 0;
    slow_in_a_row_ = 0;
    allow_eager_ = false;
  }

  // Whether the endpoint's link may be one for eager sends (TCP through a network device).
  void AllowEager(bool allow) { allow_eager_ = allow; }

  // How many large sends may be under way now.
  int limit() const { return quick_ && !eager() ? kMaxInFlight : 1; }
  // Whether large messages go eagerly now.
  bool eager() const { return slow_in_a_row_ >= kSlowInARow; }

 private:
  struct Started {
    int64_t at;
    size_t bytes;
    bool eager;
  };
  struct Waiting {
    size_t bytes;
    absl::AnyInvocable<void(bool eager)> send;
  };

  void Start(size_t bytes, absl::AnyInvocable<void(bool eager)> send) {
    const int64_t now = now_();
    if (eager() && now >= eager_until_) {  // measure the link again
      last_took_ = -1;
      slow_in_a_row_ = 0;
    }
    const bool eager = this->eager();
    started_.push_back({now, bytes, eager});
    send(eager);  // may call Done() at once
  }
  // A rendezvous send of `bytes` took the link `took` nanoseconds, ending `now`.
  void Measure(size_t bytes, int64_t took, int64_t now) {
    // Two under way share the link and tend to end together (one after the pair's time, the
    // other at once): judge by the last two.
    quick_ = (last_took_ < 0 ? took : (took + last_took_) / 2) < kQuickSendNanos;
    last_took_ = took;
    const bool slow =
        static_cast<double>(bytes) <
        static_cast<double>(took) * 1e-9 * static_cast<double>(kEagerBelowBytesPerSecond);
    if (!allow_eager_ || ++measured_ <= kWarmUpSends) return;
    slow_in_a_row_ = slow ? slow_in_a_row_ + 1 : 0;
    if (eager()) eager_until_ = now + kEagerHoldNanos;
  }

  int64_t (*const now_)();
  bool quick_ = false;
  bool allow_eager_ = false;
  int64_t last_end_ = 0;
  int64_t last_took_ = -1;       // of the last rendezvous send; none yet
  int measured_ = 0;             // rendezvous sends measured
  int slow_in_a_row_ = 0;        // the last rendezvous sends that were slow: eager from kSlowInARow
  int64_t eager_until_ = 0;      // while eager()
  std::deque<Started> started_;  // the sends under way, oldest first
  std::deque<Waiting> waiting_;
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_SEND_WINDOW_H_
