// SpinPacer: how long a polling thread spins after its last event before it starts giving up
// its CPU (sched_yield) between polls. Spinning catches an answer with no wake-up while the
// thread that sends it runs on another CPU; where that thread waits for this very CPU (a worker
// and a shard on one CPU, more busy threads than CPUs), spinning only delays the answer, by as
// long as the spin. So the spin adapts to what the yields show:
// - a yield that let another thread work (the kernel switched to it: the calling thread's
//   involuntary context switches went up; and the yield took kAnotherWorkedNs or more, where
//   one to a thread that only yields back, such as a client's progress thread polling with
//   nothing to do, takes less) means a thread waits for this CPU: the spin drops to its
//   minimum, and the CPU is handed over soon after each event from then on;
// - an event that came while yielding, where no yield since the last event let another thread
//   work, came from another CPU: spinning longer would have caught it without the yields, so the
//   spin doubles (up to its maximum, where it starts).
// Where the threads that talk have CPUs of their own, the spin stays at its maximum; where a
// shard shares its CPU with the worker it answers, it hands the CPU over 2 us after replying.
// A shard that sleeps when idle uses it, and so does a caller waiting for its calls within its
// window (UcxTransport::Drive); busy-polling ones keep their spins (UcxWorker::Run).
//
// Handing over keeps two threads that share a CPU going, at several times the time a call takes
// where each has a CPU, and the kernel is slow to part them: both are always runnable and have just
// run, so its balancer counts them as cache-hot and leaves them together (unpinned workers and
// shards for tens of milliseconds here, 2 vCPUs, the other one idle); nor does a nap part them (a
// kernel that limits its search for an idle CPU by how busy the CPUs sharing a cache are woke a
// thread where it slept in 36 of 38 naps here). So a thread whose yields hand its CPU over
// kHandOversBeforeMoving times in a row moves off it, to another CPU it may run on (the kernel
// picks it, and may move the thread again later; the CPUs it may run on stay what they were). Where
// that does not part it from the threads it hands over to (more busy threads than CPUs), moving
// again would not either: each move within a second of the last waits for twice the hand-overs of
// the one before, up to kMostHandOversBeforeMoving, so where moving cannot help a thread soon moves
// a few times a second at most (two unpinned processes of a worker and a shard moved none to two
// times each in a run).
//
// One thread uses a pacer (not thread-safe).
//
//   SpinPacer pacer(max_spin_ns);
//   for (int64_t last_event = NowNanos();;) {
//     if (Poll()) { pacer.OnEvent(); last_event = NowNanos(); continue; }
//     if (NowNanos() - last_event >= pacer.spin_ns()) pacer.Yield();
//   }
#ifndef HETPS_TRANSPORT_UCX_SPIN_PACER_H_
#define HETPS_TRANSPORT_UCX_SPIN_PACER_H_

#include <cstdint>

namespace hetps::transport::ucx_internal {

class SpinPacer {
 public:
  // The spin never drops below this: a yield costs about a microsecond (more on VMs), and an
  // answer from another CPU often comes within a few.
  static constexpr int64_t kMinSpinNs = 2000;
  // A yield that switched to another thread and took this long let it work. On the project's
  // VM a yield alone takes 1.1 us, one to a thread that only yields back 3.3 us (4.3 at p90),
  // one to a thread that works for 3 us 7.6 us.
  static constexpr int64_t kAnotherWorkedNs = 5000;
  // A waiting caller's spin at most: half its default window (UcxOptions::poll_before_sleep),
  // so that it yields, and learns, within a window.
  static constexpr int64_t kCallerMaxSpinNs = 25'000;
  // Yields in a row that let another thread work before the thread moves to another CPU: where
  // two threads that talk share a CPU about 0.3 ms of their calls (at 10 us a hand-over).
  static constexpr uint32_t kHandOversBeforeMoving = 32;
  // The most hand-overs a move waits for (about 0.7 s at 10 us a hand-over), and how long moves
  // are remembered: a move a second or more after the last waits for kHandOversBeforeMoving.
  static constexpr uint32_t kMostHandOversBeforeMoving = uint32_t{1} << 16;
  static constexpr int64_t kMovesRememberedNs = 1'000'000'000;

  explicit SpinPacer(int64_t max_spin_ns) : max_spin_ns_(max_spin_ns), spin_ns_(max_spin_ns) {}

  // How long to poll after the last event before yielding.
  int64_t spin_ns() const { return spin_ns_; }
  // Gives up the CPU once (sched_yield) and learns whether another thread worked meanwhile:
  // the calling thread's involuntary context switches, read with a second system call (only
  // when yielding; a clock alone cannot tell a switch from a slow yield), and the time.
  void Yield();
  // Learns from a yield (Yield() calls it; tests too).
  void OnYield(bool another_worked);
  // Whether the thread should move to another CPU now (its yields kept handing its CPU over).
  bool move_due() const { return hand_overs_ >= hand_overs_before_moving_; }
  // The thread moved (or found it could not: one CPU allowed) at time `now_ns` (Yield() calls
  // it; tests too).
  void OnMoved(int64_t now_ns);
  // Hand-overs in a row the next move waits for.
  uint32_t hand_overs_before_moving() const { return hand_overs_before_moving_; }
  // An event came (a message, a completion): learns from the yields since the last one.
  void OnEvent();
  // The thread slept, or starts a new wait: the yields so far say nothing about the next event.
  void Restart() { yielded_ = another_worked_ = false; }

 private:
  const int64_t max_spin_ns_;
  int64_t spin_ns_;
  int64_t involuntary_switches_ = -1;  // the thread's count after its last yield; -1: not read
  bool yielded_ = false;               // since the last event
  bool another_worked_ = false;        // in one of those yields
  uint32_t hand_overs_ = 0;            // yields in a row that let another thread work
  uint32_t hand_overs_before_moving_ = kHandOversBeforeMoving;
  int64_t last_move_ns_ = -1;  // -1: none yet
};

// DriveWindow: how long a caller that waits for its calls drives its worker before it blocks
// (sleeping when idle; with busy polling it drives until done). The full window is
// UcxOptions::poll_before_sleep. Where a full window ends with nothing having happened in its
// second half, the answer could not come while the caller spun: the thread that sends it waits
// for this CPU (a shard on the caller's CPU), or it is far off (a long update); either way
// spinning is wasted, so the next windows are short (SpinPacer::kMinSpinNs), and every
// kProbeEvery-th wait tries the full window again, which a reply within it restores.
//
// One thread uses a window (not thread-safe).
//
//   const int64_t window_ns = window.Begin(full_ns);
//   ... drive for window_ns at most ...
//   window.End(done, now - last_event);
class DriveWindow {
 public:
  static constexpr uint32_t kProbeEvery = 8;

  // Starts a wait; returns how long it may spin.
  int64_t Begin(int64_t full_ns);
  // Ends the wait begun last: whether its calls were done by the window's end, and for how long
  // nothing had happened then.
  void End(bool done, int64_t idle_ns);
  bool shortened() const { return shortened_; }

 private:
  bool shortened_ = false;
  bool full_ = true;  // the wait under way has the full window
  int64_t full_ns_ = 0;
  uint32_t waits_ = 0;
};

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TRANSPORT_UCX_SPIN_PACER_H_
