#include "optimizer/optimizer.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"

namespace hetps {

void UpdateRange(const Optimizer& rule, const UpdateArgs& args, size_t begin, size_t end) {
  absl::InlinedVector<const float*, 8> gradients(args.gradients.begin(), args.gradients.end());
  for (const float*& g : gradients) {
    if (g != nullptr) g += begin;
  }
  absl::InlinedVector<StreamedGradient, 8> streamed(args.streamed_gradients.begin(),
                                                    args.streamed_gradients.end());
  for (StreamedGradient& g : streamed) {
    if (g.values != nullptr) {
      g.values += begin;
    } else {
      g.first_element += begin;
    }
  }
  absl::InlinedVector<float*, 4> state(args.state.begin(), args.state.end());
  for (float*& slot : state) slot += begin;
  UpdateArgs piece = args;
  piece.weights_in = args.weights_in + begin;
  piece.weights_out = args.weights_out + begin;
  piece.gradients = gradients;
  piece.streamed_gradients = streamed;
  piece.state = state;
  piece.size = end - begin;
  if (args.gradient_sum_out != nullptr) piece.gradient_sum_out = args.gradient_sum_out + begin;
  if (args.narrow_weights_out != nullptr)
    piece.narrow_weights_out = args.narrow_weights_out + begin;
  rule.Update(piece);
}

void Optimizer::InitializeState(absl::Span<float* const> state, size_t size) const {
  for (float* slot : state) std::fill(slot, slot + size, 0.0f);
}

}  // namespace hetps
