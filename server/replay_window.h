// ReplayWindow: recognises repeated sequence numbers from one sender whose messages may arrive
// out of order (several threads pushing at once, a retry overtaken by newer pushes). Like
// IPsec's anti-replay window, it remembers the highest number seen and which of the 64 below it
// were seen; what lies outside cannot be judged and is reported as such, never as a repeat.
//
//   switch (window.Judge(seq)) {
//     case ReplayWindow::kNew: apply(); window.Mark(seq); break;
//     case ReplayWindow::kSeen: break;  // a retry: already applied
//     default: refuse();                // cannot tell: never acknowledge it as applied
//   }
//
// Not thread-safe.
#ifndef HETPS_SERVER_REPLAY_WINDOW_H_
#define HETPS_SERVER_REPLAY_WINDOW_H_

#include <cstdint>

namespace hetps::server {

class ReplayWindow {
 public:
  static constexpr uint64_t kSize = 64;
  // Largest step ahead of the highest number seen that is believed: a sender counts from 1 and
  // never sends billions of messages in one burst, so a larger jump is a corrupt or forged
  // number that would otherwise push every later one out of the window.
  static constexpr uint64_t kMaxJump = uint64_t{1} << 32;

  enum Verdict {
    kNew,
    kSeen,        // a repeat
    kTooOld,      // 64 or more below the highest seen: cannot be told from a repeat
    kTooFarAhead  // more than kMaxJump above the highest seen
    // Sequence 0 is never valid: kTooOld.
  };

  Verdict Judge(uint64_t sequence) const {
    if (sequence == 0) return kTooOld;
    if (sequence > highest_) return sequence - highest_ > kMaxJump ? kTooFarAhead : kNew;
    const uint64_t age = highest_ - sequence;
    if (age >= kSize) return kTooOld;
    return (seen_ & (uint64_t{1} << age)) == 0 ? kNew : kSeen;
  }

  uint64_t highest() const { return highest_; }
  // Bit i: highest() - i was seen (what a checkpoint keeps, with highest()).
  uint64_t seen() const { return seen_; }
  static ReplayWindow Restored(uint64_t highest, uint64_t seen) {
    ReplayWindow window;
    window.highest_ = highest;
    window.seen_ = seen;
    return window;
  }

  // REQUIRES: Judge(sequence) == kNew.
  void Mark(uint64_t sequence) {
    if (sequence > highest_) {
      const uint64_t shift = sequence - highest_;
      seen_ = shift >= kSize ? 0 : seen_ << shift;
      highest_ = sequence;
      seen_ |= 1;
    } else {
      seen_ |= uint64_t{1} << (highest_ - sequence);
    }
  }

 private:
  uint64_t highest_ = 0;
  uint64_t seen_ = 0;  // bit i: highest_ - i was seen
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_REPLAY_WINDOW_H_
