// Initial weights: spread over a thread pool, or computed at any SIMD level, they are the same
// bits as on one thread; each element's value depends only on its index in the tensor (so every
// shard, and every split of the work, computes the same weights); the draws have the
// distribution asked for, and the polynomials behind them agree with the C library.
#include "server/initializer.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/simd.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "server/random_draws.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

hetps::v1::Initializer Init(hetps::v1::InitKind kind, double a, double b) {
  hetps::v1::Initializer init;
  init.set_kind(kind);
  init.set_a(a);
  init.set_b(b);
  init.set_seed(42);
  return init;
}

std::vector<float> Values(const AlignedBuffer& buffer) {
  return std::vector<float>(buffer.data(), buffer.data() + buffer.size());
}

TEST(InitialWeightsTest, SpreadOverAPoolTheyAreTheBitsOfOneThread) {
  ThreadPool pool(3, "init-test");
  const hetps::v1::Initializer inits[] = {
      Init(hetps::v1::INIT_KIND_NORMAL, 0.5, 0.02), Init(hetps::v1::INIT_KIND_UNIFORM, -1, 3),
      Init(hetps::v1::INIT_KIND_CONSTANT, 0.25, 0), Init(hetps::v1::INIT_KIND_VALUES, 0, 0)};
  // Large enough to be spread, with and without a whole number of cache lines, at offsets.
  const PartitionRange ranges[] = {{0, 1 << 18}, {12345, (1 << 18) + 7}, {3, (1 << 19) + 1}};
  for (const hetps::v1::Initializer& init : inits) {
    for (const PartitionRange& range : ranges) {
      SCOPED_TRACE(::testing::Message() << "kind " << init.kind() << ", elements " << range.begin
                                        << "..+" << range.size);
      absl::StatusOr<AlignedBuffer> alone = InitialWeights(init, range, nullptr);
      absl::StatusOr<AlignedBuffer> spread = InitialWeights(init, range, &pool);
      ASSERT_TRUE(alone.ok()) << alone.status();
      ASSERT_TRUE(spread.ok()) << spread.status();
      ASSERT_EQ(spread->size(), range.size);
      EXPECT_EQ(std::memcmp(alone->data(), spread->data(), alone->size_bytes()), 0);
    }
  }
}

TEST(InitialWeightsTest, AnElementsValueDependsOnlyOnItsIndexInTheTensor) {
  ThreadPool pool(2, "init-test");
  for (const auto kind : {hetps::v1::INIT_KIND_NORMAL, hetps::v1::INIT_KIND_UNIFORM}) {
    SCOPED_TRACE(::testing::Message() << "kind " << kind);
    const hetps::v1::Initializer init = Init(kind, 0, 1);
    // One partition of 2^19 elements, and the same elements as two partitions cut unevenly.
    absl::StatusOr<AlignedBuffer> whole = InitialWeights(init, {1000, 1 << 19}, &pool);
    absl::StatusOr<AlignedBuffer> first = InitialWeights(init, {1000, 300001}, &pool);
    absl::StatusOr<AlignedBuffer> second =
        InitialWeights(init, {1000 + 300001, (1 << 19) - 300001}, nullptr);
    ASSERT_TRUE(whole.ok() && first.ok() && second.ok());
    std::vector<float> joined = Values(*first);
    const std::vector<float> rest = Values(*second);
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, Values(*whole));
    // Random, not one value repeated.
    EXPECT_NE(joined[0], joined[1]);
    EXPECT_NE(joined[300000], joined[300001]);
  }
}

TEST(InitialWeightsTest, EverySimdLevelDrawsTheSameBits) {
  const SimdLevel best = BestSimdLevel();
  for (const auto kind : {hetps::v1::INIT_KIND_NORMAL, hetps::v1::INIT_KIND_UNIFORM}) {
    const hetps::v1::Initializer init = Init(kind, 0.25, 3);
    SetActiveSimdLevel(SimdLevel::kBaseline);
    absl::StatusOr<AlignedBuffer> baseline = InitialWeights(init, {7, 100003});
    ASSERT_OK(baseline);
    for (int level = 1; level <= static_cast<int>(best); ++level) {
      SetActiveSimdLevel(static_cast<SimdLevel>(level));
      absl::StatusOr<AlignedBuffer> vectorised = InitialWeights(init, {7, 100003});
      ASSERT_OK(vectorised);
      EXPECT_EQ(std::memcmp(baseline->data(), vectorised->data(), baseline->size_bytes()), 0)
          << "kind " << kind << ", level " << SimdLevelName(static_cast<SimdLevel>(level));
    }
  }
  SetActiveSimdLevel(best);
}

