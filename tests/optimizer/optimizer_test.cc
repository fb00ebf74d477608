// Every update rule against a reference written from torch.optim's documented formulas in double
// precision, over 100 steps with random gradients from two workers and a changing learning rate.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/aligned_buffer.h"
#include "common/half.h"
#include "common/simd.h"
#include "gtest/gtest.h"
#include "optimizer/gradient_sum.h"
#include "optimizer/registry.h"
#include "tests/testing/status_assertions.h"

namespace hetps {
namespace {

struct Case {
  std::string name;  // test name
  std::string rule;
  OptimizerParams params;
};

double Param(const OptimizerParams& params, const std::string& name, double default_value) {
  auto it = params.find(name);
  return it == params.end() ? default_value : it->second;
}

// One step of the rule in double precision. `t` is torch's step count (1 on the first step).
// `s` holds the state slots in the rule's order.
void ReferenceStep(const std::string& rule, const OptimizerParams& p, int t, std::vector<double>& w,
                   std::vector<std::vector<double>>& s, const std::vector<double>& grad) {
  const double sign = Param(p, "maximize", 0) ? -1 : 1;
  for (size_t i = 0; i < w.size(); ++i) {
    double g = sign * grad[i];
    if (rule == "sum") {
      w[i] = grad[i];
    } else if (rule == "sgd") {
      const double lr = Param(p, "lr", 1e-3), momentum = Param(p, "momentum", 0);
      const double dampening = Param(p, "dampening", 0), wd = Param(p, "weight_decay", 0);
      g += wd * w[i];
      if (momentum != 0) {
        s[0][i] = t == 1 ? g : momentum * s[0][i] + (1 - dampening) * g;
        g = Param(p, "nesterov", 0) ? g + momentum * s[0][i] : s[0][i];
      }
      w[i] -= lr * g;
    } else if (rule == "adagrad") {
      const double lr = Param(p, "lr", 1e-2), decay = Param(p, "lr_decay", 0);
      const double eps = Param(p, "eps", 1e-10);
      g += Param(p, "weight_decay", 0) * w[i];
      const double clr = lr / (1 + (t - 1) * decay);
      s[0][i] += g * g;
      w[i] -= clr * g / (std::sqrt(s[0][i]) + eps);
    } else if (rule == "rmsprop") {
      const double lr = Param(p, "lr", 1e-2), alpha = Param(p, "alpha", 0.99);
      const double eps = Param(p, "eps", 1e-8), momentum = Param(p, "momentum", 0);
      const bool centered = Param(p, "centered", 0);
      g += Param(p, "weight_decay", 0) * w[i];
      s[0][i] = alpha * s[0][i] + (1 - alpha) * g * g;
      double v = s[0][i];
      if (centered) {
        s[1][i] = alpha * s[1][i] + (1 - alpha) * g;
        v -= s[1][i] * s[1][i];
      }
      const double denom = std::sqrt(v) + eps;
      if (momentum > 0) {
        double& b = s[centered ? 2 : 1][i];
        b = momentum * b + g / denom;
        w[i] -= lr * b;
      } else {
        w[i] -= lr * g / denom;
      }
    } else {  // adam, adamw
      const double lr = Param(p, "lr", 1e-3), b1 = Param(p, "beta1", 0.9);
      const double b2 = Param(p, "beta2", 0.999), eps = Param(p, "eps", 1e-8);
      const double wd = Param(p, "weight_decay", rule == "adamw" ? 1e-2 : 0);
      if (rule == "adamw") {
        w[i] *= 1 - lr * wd;
      } else {
        g += wd * w[i];
      }
      s[0][i] = b1 * s[0][i] + (1 - b1) * g;
      s[1][i] = b2 * s[1][i] + (1 - b2) * g * g;
      double second = s[1][i];
      if (Param(p, "amsgrad", 0)) {
        s[2][i] = std::max(s[2][i], s[1][i]);
        second = s[2][i];
      }
      const double bias1 = 1 - std::pow(b1, t), bias2 = 1 - std::pow(b2, t);
      w[i] -= (lr / bias1) * s[0][i] / (std::sqrt(second) / std::sqrt(bias2) + eps);
    }
  }
}

class OptimizerTest : public ::testing::TestWithParam<Case> {};

// Bit-for-bit equality, NaNs included. Also for rules without state: memcmp on an empty
// vector's data() (null) is undefined behaviour, which UBSan reports.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs 100 steps; the learning rate (if the rule has one) drops by 30% every 25 steps, as a
// worker-driven schedule does. Returns the final weights.
std::vector<float> RunSteps(const Case& c, std::vector<double>* reference) {
  constexpr size_t n = 1003;  // not a multiple of any vector or block size
  constexpr int kSteps = 100;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  absl::StatusOr<AlignedBuffer> weights = AlignedBuffer::Allocate(n);
  EXPECT_OK(weights);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = weights->data()[i] = normal(rng);

  OptimizerParams params = c.params;
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(c.rule, params);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  const int slots = (*optimizer)->state_slots();
  absl::StatusOr<AlignedBuffer> state = AlignedBuffer::Allocate(n * slots);
  std::vector<float*> state_slots;
  for (int k = 0; k < slots; ++k) state_slots.push_back(state->data() + k * n);
  (*optimizer)->InitializeState(state_slots, n);
  std::vector<std::vector<double>> s(slots, std::vector<double>(n));
  for (int k = 0; k < slots; ++k) {
    for (size_t i = 0; i < n; ++i) s[k][i] = state_slots[k][i];
  }

  std::vector<float> g0(n), g1(n);
  std::vector<double> sum(n);
  for (int step = 0; step < kSteps; ++step) {
    if (step > 0 && step % 25 == 0 && params.contains("lr")) {
      params["lr"] *= 0.7;
      optimizer = CreateOptimizer(c.rule, params);
      EXPECT_OK(optimizer);
    }
    for (size_t i = 0; i < n; ++i) {
      g0[i] = normal(rng);
      g1[i] = 0.5f * normal(rng);
      sum[i] = static_cast<double>(g0[i]) + g1[i];
    }
    const float* gradients[] = {g0.data(), g1.data()};
    UpdateArgs args;
    args.weights_in = weights->data();
    args.weights_out = weights->data();
    args.gradients = gradients;
    args.state = state_slots;
    args.size = n;
    args.step = static_cast<uint64_t>(step);
    (*optimizer)->Update(args);
    ReferenceStep(c.rule, params, step + 1, w, s, sum);
  }
  *reference = w;
  return std::vector<float>(weights->data(), weights->data() + n);
}

TEST_P(OptimizerTest, MatchesTheDoublePrecisionReference) {
  std::vector<double> reference;
  const std::vector<float> got = RunSteps(GetParam(), &reference);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], reference[i], 1e-5 * std::max(1.0, std::abs(reference[i])))
        << GetParam().name << " element " << i;
  }
}

