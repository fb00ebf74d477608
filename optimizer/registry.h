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

// Reads a rule's hyperparameters: each Get names one with its default; Finish() then refuses
// names that were never asked for and any range error found on the way.
//
//   OptimizerParamsReader reader("sgd", params);
//   double lr = reader.GetNonNegative("lr", 1e-3);
//   HETPS_RETURN_IF_ERROR(reader.Finish());
class OptimizerParamsReader {
 public:
  OptimizerParamsReader(absl::string_view optimizer, const OptimizerParams& params);

  double Get(absl::string_view name, double default_value);
  // The value must be >= 0 (and finite).
  double GetNonNegative(absl::string_view name, double default_value);
  absl::Status Finish() const;

 private:
  double Lookup(absl::string_view name, double default_value);

  const std::string optimizer_;
  const OptimizerParams& params_;
  std::vector<std::string> known_;
  absl::Status error_;
};

}  // namespace hetps

#define HETPS_REGISTER_OPTIMIZER(name, factory)                          \
  [[maybe_unused]] static const bool hetps_registered_optimizer_##name = \
      ::hetps::RegisterOptimizer(#name, factory)

#endif  // HETPS_OPTIMIZER_REGISTRY_H_
