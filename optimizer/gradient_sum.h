// FusedUpdate: the loop shared by every update rule. The workers' gradients are summed block by
// block, in the given order, into a buffer that stays in L1 cache, and the rule's own loop runs
// on each block right away, so the sum costs no extra pass over memory. With one gradient the
// rule reads it in place. The block can also be written out (UpdateArgs::gradient_sum_out): a
// copy from L1, not a second pass over the gradients.
//
//   struct Sgd {
//     struct Coeffs { float lr; };
//     HETPS_KERNEL static void Block(const Coeffs& c, const UpdateArgs& a, size_t begin,
//                                    size_t n, const float* g) { ... }
//   };
//   RunKernel<FusedUpdate<Sgd>>(&args, &coeffs);   // at the CPU's best SIMD level
#ifndef HETPS_OPTIMIZER_GRADIENT_SUM_H_
#define HETPS_OPTIMIZER_GRADIENT_SUM_H_

#include <algorithm>
#include <cstddef>

#include "common/simd.h"
#include "optimizer/optimizer.h"

namespace hetps {

// Elements per block: 4096 floats = 16 KiB, in L1 with the block's weights and state.
inline constexpr size_t kGradientBlock = 4096;

template <typename Rule>
struct FusedUpdate {
  HETPS_KERNEL static void Run(const UpdateArgs* args, const typename Rule::Coeffs* coeffs) {
    alignas(64) float block[kGradientBlock];
    const size_t workers = args->gradients.size();
    for (size_t begin = 0; begin < args->size; begin += kGradientBlock) {
      const size_t n = std::min(kGradientBlock, args->size - begin);
      const float* g = args->gradients[0] + begin;
      if (workers > 1) {
        const float* __restrict first = g;
        for (size_t i = 0; i < n; ++i) block[i] = first[i];
        for (size_t r = 1; r < workers; ++r) {
          const float* __restrict next = args->gradients[r] + begin;
          for (size_t i = 0; i < n; ++i) block[i] += next[i];
        }
        g = block;
        if (args->gradient_sum_out != nullptr) {
          float* __restrict out = args->gradient_sum_out + begin;
          for (size_t i = 0; i < n; ++i) out[i] = block[i];
        }
      }
      Rule::Block(*coeffs, *args, begin, n, g);
    }
  }
};

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_GRADIENT_SUM_H_
