// Runs the calling thread, and the threads it starts from then on, on one CPU under SCHED_FIFO
// at one priority, where a thread keeps the CPU until it blocks or yields: which thread runs
// when is then decided, not a matter of timing. Needs CAP_SYS_NICE; where the process lacks it,
// active() is false and reason() says why (tests skip). Restores the thread's policy and CPUs
// when it goes.
//
//   testing::OneCpuFifo one_cpu;
//   if (!one_cpu.active()) GTEST_SKIP() << one_cpu.reason();
#ifndef HETPS_TESTS_TESTING_ONE_CPU_H_
#define HETPS_TESTS_TESTING_ONE_CPU_H_

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace hetps::testing {

class OneCpuFifo {
 public:
  OneCpuFifo() {
    if (sched_getaffinity(0, sizeof(saved_cpus_), &saved_cpus_) != 0 ||
        sched_getparam(0, &saved_param_) != 0) {
      reason_ = absl::StrCat("cannot read this thread's scheduling: ", std::strerror(errno));
      return;
    }
    saved_policy_ = sched_getscheduler(0);
    sched_param fifo = {};
    fifo.sched_priority = 1;
    if (sched_setscheduler(0, SCHED_FIFO, &fifo) != 0) {
      reason_ = absl::StrCat("this process may not use SCHED_FIFO (", std::strerror(errno),
                             "), which the test needs to decide which thread runs");
      return;
    }
    active_ = true;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_cpus_)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    if (sched_setaffinity(0, sizeof(one), &one) != 0) {
      reason_ = absl::StrCat("cannot keep this thread to one CPU: ", std::strerror(errno));
      Restore();
    }
  }
  ~OneCpuFifo() { Restore(); }
  OneCpuFifo(const OneCpuFifo&) = delete;
  OneCpuFifo& operator=(const OneCpuFifo&) = delete;

  bool active() const { return active_; }
  const std::string& reason() const { return reason_; }

 private:
  void Restore() {
    if (!active_) return;
    active_ = false;
    sched_setscheduler(0, saved_policy_, &saved_param_);
    sched_setaffinity(0, sizeof(saved_cpus_), &saved_cpus_);
  }

  cpu_set_t saved_cpus_ = {};
  int saved_policy_ = SCHED_OTHER;
  sched_param saved_param_ = {};
  bool active_ = false;
  std::string reason_;
};

}  // namespace hetps::testing

#endif  // HETPS_TESTS_TESTING_ONE_CPU_H_
