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

namespace hetps {

using OptimizerParams = std::map<std::string, double>;

struct UpdateArgs {
  // Current weights. May equal weights_out (in-place update).
  const float* weights_in = nullptr;
  float* weights_out = nullptr;
  // The gradients to apply, summed in this order. At least one.
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

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_OPTIMIZER_H_
