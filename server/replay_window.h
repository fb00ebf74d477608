// ReplayWindow: recognises repeated sequence numbers from one sender whose messages may arrive
// out of order (several threads pushing at once, a retry overtaken by newer pushes). Like
// IPsec's anti-replay window, it remembers the highest number seen and which of the 64 below it
// were seen.
//
//   if (window.IsNew(seq)) { apply(); window.Mark(seq); }
//
// Sequence 0 is never new. Not thread-safe.
#ifndef HETPS_SERVER_REPLAY_WINDOW_H_
#define HETPS_SERVER_REPLAY_WINDOW_H_

#include <cstdint>

namespace hetps::server {

class ReplayWindow {
 public:
  static constexpr uint64_t kSize = 64;

  // False for a number seen before, and for one 64 or more below the highest seen (too old to
  // be told from a repeat).
  bool IsNew(uint64_t sequence) const {
    if (sequence == 0) return false;
    if (sequence > highest_) return true;
    const uint64_t age = highest_ - sequence;
    return age < kSize && (seen_ & (uint64_t{1} << age)) == 0;
  }

  // REQUIRES: IsNew(sequence).
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
