#include "optimizer/registry.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace hetps {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, OptimizerFactory, std::less<>> factories ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used during static init
  return *registry;
}

}  // namespace

bool RegisterOptimizer(absl::string_view name, OptimizerFactory factory) {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  return registry.factories.emplace(std::string(name), factory).second;
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(absl::string_view name,
                                                           const OptimizerParams& params) {
  OptimizerFactory factory = nullptr;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.factories.find(name);
    if (it != registry.factories.end()) factory = it->second;
  }
  if (factory == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", name,
                     "' (known: ", absl::StrJoin(RegisteredOptimizers(), ", "), ")"));
  }
  return factory(params);
}

std::vector<std::string> RegisteredOptimizers() {
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry.factories) names.push_back(name);
  return names;
}

OptimizerParamsReader::OptimizerParamsReader(absl::string_view optimizer,
                                             const OptimizerParams& params)
    : optimizer_(optimizer), params_(params) {}

double OptimizerParamsReader::Lookup(absl::string_view name, double default_value) {
  auto it = params_.find(std::string(name));
  const double value = it == params_.end() ? default_value : it->second;
  resolved_[std::string(name)] = value;
  if (!std::isfinite(value)) Fail(name, value, "a finite number");
  return value;
}

void OptimizerParamsReader::Fail(absl::string_view name, double value, absl::string_view expected) {
  if (error_.ok()) {
    error_ = absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be %s, got %g", optimizer_, name, expected, value));
  }
}

double OptimizerParamsReader::Get(absl::string_view name, double default_value) {
  return Lookup(name, default_value);
}

double OptimizerParamsReader::GetNonNegative(absl::string_view name, double default_value) {
  const double value = Lookup(name, default_value);
  if (value < 0) Fail(name, value, ">= 0");
  return value;
}

double OptimizerParamsReader::GetPositive(absl::string_view name, double default_value) {
  const double value = Lookup(name, default_value);
  if (!(value > 0)) Fail(name, value, "> 0");
  return value;
}

double OptimizerParamsReader::GetFraction(absl::string_view name, double default_value) {
  const double value = Lookup(name, default_value);
  if (!(value >= 0 && value < 1)) Fail(name, value, "in [0, 1)");
  return value;
}

bool OptimizerParamsReader::GetBool(absl::string_view name, bool default_value) {
  const double value = Lookup(name, default_value ? 1 : 0);
  if (value != 0 && value != 1) Fail(name, value, "0 or 1");
  return value == 1;
}

void OptimizerParamsReader::Require(bool condition, absl::string_view message) {
  if (!condition && error_.ok()) {
    error_ = absl::InvalidArgumentError(absl::StrCat(optimizer_, ": ", message));
  }
}

absl::Status OptimizerParamsReader::Finish() const {
  if (!error_.ok()) return error_;
  for (const auto& [name, value] : params_) {
    if (!resolved_.contains(name)) {
      std::vector<std::string> known;
      for (const auto& [known_name, unused] : resolved_) known.push_back(known_name);
      return absl::InvalidArgumentError(absl::StrFormat("%s has no hyperparameter '%s' (known: %s)",
                                                        optimizer_, name,
                                                        absl::StrJoin(known, ", ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace hetps
