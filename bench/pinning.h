// Pinning a benchmark process to CPUs, so that the two sides of a measurement do not share one.
#ifndef HETPS_BENCH_PINNING_H_
#define HETPS_BENCH_PINNING_H_

#include <string>

#include "absl/status/status.h"

namespace hetps::bench {

// Runs this process on the CPUs of `list`, e.g. "0-3,8"; InvalidArgument for a list that does
// not parse or CPUs it cannot run on.
absl::Status PinTo(const std::string& list);

// For a tool's --*_cpu flag: runs this process on `cpu` (nothing when it is negative), or prints
// why it cannot, prefixed with `program`, and exits with status 2.
void PinToCpuOrExit(int cpu, const char* program);

}  // namespace hetps::bench

#endif  // HETPS_BENCH_PINNING_H_
