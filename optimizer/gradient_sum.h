// FusedUpdate: the loop shared by every update rule. The workers' gradients are summed block by
// block, in the given order, into a buffer that stays in L1 cache, and the rule's own loop runs
// on each block right away, so the sum costs no extra pass over memory. With one gradient the
// rule reads it in place. The block can also be written out (UpdateArgs::gradient_sum_out): a
// copy from L1, not a second pass over the gradients. Gradients still in a 16-bit format are
// widened into the block as it is built, and the new weights narrowed from it right after the
// rule wrote them (UpdateArgs::narrow_weights_out): 16-bit traffic costs no pass of its own.
// Gradients scattered over a transport's receive buffers are gathered into the block the same
// way (StreamedGradient::pieces), with no contiguous copy made first.
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
#include <cstdint>
#include <cstring>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "common/half.h"
#include "common/simd.h"
#include "optimizer/optimizer.h"

namespace hetps {

// Elements per block: 4096 floats = 16 KiB, in L1 with the block's weights and state.
inline constexpr size_t kGradientBlock = 4096;
// With 16-bit gradients or weights, rules that stream state too run twice as long a block: its
// conversions then interrupt the state's streams half as often (Adam 15% faster than at
// kGradientBlock, measured; a rule without state is fastest at kGradientBlock).
inline constexpr size_t kStatefulSixteenBitBlock = 2 * kGradientBlock;

// A rule whose new weights are the summed gradient itself (sum-only) says so:
//   static constexpr bool kWeightsAreTheSum = true;
// With a bf16 copy of the weights to write, the copy into the weights and the narrowing are
// then one loop, and with one bf16 gradient its widening too: one pass that reads and writes
// memory while it converts, where a pass per step over each block took 1.5x to 2x as long
// (16 Mi elements, one thread: 3.5 against 5.2 ms; a plain copy of the fp32 weights 3.1 ms).
template <typename Rule>
concept WeightsAreTheSum = requires {
  requires Rule::kWeightsAreTheSum;
};

// An element of a summed gradient: fp32, or bf16 bits widened (exactly) as it is read.
HETPS_KERNEL float SumElement(float value) { return value; }
HETPS_KERNEL float SumElement(uint16_t bf16) { return Bf16ToFp32(bf16); }

// weights[i] = sum[i], bf16_weights[i] = the bf16 of sum[i]; `Element`: float or bf16 bits.
template <typename Element>
HETPS_KERNEL void CopyNarrowingToBf16(const Element* __restrict sum, float* __restrict weights,
                                      uint16_t* __restrict bf16_weights, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float value = SumElement(sum[i]);
    weights[i] = value;
    bf16_weights[i] = Fp32ToBf16(value);
  }
}

// Reads a scattered gradient's bytes in order: each Copy starts at or after where the one before
// started, so finding the piece costs nothing per block.
class PieceReader {
 public:
  explicit PieceReader(absl::Span<const absl::Span<const uint8_t>> pieces) : pieces_(pieces) {}

  // Copies bytes [offset, offset + size) of the concatenated pieces into `out`.
  // REQUIRES: offset + size <= the pieces' total size, offset not before the last call's.
  void Copy(size_t offset, size_t size, uint8_t* out) {
    while (size > 0) {
      while (piece_start_ + pieces_[piece_].size() <= offset) {
        piece_start_ += pieces_[piece_].size();
        ++piece_;
      }
      const absl::Span<const uint8_t> piece = pieces_[piece_];
      const size_t at = offset - piece_start_;
      const size_t take = std::min(size, piece.size() - at);
      std::memcpy(out, piece.data() + at, take);
      out += take;
      offset += take;
      size -= take;
    }
  }

 private:
  const absl::Span<const absl::Span<const uint8_t>> pieces_;
  size_t piece_ = 0;
  size_t piece_start_ = 0;  // offset of pieces_[piece_] in the concatenation
};

