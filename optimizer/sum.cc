// Sum-only (BytePS-style): no optimizer on the server. A step's weights are the sum of the
// workers' gradients for that step, so a pull of version s + 1 returns the sum pushed for step
// s and the job applies its own optimizer on the GPU. No hyperparameters.
#include <memory>

#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "optimizer/rule.h"

namespace hetps {
namespace {

struct Sum {
  struct Config {};
  using Coeffs = Config;
  static constexpr bool kWeightsAreTheSum = true;  // gradient_sum.h: one pass for bf16 copies

  static int StateSlots(const Config&) { return 0; }
  static float InitialState(const Config&) { return 0; }
  static Coeffs Coefficients(const Config& c, uint64_t) { return c; }

  HETPS_KERNEL static void Block(const Coeffs&, const UpdateArgs& args, size_t begin, size_t n,
                                 const float* __restrict g) {
    float* out = args.weights_out + begin;
    for (size_t i = 0; i < n; ++i) out[i] = g[i];
  }
};

absl::StatusOr<std::unique_ptr<Optimizer>> CreateSum(const OptimizerParams& params) {
  OptimizerParamsReader reader("sum", params);
  HETPS_RETURN_IF_ERROR(reader.Finish());
  return std::make_unique<RuleOptimizer<Sum>>("sum", reader.resolved(), Sum::Config{});
}

}  // namespace

HETPS_REGISTER_OPTIMIZER(sum, CreateSum);

}  // namespace hetps
