// SGD as torch.optim.SGD without momentum (momentum is its own rule):
//   g = sum of the workers' gradients + weight_decay * w
//   w = w - lr * g
// Hyperparameters: lr (default 1e-3), weight_decay (default 0), both >= 0.
#include <memory>

#include "common/status_macros.h"
#include "optimizer/gradient_sum.h"
#include "optimizer/registry.h"

namespace hetps {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(float lr, float weight_decay) : lr_(lr), weight_decay_(weight_decay) {}

  absl::string_view name() const override { return "sgd"; }
  int state_slots() const override { return 0; }

  void Update(const UpdateArgs& args) const override {
    const float lr = lr_;
    const float decay = weight_decay_;
    ForEachGradientBlock(args, [&](size_t begin, size_t n, const float* __restrict g) {
      const float* w_in = args.weights_in + begin;  // may alias w_out (in-place update)
      float* w_out = args.weights_out + begin;
      if (decay == 0.0f) {
        for (size_t i = 0; i < n; ++i) w_out[i] = w_in[i] - lr * g[i];
      } else {
        for (size_t i = 0; i < n; ++i) w_out[i] = w_in[i] - lr * (g[i] + decay * w_in[i]);
      }
    });
  }

 private:
  const float lr_;
  const float weight_decay_;
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateSgd(const OptimizerParams& params) {
  OptimizerParamsReader reader("sgd", params);
  const double lr = reader.GetNonNegative("lr", 1e-3);
  const double weight_decay = reader.GetNonNegative("weight_decay", 0.0);
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<Sgd>(static_cast<float>(lr), static_cast<float>(weight_decay));
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(sgd, CreateSgd);

}  // namespace hetps
