#include "bench/pinning.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace hetps::bench {

absl::Status PinTo(const std::string& list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    std::vector<std::string> bounds = absl::StrSplit(part, '-');
    int first = 0, last = 0;
    if (bounds.size() > 2 || !absl::SimpleAtoi(bounds[0], &first) ||
        !absl::SimpleAtoi(bounds.back(), &last) || first < 0 || last < first ||
        last >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list '", list, "'"));
    }
    for (int cpu = first; cpu <= last; ++cpu) CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot pin to CPUs ", list));
  }
  return absl::OkStatus();
}

void PinToCpuOrExit(int cpu, const char* program) {
  if (cpu < 0) return;
  if (const absl::Status pinned = PinTo(std::to_string(cpu)); !pinned.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, pinned.ToString().c_str());
    std::exit(2);
  }
}

}  // namespace hetps::bench
