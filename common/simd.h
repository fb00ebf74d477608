// Run-time choice of the instruction set for hot loops. A kernel is written once, as plain loops
// the compiler vectorises, and compiled three times: for the x86-64 baseline (SSE2), AVX2 and
// AVX-512. The best level the CPU supports is used, unless HETPS_SIMD (baseline|avx2|avx512)
// or SetActiveSimdLevel asks for a lower one (tests compare the levels).
//
//   struct Scale {
//     HETPS_KERNEL static void Run(float* x, size_t n, float a) { for (...) x[i] *= a; }
//   };
//   RunKernel<Scale>(x, n, 2.0f);
//
// Kernels must give the same results at every level: build them with -ffp-contract=off so no
// level fuses multiply-adds the others do not.
#ifndef HETPS_COMMON_SIMD_H_
#define HETPS_COMMON_SIMD_H_

#include "absl/status/status.h"

namespace hetps {

enum class SimdLevel { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU supports.
SimdLevel BestSimdLevel();
// The level kernels run at now.
SimdLevel ActiveSimdLevel();
// Limits kernels to `level` (clamped to BestSimdLevel()). Not meant for concurrent use with
// running kernels of different expectations: tests call it between runs.
void SetActiveSimdLevel(SimdLevel level);
const char* SimdLevelName(SimdLevel level);
// InvalidArgument naming HETPS_SIMD when it is set to an unknown value (the best level is used
// then, and a library reports it on stderr; programs refuse to start with it).
absl::Status CheckSimdEnvironment();

#define HETPS_KERNEL inline __attribute__((always_inline))

#if defined(__x86_64__)
template <typename Kernel, typename... Args>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512"))) void
RunKernelAvx512(Args... args) {
  Kernel::Run(args...);
}
template <typename Kernel, typename... Args>
__attribute__((target("avx2"))) void RunKernelAvx2(Args... args) {
  Kernel::Run(args...);
}
#endif

template <typename Kernel, typename... Args>
void RunKernel(Args... args) {
#if defined(__x86_64__)
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return RunKernelAvx512<Kernel>(args...);
    case SimdLevel::kAvx2:
      return RunKernelAvx2<Kernel>(args...);
    case SimdLevel::kBaseline:
      break;
  }
#endif
  Kernel::Run(args...);
}

}  // namespace hetps

#endif  // HETPS_COMMON_SIMD_H_
