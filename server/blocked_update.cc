#include "server/blocked_update.h"

#include <algorithm>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace hetps::server {

void UpdateRange(const BlockedUpdate& update, size_t begin, size_t end) {
  const UpdateArgs& args = update.args;
  size_t widened = 0;
  for (const GradientSource& g : update.gradients) widened += g.values == nullptr;
  const bool whole = widened == 0 && update.narrow_out == nullptr;
  // Without 16-bit data on either side, the rule runs on the range in one call.
  const size_t block = whole ? end - begin : kUpdateBlockElements;
  // Scratch for the widened gradients: per thread, as ranges of one update run concurrently.
  thread_local std::vector<float> scratch;
  if (scratch.size() < widened * block && !whole) scratch.resize(widened * block);
  absl::InlinedVector<const float*, 8> gradients(update.gradients.size());
  absl::InlinedVector<float*, 4> state(args.state.size());
  for (size_t first = begin; first < end; first += block) {
    const size_t n = std::min(block, end - first);
    float* next_scratch = scratch.data();
    for (size_t i = 0; i < update.gradients.size(); ++i) {
      const GradientSource& g = update.gradients[i];
      if (g.values != nullptr) {
        gradients[i] = g.values + first;
        continue;
      }
      ConvertFloats(g.narrow + first, g.format, next_scratch, FloatFormat::kFp32, n);
      gradients[i] = next_scratch;
      next_scratch += block;
    }
    for (size_t slot = 0; slot < state.size(); ++slot) state[slot] = args.state[slot] + first;
    UpdateArgs piece = args;
    piece.weights_in = args.weights_in + first;
    piece.weights_out = args.weights_out + first;
    piece.gradients = gradients;
    piece.state = state;
    piece.size = n;
    if (args.gradient_sum_out != nullptr) piece.gradient_sum_out = args.gradient_sum_out + first;
    update.rule->Update(piece);
    if (update.narrow_out != nullptr) {
      ConvertFloats(piece.weights_out, FloatFormat::kFp32, update.narrow_out + first,
                    update.narrow_format, n);
    }
  }
}

}  // namespace hetps::server
