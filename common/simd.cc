#include "common/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

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

SimdLevel FromEnvironment() {
  const char* wanted = std::getenv("HETPS_SIMD");
  if (wanted == nullptr) return BestSimdLevel();
  if (std::strcmp(wanted, "baseline") == 0) return SimdLevel::kBaseline;
  if (std::strcmp(wanted, "avx2") == 0) return Clamp(SimdLevel::kAvx2);
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
