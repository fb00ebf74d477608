// RuleOptimizer: turns an update rule, written as a per-block kernel, into an Optimizer. A rule
// is a struct with
//
//   struct Config;   // hyperparameters, validated by the rule's factory
//   struct Coeffs;   // what one step's kernel needs (e.g. Adam's bias corrections)
//   static int StateSlots(const Config&);
//   static float InitialState(const Config&);
//   static Coeffs Coefficients(const Config&, uint64_t step);
//   HETPS_KERNEL static void Block(const Coeffs&, const UpdateArgs&, size_t begin, size_t n,
//                                  const float* summed_gradient);
//
// and one factory registered under its name. Block runs at the CPU's best SIMD level
// (common/simd.h), fused with the sum of the workers' gradients (gradient_sum.h).
#ifndef HETPS_OPTIMIZER_RULE_H_
#define HETPS_OPTIMIZER_RULE_H_

#include <algorithm>
#include <string>

#include "common/simd.h"
#include "optimizer/gradient_sum.h"
#include "optimizer/optimizer.h"

namespace hetps {

template <typename Rule>
class RuleOptimizer final : public Optimizer {
 public:
  RuleOptimizer(absl::string_view name, OptimizerParams params, const typename Rule::Config& config)
      : name_(name), params_(std::move(params)), config_(config) {}

  absl::string_view name() const override { return name_; }
  int state_slots() const override { return Rule::StateSlots(config_); }
  const OptimizerParams& params() const override { return params_; }

  void InitializeState(absl::Span<float* const> state, size_t size) const override {
    const float initial = Rule::InitialState(config_);
    for (float* slot : state) std::fill(slot, slot + size, initial);
  }

  void Update(const UpdateArgs& args) const override {
    const typename Rule::Coeffs coeffs = Rule::Coefficients(config_, args.step);
    RunKernel<FusedUpdate<Rule>>(&args, &coeffs);
  }

 private:
  const std::string name_;
  const OptimizerParams params_;
  const typename Rule::Config config_;
};

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_RULE_H_
