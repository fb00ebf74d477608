// Summing the workers' gradients block by block, in a fixed order, so every update rule can fuse
// the sum with its own pass: the block stays in L1 cache between the sum and the update.
//
//   ForEachGradientBlock(args, [&](size_t begin, size_t n, const float* g) { ... });
#ifndef HETPS_OPTIMIZER_GRADIENT_SUM_H_
#define HETPS_OPTIMIZER_GRADIENT_SUM_H_

#include <algorithm>
#include <cstddef>

#include "optimizer/optimizer.h"

namespace hetps {

// Elements per block: 4096 floats = 16 KiB, well inside L1 with the weights beside it.
inline constexpr size_t kGradientBlock = 4096;

// Calls visit(begin, n, g) for consecutive blocks of args.size elements, where g[i] is the sum
// of args.gradients[0][begin + i] + args.gradients[1][begin + i] + ..., added in that order.
// With one gradient, g points straight into it (no copy).
template <typename Visit>
void ForEachGradientBlock(const UpdateArgs& args, Visit&& visit) {
  alignas(64) float block[kGradientBlock];
  for (size_t begin = 0; begin < args.size; begin += kGradientBlock) {
    const size_t n = std::min(kGradientBlock, args.size - begin);
    if (args.gradients.size() == 1) {
      visit(begin, n, args.gradients[0] + begin);
      continue;
    }
    const float* __restrict first = args.gradients[0] + begin;
    for (size_t i = 0; i < n; ++i) block[i] = first[i];
    for (size_t r = 1; r < args.gradients.size(); ++r) {
      const float* __restrict g = args.gradients[r] + begin;
      for (size_t i = 0; i < n; ++i) block[i] += g[i];
    }
    visit(begin, n, static_cast<const float*>(block));
  }
}

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_GRADIENT_SUM_H_
