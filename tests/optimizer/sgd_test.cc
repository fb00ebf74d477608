#include <cmath>
#include <random>
#include <vector>

#include "common/aligned_buffer.h"
#include "gtest/gtest.h"
#include "optimizer/registry.h"

namespace hetps {
namespace {

std::unique_ptr<Optimizer> MakeSgd(const OptimizerParams& params) {
  absl::StatusOr<std::unique_ptr<Optimizer>> sgd = CreateOptimizer("sgd", params);
  EXPECT_TRUE(sgd.ok()) << sgd.status();
  return sgd.ok() ? *std::move(sgd) : nullptr;
}

// torch.optim.SGD without momentum, written from its documentation in double precision:
//   g = sum of gradients + weight_decay * w;  w = w - lr * g
TEST(SgdTest, MatchesTheReferenceOverManySteps) {
  const size_t n = 10007;  // not a multiple of any block or vector size
  const int workers = 3;
  const double lr = 0.05, weight_decay = 0.01;
  std::unique_ptr<Optimizer> sgd = MakeSgd({{"lr", lr}, {"weight_decay", weight_decay}});
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->state_slots(), 0);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  absl::StatusOr<AlignedBuffer> weights = AlignedBuffer::Allocate(n);
  ASSERT_TRUE(weights.ok());
  std::vector<double> reference(n);
  for (size_t i = 0; i < n; ++i) reference[i] = (*weights).data()[i] = normal(rng);

  std::vector<std::vector<float>> grads(workers, std::vector<float>(n));
  for (int step = 0; step < 100; ++step) {
    for (auto& g : grads) {
      for (float& v : g) v = normal(rng);
    }
    const float* pointers[] = {grads[0].data(), grads[1].data(), grads[2].data()};
    UpdateArgs args;
    args.weights_in = weights->data();
    args.weights_out = weights->data();
    args.gradients = pointers;
    args.size = n;
    args.step = static_cast<uint64_t>(step);
    sgd->Update(args);
    for (size_t i = 0; i < n; ++i) {
      double g = 0;
      for (int r = 0; r < workers; ++r) g += grads[r][i];
      reference[i] -= lr * (g + weight_decay * reference[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(weights->data()[i], reference[i], 1e-5 * std::max(1.0, std::abs(reference[i])))
        << i;
  }
}

TEST(SgdTest, OutOfPlaceUpdateLeavesTheInputAlone) {
  std::unique_ptr<Optimizer> sgd = MakeSgd({{"lr", 0.5}});
  std::vector<float> in = {1, 2, 3}, out(3), grad = {2, 2, 2};
  const float* pointers[] = {grad.data()};
  UpdateArgs args;
  args.weights_in = in.data();
  args.weights_out = out.data();
  args.gradients = pointers;
  args.size = 3;
  sgd->Update(args);
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2}));
}

TEST(SgdTest, GradientsAreSummedInTheGivenOrder) {
  // With these values float addition is not associative: the order shows in the result.
  std::unique_ptr<Optimizer> sgd = MakeSgd({{"lr", 1.0}});
  std::vector<float> a = {1e8f}, b = {1.0f}, c = {-1e8f};
  auto run = [&](std::vector<const float*> order) {
    float w = 0;
    UpdateArgs args;
    args.weights_in = &w;
    args.weights_out = &w;
    args.gradients = order;
    args.size = 1;
    sgd->Update(args);
    return w;
  };
  EXPECT_EQ(run({a.data(), b.data(), c.data()}), -((1e8f + 1.0f) + -1e8f));
  EXPECT_EQ(run({a.data(), c.data(), b.data()}), -((1e8f + -1e8f) + 1.0f));
}

TEST(OptimizerRegistryTest, RefusesUnknownNamesAndBadHyperparameters) {
  EXPECT_EQ(CreateOptimizer("adamax-ultra", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer("sgd", {{"lr", -0.1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer("sgd", {{"weight_decay", -1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateOptimizer("sgd", {{"lr", std::nan("")}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status unknown = CreateOptimizer("sgd", {{"momentum", 0.9}}).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("momentum"), absl::string_view::npos);
  EXPECT_TRUE(CreateOptimizer("sgd", {}).ok());
}

}  // namespace
}  // namespace hetps
