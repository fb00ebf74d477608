#include "transport/ucx/spin_pacer.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>

#include "common/clock.h"

namespace hetps::transport::ucx_internal {
namespace {

int64_t InvoluntarySwitches() {
  rusage usage = {};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw;
}

// Moves the calling thread off the CPU it runs on, to another that it may run on (the kernel
// picks it), and lets it run on every CPU it could before. False where it may run on one only.
bool MoveOffThisCpu() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;  // > CPU_SETSIZE CPUs
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) return false;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0) return false;
  // Narrowing the set migrates the thread before the call returns; widening it again does not
  // move it back.
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return false;
  sched_setaffinity(0, sizeof(allowed), &allowed);
  return true;
}

}  // namespace

void SpinPacer::Yield() {
  // A yield that hands the CPU to another thread counts as an involuntary switch (the thread
  // stays runnable), as a preemption does: either way another thread wanted this CPU.
  if (involuntary_switches_ < 0) involuntary_switches_ = InvoluntarySwitches();
  const int64_t start = NowNanos();
  sched_yield();
  const int64_t took_ns = NowNanos() - start;
  const int64_t switches = InvoluntarySwitches();
  OnYield(switches > involuntary_switches_ && took_ns >= kAnotherWorkedNs);
  involuntary_switches_ = switches;
  if (move_due()) {
    MoveOffThisCpu();
    OnMoved(NowNanos());
    involuntary_switches_ = InvoluntarySwitches();  // the move may have switched
  }
}

void SpinPacer::OnYield(bool another_worked) {
  yielded_ = true;
  hand_overs_ = another_worked ? hand_overs_ + 1 : 0;
  if (another_worked) {
    another_worked_ = true;
    spin_ns_ = std::min(kMinSpinNs, max_spin_ns_);
  }
}

void SpinPacer::OnMoved(int64_t now_ns) {
  const bool recent = last_move_ns_ >= 0 && now_ns - last_move_ns_ < kMovesRememberedNs;
  hand_overs_before_moving_ =
      recent ? std::min(hand_overs_before_moving_ * 2, kMostHandOversBeforeMoving)
             : kHandOversBeforeMoving;
  last_move_ns_ = now_ns;
  hand_overs_ = 0;
}

void SpinPacer::OnEvent() {
  if (yielded_ && !another_worked_) spin_ns_ = std::min(spin_ns_ * 2, max_spin_ns_);
  Restart();
}

int64_t DriveWindow::Begin(int64_t full_ns) {
  full_ns_ = full_ns;
  full_ = !shortened_ || ++waits_ % kProbeEvery == 0;
  return full_ ? full_ns : std::min(SpinPacer::kMinSpinNs, full_ns);
}

void DriveWindow::End(bool done, int64_t idle_ns) {
  if (!full_) return;  // a short window says nothing about a full one
  if (done) {
    shortened_ = false;
  } else if (idle_ns >= full_ns_ / 2) {
    shortened_ = true;
  }
}

}  // namespace hetps::transport::ucx_internal
