// RMSprop as torch.optim.RMSprop:
//   g = -g if maximize;  g = g + weight_decay * w
//   v = alpha * v + (1 - alpha) * g * g
//   centered: a = alpha * a + (1 - alpha) * g;  denom = sqrt(v - a * a) + eps
//   otherwise: denom = sqrt(v) + eps
//   momentum > 0: b = momentum * b + g / denom;  w = w - lr * b
//   otherwise:    w = w - lr * g / denom
// Hyperparameters (defaults): lr (1e-2), alpha (0.99), eps (1e-8), weight_decay (0),
// momentum (0), centered (0), maximize (0).
// State slots: v, then a (centered), then b (momentum > 0).
#include <cmath>
#include <memory>

#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "optimizer/rule.h"

namespace hetps {
namespace {

struct Rmsprop {
  struct Config {
    float lr, alpha, eps, weight_decay, momentum;
    bool centered, maximize;
  };
  using Coeffs = Config;

  static int StateSlots(const Config& c) { return 1 + (c.centered ? 1 : 0) + (c.momentum > 0); }
  static float InitialState(const Config&) { return 0; }
  static Coeffs Coefficients(const Config& c, uint64_t) { return c; }

  HETPS_KERNEL static void Block(const Coeffs& c, const UpdateArgs& args, size_t begin, size_t n,
                                 const float* __restrict g) {
    // The variants differ in which state arrays exist: one loop each, so every one vectorises.
    if (c.centered) {
      if (c.momentum > 0) return Loop<true, true>(c, args, begin, n, g);
      return Loop<true, false>(c, args, begin, n, g);
    }
    if (c.momentum > 0) return Loop<false, true>(c, args, begin, n, g);
    return Loop<false, false>(c, args, begin, n, g);
  }

  template <bool kCentered, bool kMomentum>
  HETPS_KERNEL static void Loop(const Coeffs coeffs, const UpdateArgs& args, size_t begin,
                                size_t n, const float* __restrict g) {
    const Coeffs c = coeffs;  // locals: stores to the arrays cannot alias them
    const float* w = args.weights_in + begin;
    float* out = args.weights_out + begin;
    float* __restrict v = args.state[0] + begin;
    float* __restrict avg = kCentered ? args.state[1] + begin : nullptr;
    float* __restrict b = kMomentum ? args.state[kCentered ? 2 : 1] + begin : nullptr;
    const float sign = c.maximize ? -1.0f : 1.0f;
    const float rest = 1.0f - c.alpha;
    for (size_t i = 0; i < n; ++i) {
      float d = sign * g[i];
      if (c.weight_decay != 0) d = d + c.weight_decay * w[i];
      v[i] = c.alpha * v[i] + rest * (d * d);
      float denom;
      if constexpr (kCentered) {
        avg[i] = c.alpha * avg[i] + rest * d;
        denom = std::sqrt(v[i] - avg[i] * avg[i]) + c.eps;
      } else {
        denom = std::sqrt(v[i]) + c.eps;
      }
      if constexpr (kMomentum) {
        b[i] = c.momentum * b[i] + d / denom;
        out[i] = w[i] - c.lr * b[i];
      } else {
        out[i] = w[i] - c.lr * (d / denom);
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateRmsprop(const OptimizerParams& params) {
  OptimizerParamsReader reader("rmsprop", params);
  Rmsprop::Config c;
  c.lr = static_cast<float>(reader.GetNonNegative("lr", 1e-2));
  c.alpha = static_cast<float>(reader.GetNonNegative("alpha", 0.99));
  c.eps = static_cast<float>(reader.GetPositive("eps", 1e-8));
  c.weight_decay = static_cast<float>(reader.GetNonNegative("weight_decay", 0));
  c.momentum = static_cast<float>(reader.GetNonNegative("momentum", 0));
  c.centered = reader.GetBool("centered", false);
  c.maximize = reader.GetBool("maximize", false);
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<RuleOptimizer<Rmsprop>>("rmsprop", reader.resolved(), c);
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(rmsprop, CreateRmsprop);

}  // namespace hetps
