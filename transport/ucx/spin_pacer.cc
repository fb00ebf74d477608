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
}

void SpinPacer::OnYield(bool another_worked) {
  yielded_ = true;
  if (another_worked) {
    another_worked_ = true;
    spin_ns_ = std::min(kMinSpinNs, max_spin_ns_);
  }
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