// Sample moments of a million draws, each within about 7 standard errors of the exact ones.
TEST(InitialWeightsTest, NormalDrawsHaveTheMomentsOfANormal) {
  constexpr double kMean = 0.5, kStddev = 2;
  constexpr size_t kCount = size_t{1} << 20;
  absl::StatusOr<AlignedBuffer> weights =
      InitialWeights(Init(hetps::v1::INIT_KIND_NORMAL, kMean, kStddev), {1, kCount});
  ASSERT_OK(weights);
  std::vector<double> z(kCount);
  for (size_t i = 0; i < kCount; ++i) z[i] = (weights->data()[i] - kMean) / kStddev;
  double sum = 0, sum2 = 0, sum3 = 0, sum4 = 0, lag1 = 0, lag2 = 0;
  size_t within[3] = {0, 0, 0};
  for (size_t i = 0; i < kCount; ++i) {
    sum += z[i];
    sum2 += z[i] * z[i];
    sum3 += z[i] * z[i] * z[i];
    sum4 += z[i] * z[i] * z[i] * z[i];
    if (i + 1 < kCount) lag1 += z[i] * z[i + 1];
    if (i + 2 < kCount) lag2 += z[i] * z[i + 2];
    for (int k = 0; k < 3; ++k) within[k] += std::abs(z[i]) < k + 1 ? 1 : 0;
  }
  const double n = kCount;
  EXPECT_NEAR(sum / n, 0, 0.007);
  EXPECT_NEAR(sum2 / n, 1, 0.01);
  EXPECT_NEAR(sum3 / n, 0, 0.017);  // skewness
  EXPECT_NEAR(sum4 / n, 3, 0.034);  // kurtosis
  // Neighbours (one pair's cos and sin, or two pairs) are uncorrelated.
  EXPECT_NEAR(lag1 / n, 0, 0.007);
  EXPECT_NEAR(lag2 / n, 0, 0.007);
  EXPECT_NEAR(within[0] / n, 0.682689, 0.0032);
  EXPECT_NEAR(within[1] / n, 0.954500, 0.0015);
  EXPECT_NEAR(within[2] / n, 0.997300, 0.00036);
}

TEST(InitialWeightsTest, UniformDrawsFillTheirInterval) {
  constexpr double kLow = -1, kHigh = 3;
  constexpr size_t kCount = size_t{1} << 20;
  absl::StatusOr<AlignedBuffer> weights =
      InitialWeights(Init(hetps::v1::INIT_KIND_UNIFORM, kLow, kHigh), {5, kCount});
  ASSERT_OK(weights);
  double sum = 0, sum2 = 0;
  size_t quarters[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < kCount; ++i) {
    const double x = weights->data()[i];
    ASSERT_GE(x, kLow);
    ASSERT_LT(x, kHigh);
    sum += x;
    sum2 += x * x;
    ++quarters[static_cast<int>((x - kLow) / (kHigh - kLow) * 4)];
  }
  const double n = kCount, mean = sum / n;
  EXPECT_NEAR(mean, 1, 0.008);
  EXPECT_NEAR(sum2 / n - mean * mean, 16.0 / 12, 0.008);
  for (size_t quarter : quarters) EXPECT_NEAR(quarter / n, 0.25, 0.003);
}

// The normal draw is Box-Muller on the pair's uniforms: the same value as the C library's log,
// sqrt, cos and sin give, to well below a float's precision.
TEST(RandomDrawsTest, ANormalDrawIsBoxMullerOfItsPairsUniforms) {
  for (uint64_t index = 0; index < 200000; ++index) {
    const uint64_t pair = index / 2;
    const double r = std::sqrt(-2 * std::log(1 - UniformAt(9, 2 * pair)));
    const double angle = 2 * M_PI * UniformAt(9, 2 * pair + 1);
    const double expected = r * (index % 2 == 0 ? std::cos(angle) : std::sin(angle));
    ASSERT_NEAR(StandardNormalAt(9, index), expected, 1e-12 * std::max(1.0, r)) << index;
  }
}

TEST(RandomDrawsTest, LogAndCosineAgreeWithTheCLibraryEverywhere) {
  std::vector<double> points = {0x1.0p-53,
                                0x1.0p-1022,
                                0.5,
                                1,
                                std::nextafter(1.0, 0.0),
                                M_SQRT1_2,
                                std::nextafter(M_SQRT1_2, 1.0),
                                0.75,
                                1e-300};
  for (uint64_t i = 1; i < 100000; ++i) points.push_back(UniformAt(3, i) + 0x1.0p-54);
  for (double u : points) {
    ASSERT_NEAR(LogOfUnitInterval(u), std::log(u), 1e-14 * std::max(1.0, std::abs(std::log(u))))
        << u;
  }
  constexpr uint64_t kTurn = uint64_t{1} << 53;
  std::vector<uint64_t> turns = {0,
                                 1,
                                 kTurn / 8,
                                 kTurn / 8 - 1,
                                 kTurn / 4,
                                 kTurn / 2 + 1,
                                 kTurn * 3 / 8,
                                 kTurn * 5 / 8 + 1,
                                 kTurn * 7 / 8,
                                 kTurn - 1};
  for (uint64_t i = 0; i < 100000; ++i) turns.push_back(UniformBits(4, i));
  for (uint64_t bits : turns) {
    const double angle = 2 * M_PI * std::ldexp(static_cast<double>(bits), -53);
    ASSERT_NEAR(CosOfTurn(bits), std::cos(angle), 1e-14) << bits;
  }
}

TEST(RandomDrawsTest, IntegersBecomeDoublesExactly) {
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, (uint64_t{1} << 52) - 1}) {
    EXPECT_EQ(SmallIntegerAsDouble(n), static_cast<double>(n)) << n;
  }
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(UniformAt(1, i), static_cast<double>(UniformBits(1, i)) * 0x1.0p-53) << i;
  }
}

}  // namespace
}  // namespace hetps::server