template <typename Rule>
struct FusedUpdate {
  HETPS_KERNEL static void Run(const UpdateArgs* args, const typename Rule::Coeffs* coeffs) {
    alignas(64) float block[kStatefulSixteenBitBlock];
    alignas(64) float widened[kStatefulSixteenBitBlock];
    alignas(64) uint16_t gathered[kStatefulSixteenBitBlock];  // a scattered 16-bit block
    const size_t workers = args->gradients.size();
    absl::InlinedVector<PieceReader, 8> readers;
    for (const StreamedGradient& streamed : args->streamed_gradients)
      readers.emplace_back(streamed.pieces);
    const bool bf16_out =
        args->narrow_weights_out != nullptr && args->narrow_format == FloatFormat::kBf16;
    if constexpr (WeightsAreTheSum<Rule>) {
      if (bf16_out && workers == 1 && args->gradients[0] == nullptr &&
          args->streamed_gradients[0].values != nullptr &&
          args->streamed_gradients[0].format == FloatFormat::kBf16) {
        CopyNarrowingToBf16(args->streamed_gradients[0].values, args->weights_out,
                            args->narrow_weights_out, args->size);
        return;
      }
    }
    bool sixteen_bit = args->narrow_weights_out != nullptr;
    for (size_t r = 0; r < args->streamed_gradients.size(); ++r) {
      sixteen_bit |=
          args->gradients[r] == nullptr && args->streamed_gradients[r].format != FloatFormat::kFp32;
    }
    const size_t block_size =
        sixteen_bit && !args->state.empty() ? kStatefulSixteenBitBlock : kGradientBlock;
    for (size_t begin = 0; begin < args->size; begin += block_size) {
      const size_t n = std::min(block_size, args->size - begin);
      const float* g = block;
      if (workers == 1 && args->gradients[0] != nullptr) {
        g = args->gradients[0] + begin;
      } else {
        for (size_t r = 0; r < workers; ++r) {
          const float* from = args->gradients[r] == nullptr ? nullptr : args->gradients[r] + begin;
          if (from == nullptr) {
            // Widened (exactly) or gathered into L1, then summed like an fp32 gradient.
            const StreamedGradient& streamed = args->streamed_gradients[r];
            float* into = r == 0 ? block : widened;
            if (streamed.values != nullptr) {
              ConvertFloats(streamed.values + begin, streamed.format, into, FloatFormat::kFp32, n);
            } else if (streamed.format == FloatFormat::kFp32) {
              readers[r].Copy((streamed.first_element + begin) * sizeof(float), n * sizeof(float),
                              reinterpret_cast<uint8_t*>(into));
            } else {
              readers[r].Copy((streamed.first_element + begin) * sizeof(uint16_t),
                              n * sizeof(uint16_t), reinterpret_cast<uint8_t*>(gathered));
              ConvertFloats(gathered, streamed.format, into, FloatFormat::kFp32, n);
            }
            from = into;
          }
          const float* __restrict values = from;
          if (r == 0) {
            if (values != block) {
              for (size_t i = 0; i < n; ++i) block[i] = values[i];
            }
          } else {
            for (size_t i = 0; i < n; ++i) block[i] += values[i];
          }
        }
        if (workers > 1 && args->gradient_sum_out != nullptr) {
          float* __restrict out = args->gradient_sum_out + begin;
          for (size_t i = 0; i < n; ++i) out[i] = block[i];
        }
      }
      if constexpr (WeightsAreTheSum<Rule>) {
        if (bf16_out) {
          CopyNarrowingToBf16(g, args->weights_out + begin, args->narrow_weights_out + begin, n);
          continue;
        }
      }
      Rule::Block(*coeffs, *args, begin, n, g);
      if (args->narrow_weights_out != nullptr) {
        // The block's new weights are still in L1: narrowing them costs no pass over memory.
        ConvertFloats(args->weights_out + begin, FloatFormat::kFp32,
                      args->narrow_weights_out + begin, args->narrow_format, n);
      }
    }
  }
};

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_GRADIENT_SUM_H_
