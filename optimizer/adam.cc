// Adam as torch.optim.Adam (the rule is in adam_rule.h). Hyperparameters (defaults): lr (1e-3),
// beta1 (0.9), beta2 (0.999), eps (1e-8), weight_decay (0, added to the gradient), amsgrad (0),
// maximize (0).
#include "optimizer/adam_rule.h"

#include "common/status_macros.h"

namespace hetps {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateAdamFamily(absl::string_view name,
                                                            const OptimizerParams& params,
                                                            bool decoupled_weight_decay,
                                                            double default_weight_decay) {
  OptimizerParamsReader reader(name, params);
  AdamRule::Config c;
  c.lr = reader.GetNonNegative("lr", 1e-3);
  c.beta1 = reader.GetFraction("beta1", 0.9);
  c.beta2 = reader.GetFraction("beta2", 0.999);
  c.eps = static_cast<float>(reader.GetPositive("eps", 1e-8));
  c.weight_decay = reader.GetNonNegative("weight_decay", default_weight_decay);
  c.amsgrad = reader.GetBool("amsgrad", false);
  c.maximize = reader.GetBool("maximize", false);
  c.decoupled_weight_decay = decoupled_weight_decay;
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<RuleOptimizer<AdamRule>>(name, reader.resolved(), c);
}

namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateAdam(const OptimizerParams& params) {
  return CreateAdamFamily("adam", params, /*decoupled_weight_decay=*/false, 0.0);
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(adam, CreateAdam);

}  // namespace hetps
