// SGD as torch.optim.SGD, with momentum, dampening and Nesterov momentum:
//   g = -g if maximize;  g = g + weight_decay * w
//   if momentum != 0:  b = g on the first step, else b = momentum * b + (1 - dampening) * g
//                      g = g + momentum * b if nesterov, else g = b
//   w = w - lr * g
// Hyperparameters (defaults): lr (1e-3), momentum (0), dampening (0), weight_decay (0),
// nesterov (0), maximize (0). Nesterov needs momentum > 0 and dampening 0.
#include <memory>

#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "optimizer/rule.h"

namespace hetps {
namespace {

struct Sgd {
  struct Config {
    float lr, momentum, dampening, weight_decay;
    bool nesterov, maximize;
  };
  struct Coeffs {
    Config config;
    bool first_step;
  };

  static int StateSlots(const Config& c) { return c.momentum != 0 ? 1 : 0; }
  static float InitialState(const Config&) { return 0; }
  static Coeffs Coefficients(const Config& c, uint64_t step) { return {c, step == 0}; }

  HETPS_KERNEL static void Block(const Coeffs& coeffs, const UpdateArgs& args, size_t begin,
                                 size_t n, const float* __restrict g) {
    const Config c = coeffs.config;  // locals: stores to the arrays cannot alias them
    const bool first_step = coeffs.first_step;
    const float* w = args.weights_in + begin;  // may alias `out`
    float* out = args.weights_out + begin;
    const float sign = c.maximize ? -1.0f : 1.0f;
    const float keep = 1.0f - c.dampening;
    if (c.momentum == 0) {
      for (size_t i = 0; i < n; ++i) {
        float d = sign * g[i];
        if (c.weight_decay != 0) d = d + c.weight_decay * w[i];
        out[i] = w[i] - c.lr * d;
      }
      return;
    }
    float* __restrict b = args.state[0] + begin;
    for (size_t i = 0; i < n; ++i) {
      float d = sign * g[i];
      if (c.weight_decay != 0) d = d + c.weight_decay * w[i];
      b[i] = first_step ? d : c.momentum * b[i] + keep * d;
      d = c.nesterov ? d + c.momentum * b[i] : b[i];
      out[i] = w[i] - c.lr * d;
    }
  }
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateSgd(const OptimizerParams& params) {
  OptimizerParamsReader reader("sgd", params);
  Sgd::Config c;
  c.lr = static_cast<float>(reader.GetNonNegative("lr", 1e-3));
  c.momentum = static_cast<float>(reader.GetNonNegative("momentum", 0));
  c.dampening = static_cast<float>(reader.Get("dampening", 0));
  c.weight_decay = static_cast<float>(reader.GetNonNegative("weight_decay", 0));
  c.nesterov = reader.GetBool("nesterov", false);
  c.maximize = reader.GetBool("maximize", false);
  reader.Require(!c.nesterov || (c.momentum > 0 && c.dampening == 0),
                 "nesterov momentum needs momentum > 0 and dampening 0");
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<RuleOptimizer<Sgd>>("sgd", reader.resolved(), c);
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(sgd, CreateSgd);

}  // namespace hetps
