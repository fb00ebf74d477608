#include "common/simd.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace hetps {
namespace {

SimdLevel Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
    return SimdLevel::kAvx512;
  }
  if (__builtin_cpu_supports("avx2")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kBaseline;
}

SimdLevel Clamp(SimdLevel level) {
  return static_cast<int>(level) < static_cast<int>(BestSimdLevel()) ? level : BestSimdLevel();
}

// The level HETPS_SIMD asks for (the best one when unset), or InvalidArgument.
absl::StatusOr<SimdLevel> LevelFromEnvironment() {
  const char* wanted = std::getenv("HETPS_SIMD");
  if (wanted == nullptr) return BestSimdLevel();
  for (SimdLevel level : {SimdLevel::kBaseline, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (std::strcmp(wanted, SimdLevelName(level)) == 0) return Clamp(level);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("HETPS_SIMD=", wanted, " is none of baseline, avx2, avx512"));
}

SimdLevel FromEnvironment() {
  absl::StatusOr<SimdLevel> level = LevelFromEnvironment();
  if (level.ok()) return *level;
  std::fprintf(stderr, "hetps: %s; using %s\n", std::string(level.status().message()).c_str(),
               SimdLevelName(BestSimdLevel()));
  return BestSimdLevel();
}

std::atomic<SimdLevel>& Active() {
  static std::atomic<SimdLevel> level{FromEnvironment()};
  return level;
}

}  // namespace

SimdLevel BestSimdLevel() {
  static const SimdLevel best = Detect();
  return best;
}

SimdLevel ActiveSimdLevel() { return Active().load(std::memory_order_relaxed); }

void SetActiveSimdLevel(SimdLevel level) { Active().store(Clamp(level)); }

absl::Status CheckSimdEnvironment() { return LevelFromEnvironment().status(); }

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kBaseline:
      break;
  }
  return "baseline";
}

}  // namespace hetps
