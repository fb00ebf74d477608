// The optimizer registry: rules register a factory under a name; shards create them from the
// name and hyperparameters a tensor was declared with.
//
//   // in sgd.cc
//   HETPS_REGISTER_OPTIMIZER(sgd, CreateSgd);
//
// Thread-safe. Registration happens during static initialisation.
#ifndef HETPS_OPTIMIZER_REGISTRY_H_
#define HETPS_OPTIMIZER_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "optimizer/optimizer.h"

namespace hetps {

// Returns InvalidArgument for bad hyperparameters.
using OptimizerFactory = absl::StatusOr<std::unique_ptr<Optimizer>> (*)(const OptimizerParams&);

bool RegisterOptimizer(absl::string_view name, OptimizerFactory factory);

// InvalidArgument for an unknown name or bad hyperparameters.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(absl::string_view name,
                                                           const OptimizerParams& params);

std::vector<std::string> RegisteredOptimizers();

// Reads a rule's hyperparameters: each Get names one with its default and its allowed range;
// Finish() then refuses names that were never asked for and the first range error found.
//
//   OptimizerParamsReader reader("adam", params);
//   const double lr = reader.GetNonNegative("lr", 1e-3);
//   const double eps = reader.GetPositive("eps", 1e-8);
//   HETPS_RETURN_IF_ERROR(reader.Finish());
//   ... reader.resolved() holds every hyperparameter, defaults filled in.
class OptimizerParamsReader {
 public:
  OptimizerParamsReader(absl::string_view optimizer, const OptimizerParams& params);

  // Any finite value.
  double Get(absl::string_view name, double default_value);
  // >= 0.
  double GetNonNegative(absl::string_view name, double default_value);
  // > 0.
  double GetPositive(absl::string_view name, double default_value);
  // In [0, 1), like Adam's betas.
  double GetFraction(absl::string_view name, double default_value);
  // 0 or 1.
  bool GetBool(absl::string_view name, bool default_value);
  // Records `message` as the error unless `condition` holds.
  void Require(bool condition, absl::string_view message);

  absl::Status Finish() const;
  const OptimizerParams& resolved() const { return resolved_; }

 private:
  double Lookup(absl::string_view name, double default_value);
  void Fail(absl::string_view name, double value, absl::string_view expected);

  const std::string optimizer_;
  const OptimizerParams& params_;
  OptimizerParams resolved_;
  absl::Status error_;
};

}  // namespace hetps

#define HETPS_REGISTER_OPTIMIZER(name, factory)                          \
  [[maybe_unused]] static const bool hetps_registered_optimizer_##name = \
      ::hetps::RegisterOptimizer(#name, factory)

#endif  // HETPS_OPTIMIZER_REGISTRY_H_
