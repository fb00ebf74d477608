// Adagrad as torch.optim.Adagrad:
//   g = -g if maximize;  g = g + weight_decay * w
//   clr = lr / (1 + (t - 1) * lr_decay)
//   s = s + g * g;  w = w - clr * g / (sqrt(s) + eps)
// Hyperparameters (defaults): lr (1e-2), lr_decay (0), weight_decay (0),
// initial_accumulator_value (0, the starting s), eps (1e-10), maximize (0).
#include <cmath>
#include <memory>

#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "optimizer/rule.h"

namespace hetps {
namespace {

struct Adagrad {
  struct Config {
    double lr, lr_decay;
    float weight_decay, initial_accumulator, eps;
    bool maximize;
  };
  struct Coeffs {
    float clr, weight_decay, eps, sign;
  };

  static int StateSlots(const Config&) { return 1; }
  static float InitialState(const Config& c) { return c.initial_accumulator; }
  static Coeffs Coefficients(const Config& c, uint64_t step) {
    const double clr = c.lr / (1.0 + static_cast<double>(step) * c.lr_decay);
    return {static_cast<float>(clr), c.weight_decay, c.eps, c.maximize ? -1.0f : 1.0f};
  }

  HETPS_KERNEL static void Block(const Coeffs& coeffs, const UpdateArgs& args, size_t begin,
                                 size_t n, const float* __restrict g) {
    const Coeffs c = coeffs;  // locals: stores to the arrays cannot alias them
    const float* w = args.weights_in + begin;
    float* out = args.weights_out + begin;
    float* __restrict sum = args.state[0] + begin;
    for (size_t i = 0; i < n; ++i) {
      float d = c.sign * g[i];
      if (c.weight_decay != 0) d = d + c.weight_decay * w[i];
      sum[i] = sum[i] + d * d;
      out[i] = w[i] - c.clr * (d / (std::sqrt(sum[i]) + c.eps));
    }
  }
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateAdagrad(const OptimizerParams& params) {
  OptimizerParamsReader reader("adagrad", params);
  Adagrad::Config c;
  c.lr = reader.GetNonNegative("lr", 1e-2);
  c.lr_decay = reader.GetNonNegative("lr_decay", 0);
  c.weight_decay = static_cast<float>(reader.GetNonNegative("weight_decay", 0));
  c.initial_accumulator =
      static_cast<float>(reader.GetNonNegative("initial_accumulator_value", 0));
  c.eps = static_cast<float>(reader.GetPositive("eps", 1e-10));
  c.maximize = reader.GetBool("maximize", false);
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<RuleOptimizer<Adagrad>>("adagrad", reader.resolved(), c);
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(adagrad, CreateAdagrad);

}  // namespace hetps
