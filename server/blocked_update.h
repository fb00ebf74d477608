// An optimizer update over gradients that may still be in a 16-bit wire format, writing the new
// weights in a 16-bit format too when pulls want them so: a cache-sized block at a time, so the
// widening of the gradients and the narrowing of the weights ride on the update's own pass over
// memory instead of one pass each before and after it.
#ifndef HETPS_SERVER_BLOCKED_UPDATE_H_
#define HETPS_SERVER_BLOCKED_UPDATE_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "common/half.h"
#include "optimizer/optimizer.h"

namespace hetps::server {

// One gradient as the update reads it: fp32 values, or 16-bit ones as a transport received them.
struct GradientSource {
  const float* values = nullptr;     // fp32; null when `narrow` holds the gradient
  const uint16_t* narrow = nullptr;  // in `format`
  FloatFormat format = FloatFormat::kFp32;
};

// The update of one partition, less what UpdateRange cuts out of it.
struct BlockedUpdate {
  const Optimizer* rule = nullptr;
  // weights_in, weights_out, state, size, step and gradient_sum_out as Optimizer::Update takes
  // them; `gradients` is ignored (the sources below replace it).
  UpdateArgs args;
  absl::Span<const GradientSource> gradients;
  // Optional: receives the new weights in `narrow_format` (bf16 or fp16), args.size elements.
  uint16_t* narrow_out = nullptr;
  FloatFormat narrow_format = FloatFormat::kBf16;
};

// Elements per block: the widened gradients, weights and state of a block stay in L2.
inline constexpr size_t kUpdateBlockElements = 8192;

// Runs the update on elements [begin, end). Ranges may run on different threads at once.
void UpdateRange(const BlockedUpdate& update, size_t begin, size_t end);

}  // namespace hetps::server

#endif  // HETPS_SERVER_BLOCKED_UPDATE_H_