TEST_P(OptimizerTest, EverySimdLevelGivesTheSameBits) {
  std::vector<double> reference;
  const SimdLevel best = BestSimdLevel();
  SetActiveSimdLevel(SimdLevel::kBaseline);
  const std::vector<float> baseline = RunSteps(GetParam(), &reference);
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(best)) continue;
    SetActiveSimdLevel(level);
    const std::vector<float> other = RunSteps(GetParam(), &reference);
    ASSERT_TRUE(SameBits(other, baseline)) << GetParam().name << " at " << SimdLevelName(level);
  }
  SetActiveSimdLevel(best);
}

// `bytes` cut into pieces of uneven sizes, some empty, most of whose boundaries fall inside an
// element, as a transport's receive buffers are.
std::vector<absl::Span<const uint8_t>> UnevenPieces(const void* bytes, size_t size) {
  static constexpr size_t kSizes[] = {1, 0, 3, 65301, 7, 1000, 0, 104, 45469, 2};
  std::vector<absl::Span<const uint8_t>> pieces;
  const auto* data = static_cast<const uint8_t*>(bytes);
  for (size_t offset = 0, i = 0; offset < size; ++i) {
    const size_t take = std::min(kSizes[i % std::size(kSizes)], size - offset);
    pieces.emplace_back(data + offset, take);
    offset += take;
  }
  return pieces;
}

