// Server-side update rules. An Optimizer applies one step to a range of parameters: it sums the
// workers' gradients in the order given (so results do not depend on arrival order) and updates
// the weights and its own state in one pass over memory.
//
// Rules follow torch.optim's documented semantics and defaults, one file each, registered by
// name (see registry.h):
//
//   HETPS_ASSIGN_OR_RETURN(auto adam, CreateOptimizer("adam", {{"lr", 1e-3}}));
//   adam->Update({.weights_in = w, .weights_out = w, .gradients = grads, .state = slots,
//                 .size = n, .step = version});
//
// Every update is elementwise, so a range may be cut into pieces updated separately (the shard
// spreads large partitions over threads that way).
//
// Thread safety: an Optimizer is immutable after creation; Update may run concurrently on
// different ranges.
#ifndef HETPS_OPTIMIZER_OPTIMIZER_H_
#define HETPS_OPTIMIZER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/half.h"

namespace hetps {

using OptimizerParams = std::map<std::string, double>;

// A gradient that the update reads a block at a time into L1 instead of in place: values still
// in the 16-bit format they travelled in (bf16 or fp16), widened as they are read, or values in
// any format scattered over pieces (a transport's receive buffers, whose boundaries need not
// fall between elements), gathered as they are read. Either way no copy of the whole is made.
struct StreamedGradient {
  // Contiguous 16-bit values; null for a scattered gradient.
  const uint16_t* values = nullptr;
  FloatFormat format = FloatFormat::kBf16;
  // Scattered: the gradient's bytes in order, and the element that UpdateArgs' element 0 is.
  absl::Span<const absl::Span<const uint8_t>> pieces;
  size_t first_element = 0;
};

struct UpdateArgs {
  // Current weights. May equal weights_out (in-place update).
  const float* weights_in = nullptr;
  float* weights_out = nullptr;
  // The gradients to apply, summed in this order. At least one. A null one is in 16 bits or
  // scattered, in streamed_gradients below.
  absl::Span<const float* const> gradients;
  // state_slots() arrays of `size` floats each, set by InitializeState before the first step.
  absl::Span<float* const> state;
  size_t size = 0;
  // Steps applied before this one (the partition's version); torch.optim's step count t is
  // step + 1.
  uint64_t step = 0;
  // Optional, with more than one gradient: receives their sum (`size` floats), exactly the
  // values the rule was applied to (replication sends it to a backup).
  float* gradient_sum_out = nullptr;
  // Where gradients[i] is null, streamed_gradients[i] holds that gradient (then there is an
  // entry per gradient): the update widens or gathers it a block at a time as it reads it, with
  // no fp32 copy of the whole.
  absl::Span<const StreamedGradient> streamed_gradients;
  // Optional: also receives the new weights in `narrow_format` (bf16 or fp16), narrowed from
  // each block just written (what pulls in that format send).
  uint16_t* narrow_weights_out = nullptr;
  FloatFormat narrow_format = FloatFormat::kBf16;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual absl::string_view name() const = 0;
  // Floats of state kept per parameter (momentum: 1, Adam: 2, AMSGrad: 3).
  virtual int state_slots() const = 0;
  // Fills fresh state before the first step (zeros unless the rule says otherwise).
  virtual void InitializeState(absl::Span<float* const> state, size_t size) const;
  virtual void Update(const UpdateArgs& args) const = 0;
  // The hyperparameters, defaults filled in.
  virtual const OptimizerParams& params() const = 0;
};

// Runs `rule`'s update on elements [begin, end) of `args` (every pointer offset by `begin`).
// Ranges of one update may run on different threads at once.
void UpdateRange(const Optimizer& rule, const UpdateArgs& args, size_t begin, size_t end);

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_OPTIMIZER_H_
