// AdamW as torch.optim.AdamW: Adam with decoupled weight decay, w = w * (1 - lr * weight_decay)
// before the Adam step (adam_rule.h). Hyperparameters as Adam's, but weight_decay defaults to
// 1e-2.
#include "optimizer/adam_rule.h"

namespace hetps {
namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateAdamW(const OptimizerParams& params) {
  return CreateAdamFamily("adamw", params, /*decoupled_weight_decay=*/true, 1e-2);
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(adamw, CreateAdamW);

}  // namespace hetps