// Gradients left in their 16-bit wire formats are widened as the update reads them, and the new
// weights narrowed as it writes them: bit for bit what widening everything first and narrowing
// after gives, for one 16-bit gradient alone, one fp32 gradient and a mix, over several blocks,
// a last partial block, and a range cut in two pieces that are not whole blocks, with an
// infinity, a NaN and a value beyond the 16-bit formats' range among the gradients. The same
// holds with every gradient, fp32 ones too, scattered over uneven pieces that the update gathers.
TEST_P(OptimizerTest, SixteenBitGradientsAndWeightsEqualWideningFirst) {
  constexpr size_t n = 3 * kGradientBlock + 123;
  constexpr size_t cut = kGradientBlock + 1000;
  const std::vector<std::vector<FloatFormat>> mixes = {
      {FloatFormat::kBf16},
      {FloatFormat::kFp16},
      {FloatFormat::kFp32},
      {FloatFormat::kBf16, FloatFormat::kFp32, FloatFormat::kFp16}};
  for (const std::vector<FloatFormat>& formats : mixes) {
    for (const bool scattered : {false, true}) {
      for (FloatFormat pulled : {FloatFormat::kBf16, FloatFormat::kFp16}) {
        absl::StatusOr<std::unique_ptr<Optimizer>> rule =
            CreateOptimizer(GetParam().rule, GetParam().params);
        ASSERT_TRUE(rule.ok()) << rule.status();
        const size_t slots = static_cast<size_t>((*rule)->state_slots());
        std::mt19937 rng(5);
        std::normal_distribution<float> normal;
        // [0]: the fused update, [1]: the reference (fp32 gradients, narrowed afterwards).
        std::vector<float> weights[2], state[2];
        std::vector<float*> state_slots[2];
        for (int k = 0; k < 2; ++k) {
          weights[k].resize(n);
          state[k].resize(n * slots);
          for (size_t s = 0; s < slots; ++s) state_slots[k].push_back(state[k].data() + s * n);
        }
        for (size_t i = 0; i < n; ++i) weights[0][i] = weights[1][i] = normal(rng);
        (*rule)->InitializeState(state_slots[0], n);
        (*rule)->InitializeState(state_slots[1], n);
        std::vector<uint16_t> narrow_out(n), expected_out(n);
        for (uint64_t step = 0; step < 3; ++step) {
          std::vector<std::vector<float>> wide(formats.size(), std::vector<float>(n));
          std::vector<std::vector<uint16_t>> narrow(formats.size(), std::vector<uint16_t>(n));
          std::vector<const float*> fused_gradients, reference_gradients;
          std::vector<StreamedGradient> streamed_gradients;
          std::vector<std::vector<absl::Span<const uint8_t>>> pieces(formats.size());
          for (size_t r = 0; r < formats.size(); ++r) {
            for (size_t i = 0; i < n; ++i) wide[r][i] = normal(rng);
            wide[r][7] = std::numeric_limits<float>::infinity();
            wide[r][kGradientBlock + 5] = std::numeric_limits<float>::quiet_NaN();
            wide[r][n - 2] = -3.4e38f;
            if (formats[r] != FloatFormat::kFp32) {
              ConvertFloats(wide[r].data(), FloatFormat::kFp32, narrow[r].data(), formats[r], n);
              ConvertFloats(narrow[r].data(), formats[r], wide[r].data(), FloatFormat::kFp32, n);
            }
            const bool is_narrow = formats[r] != FloatFormat::kFp32;
            StreamedGradient streamed;
            if (scattered) {
              pieces[r] = is_narrow ? UnevenPieces(narrow[r].data(), n * sizeof(uint16_t))
                                    : UnevenPieces(wide[r].data(), n * sizeof(float));
              streamed.pieces = pieces[r];
              streamed.format = formats[r];
            } else if (is_narrow) {
              streamed = StreamedGradient{narrow[r].data(), formats[r]};
            }
            fused_gradients.push_back(is_narrow || scattered ? nullptr : wide[r].data());
            streamed_gradients.push_back(streamed);
            reference_gradients.push_back(wide[r].data());
          }
          std::vector<float> sums[2] = {std::vector<float>(n), std::vector<float>(n)};
          UpdateArgs args;
          args.weights_in = weights[0].data();
          args.weights_out = weights[0].data();
          args.gradients = fused_gradients;
          args.streamed_gradients = streamed_gradients;
          args.state = state_slots[0];
          args.size = n;
          args.step = step;
          if (formats.size() > 1) args.gradient_sum_out = sums[0].data();
          args.narrow_weights_out = narrow_out.data();
          args.narrow_format = pulled;
          UpdateRange(**rule, args, 0, cut);
          UpdateRange(**rule, args, cut, n);

          UpdateArgs reference = args;
          reference.weights_in = weights[1].data();
          reference.weights_out = weights[1].data();
          reference.gradients = reference_gradients;
          reference.streamed_gradients = {};
          reference.state = state_slots[1];
          if (formats.size() > 1) reference.gradient_sum_out = sums[1].data();
          reference.narrow_weights_out = nullptr;
          (*rule)->Update(reference);
          ConvertFloats(weights[1].data(), FloatFormat::kFp32, expected_out.data(), pulled, n);

          const std::string what = GetParam().name + ", " + std::to_string(formats.size()) +
                                   (scattered ? " scattered" : "") + " gradients, step " +
                                   std::to_string(step);
          ASSERT_TRUE(SameBits(weights[0], weights[1])) << what;
          ASSERT_TRUE(SameBits(state[0], state[1])) << what;
          ASSERT_EQ(narrow_out, expected_out) << what;
          ASSERT_TRUE(SameBits(sums[0], sums[1])) << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, OptimizerTest,
    ::testing::Values(
        Case{"Sgd", "sgd", {{"lr", 0.01}}},
        Case{"SgdMomentumDampeningDecay",
             "sgd",
             {{"lr", 0.01}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.1}}},
        Case{"SgdNesterov",
             "sgd",
             {{"lr", 0.01}, {"momentum", 0.9}, {"nesterov", 1}, {"weight_decay", 0.01}}},
        Case{"SgdMaximize", "sgd", {{"lr", 0.01}, {"maximize", 1}}},
        Case{"Adagrad",
             "adagrad",
             {{"lr", 0.1},
              {"lr_decay", 0.01},
              {"weight_decay", 0.01},
              {"initial_accumulator_value", 0.1}}},
        Case{"Rmsprop", "rmsprop", {{"lr", 0.01}}},
        Case{"RmspropCenteredMomentum",
             "rmsprop",
             {{"lr", 0.01}, {"momentum", 0.9}, {"centered", 1}, {"weight_decay", 0.01}}},
        Case{"RmspropMomentum", "rmsprop", {{"lr", 0.01}, {"momentum", 0.5}, {"alpha", 0.9}}},
        Case{"AdamWeightDecay", "adam", {{"lr", 0.01}, {"weight_decay", 0.01}}},
        Case{
            "AdamAmsgrad", "adam", {{"lr", 0.01}, {"amsgrad", 1}, {"beta1", 0.8}, {"beta2", 0.99}}},
        Case{"AdamW", "adamw", {{"lr", 0.01}, {"weight_decay", 0.1}}},
        Case{"AdamWAmsgradMaximize", "adamw", {{"lr", 0.01}, {"amsgrad", 1}, {"maximize", 1}}},
        Case{"Sum", "sum", {}}),
    [](const auto& info) { return info.param.name; });

TEST(OptimizerDefaultsTest, AreTorchOptimDefaults) {
  auto params = [](const std::string& rule) { return (*CreateOptimizer(rule, {}))->params(); };
  EXPECT_EQ(params("sgd"), (OptimizerParams{{"lr", 1e-3},
                                            {"momentum", 0},
                                            {"dampening", 0},
                                            {"weight_decay", 0},
                                            {"nesterov", 0},
                                            {"maximize", 0}}));
  EXPECT_EQ(params("adagrad").at("lr"), 1e-2);
  EXPECT_EQ(params("adagrad").at("eps"), 1e-10);
  EXPECT_EQ(params("rmsprop").at("alpha"), 0.99);
  EXPECT_EQ(params("rmsprop").at("eps"), 1e-8);
  EXPECT_EQ(params("adam"), (OptimizerParams{{"lr", 1e-3},
                                             {"beta1", 0.9},
                                             {"beta2", 0.999},
                                             {"eps", 1e-8},
                                             {"weight_decay", 0},
                                             {"amsgrad", 0},
                                             {"maximize", 0}}));
  EXPECT_EQ(params("adamw").at("weight_decay"), 1e-2);
  EXPECT_EQ((*CreateOptimizer("adam", {{"amsgrad", 1}}))->state_slots(), 3);
  EXPECT_EQ((*CreateOptimizer("rmsprop", {{"centered", 1}, {"momentum", 0.9}}))->state_slots(), 3);
  EXPECT_EQ((*CreateOptimizer("sgd", {}))->state_slots(), 0);
}

TEST(OptimizerDefaultsTest, AdagradStartsFromItsInitialAccumulator) {
  auto adagrad = CreateOptimizer("adagrad", {{"initial_accumulator_value", 0.25}});
  ASSERT_OK(adagrad);
  std::vector<float> state(10, -1);
  float* slots[] = {state.data()};
  (*adagrad)->InitializeState(slots, state.size());
  for (float v : state) EXPECT_EQ(v, 0.25f);
}

TEST(OptimizerRegistryTest, RefusesUnknownNamesAndBadHyperparameters) {
  auto code = [](const std::string& rule, const OptimizerParams& params) {
    return CreateOptimizer(rule, params).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code("adamax-ultra", {}), kInvalid);
  for (const char* rule : {"sgd", "adagrad", "rmsprop", "adam", "adamw"}) {
    EXPECT_EQ(code(rule, {{"lr", -0.1}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"weight_decay", -1}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"lr", std::nan("")}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"no_such_thing", 1}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"maximize", 0.5}}), kInvalid) << rule;
  }
  for (const char* rule : {"adagrad", "rmsprop", "adam", "adamw"}) {
    EXPECT_EQ(code(rule, {{"eps", 0}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"eps", -1e-8}}), kInvalid) << rule;
  }
  for (const char* rule : {"adam", "adamw"}) {
    EXPECT_EQ(code(rule, {{"beta1", 1.0}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"beta2", -0.1}}), kInvalid) << rule;
    EXPECT_EQ(code(rule, {{"amsgrad", 2}}), kInvalid) << rule;
  }
  EXPECT_EQ(code("sgd", {{"nesterov", 1}}), kInvalid);  // needs momentum
  EXPECT_EQ(code("sgd", {{"nesterov", 1}, {"momentum", 0.9}, {"dampening", 0.1}}), kInvalid);
  EXPECT_EQ(code("sgd", {{"momentum", -0.9}}), kInvalid);
  EXPECT_EQ(code("rmsprop", {{"alpha", -0.5}}), kInvalid);
  EXPECT_EQ(code("adagrad", {{"lr_decay", -1}}), kInvalid);
  EXPECT_EQ(code("sum", {{"lr", 0.1}}), kInvalid);
  absl::Status unknown = CreateOptimizer("sgd", {{"momentun", 0.9}}).status();
  EXPECT_NE(unknown.message().find("momentun"), absl::string_view::npos) << unknown;
}

}  // namespace
}  // namespace hetps
