// The update shared by Adam and AdamW (adam.cc, adamw.cc), as torch.optim computes it:
//   g = -g if maximize;  Adam: g = g + weight_decay * w;  AdamW: w = w * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//   amsgrad: v_max = max(v_max, v), used in place of v below
//   w = w - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State slots: m, v, then v_max (amsgrad).
#ifndef HETPS_OPTIMIZER_ADAM_RULE_H_
#define HETPS_OPTIMIZER_ADAM_RULE_H_

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/status/statusor.h"
#include "optimizer/registry.h"
#include "optimizer/rule.h"

namespace hetps {

struct AdamRule {
  struct Config {
    double lr, beta1, beta2, weight_decay;
    float eps;
    bool amsgrad, maximize, decoupled_weight_decay;
  };
  struct Coeffs {
    float beta1, rest1, beta2, rest2, eps, step_size, bias2_sqrt, l2, shrink, sign;
    bool amsgrad;
  };

  static int StateSlots(const Config& c) { return c.amsgrad ? 3 : 2; }
  static float InitialState(const Config&) { return 0; }
  static Coeffs Coefficients(const Config& c, uint64_t step) {
    const double t = static_cast<double>(step + 1);
    const double bias1 = 1.0 - std::pow(c.beta1, t);
    const double bias2 = 1.0 - std::pow(c.beta2, t);
    Coeffs k;
    k.beta1 = static_cast<float>(c.beta1);
    k.rest1 = static_cast<float>(1.0 - c.beta1);
    k.beta2 = static_cast<float>(c.beta2);
    k.rest2 = static_cast<float>(1.0 - c.beta2);
    k.eps = c.eps;
    k.step_size = static_cast<float>(c.lr / bias1);
    k.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
    k.l2 = c.decoupled_weight_decay ? 0.0f : static_cast<float>(c.weight_decay);
    k.shrink = c.decoupled_weight_decay ? static_cast<float>(1.0 - c.lr * c.weight_decay) : 1.0f;
    k.sign = c.maximize ? -1.0f : 1.0f;
    k.amsgrad = c.amsgrad;
    return k;
  }

  HETPS_KERNEL static void Block(const Coeffs& coeffs, const UpdateArgs& args, size_t begin,
                                 size_t n, const float* __restrict g) {
    const Coeffs c = coeffs;  // locals: stores to the arrays cannot alias them
    const float* w = args.weights_in + begin;
    float* out = args.weights_out + begin;
    float* __restrict m = args.state[0] + begin;
    float* __restrict v = args.state[1] + begin;
    float* __restrict v_max = c.amsgrad ? args.state[2] + begin : nullptr;
    for (size_t i = 0; i < n; ++i) {
      float d = c.sign * g[i];
      if (c.l2 != 0) d = d + c.l2 * w[i];
      const float shrunk = c.shrink != 1.0f ? w[i] * c.shrink : w[i];
      m[i] = c.beta1 * m[i] + c.rest1 * d;
      v[i] = c.beta2 * v[i] + c.rest2 * (d * d);
      float second = v[i];
      if (c.amsgrad) {
        v_max[i] = std::max(v_max[i], v[i]);
        second = v_max[i];
      }
      const float denom = std::sqrt(second) / c.bias2_sqrt + c.eps;
      out[i] = shrunk - c.step_size * (m[i] / denom);
    }
  }
};

// Reads Adam's or AdamW's hyperparameters (they differ in the default weight decay and in how
// it applies) and makes the optimizer.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateAdamFamily(absl::string_view name,
                                                            const OptimizerParams& params,
                                                            bool decoupled_weight_decay,
                                                            double default_weight_decay);

}  // namespace hetps

#endif  // HETPS_OPTIMIZER_ADAM_RULE_H_
