// Server-side update rules. An Optimizer applies one step to one partition: it sums the workers'
// gradients in the order given (so results do not depend on arrival order), then updates the
// weights and its own state in a single pass over memory.
//
// Each rule lives in its own file and registers itself by name (see registry.h):
//
//   HETPS_ASSIGN_OR_RETURN(auto sgd, CreateOptimizer("sgd", {{"lr", 0.1}}));
//   float* state[] = {};  // sgd keeps no state
//   sgd->Update({.weights_in = w, .weights_out = w, .gradients = grads, .size = n});
//
// Thread safety: an Optimizer is immutable after creation; Update may run concurrently on
// different partitions.
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
  // state_slots() arrays of `size` floats each, zero before the first step.
  absl::Span<float* const> state;
  size_t size = 0;
  // Steps applied before this one (the partition's version).
  uint64_t step = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual absl::string_view name() const = 0;
  // Floats of state kept per parameter (momentum: 1, Adam: 2).
  virtual int state_slots() const = 0;
  virtual void Update(const UpdateArgs& args) const = 0;
};

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_OPTIMIZER_H_
