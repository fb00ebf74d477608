#include "bench/latency.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace hetps::bench {
namespace {

TEST(LatencySamplesTest, NearestRankPercentilesOfOneToHundred) {
  LatencySamples samples;
  for (int v = 100; v >= 1; --v) samples.Add(v);  // any order
  EXPECT_EQ(samples.count(), 100u);
  EXPECT_EQ(samples.Percentile(50), 50);
  EXPECT_EQ(samples.Percentile(90), 90);
  EXPECT_EQ(samples.Percentile(99), 99);
  EXPECT_EQ(samples.Percentile(99.9), 100);
  EXPECT_EQ(samples.Percentile(100), 100);
  EXPECT_EQ(samples.Percentile(0.5), 1);
  EXPECT_EQ(samples.Max(), 100);
  EXPECT_DOUBLE_EQ(samples.MeanNanoseconds(), 50.5);
}

TEST(LatencySamplesTest, SmallCountsAndTies) {
  LatencySamples one;
  one.Add(7);
  EXPECT_EQ(one.Percentile(50), 7);
  EXPECT_EQ(one.Percentile(99.9), 7);
  LatencySamples ten;
  for (int v : {5, 1, 9, 9, 3, 7, 2, 8, 4, 6}) ten.Add(v);
  // Sorted: 1 2 3 4 5 6 7 8 9 9. ceil(0.5 * 10) = 5th -> 5; ceil(0.9 * 10) = 9th -> 9.
  EXPECT_EQ(ten.Percentile(50), 5);
  EXPECT_EQ(ten.Percentile(90), 9);
  EXPECT_EQ(ten.Percentile(99), 9);
  EXPECT_EQ(ten.Percentile(10), 1);
  EXPECT_EQ(ten.Percentile(11), 2);
}

TEST(LatencySamplesTest, MatchesSortedReferenceAndKeepsEverySample) {
  std::mt19937_64 rng(9);
  std::lognormal_distribution<double> latency(10, 1.5);
  LatencySamples a, b;
  std::vector<int64_t> all;
  for (int i = 0; i < 12345; ++i) {
    const int64_t v = static_cast<int64_t>(latency(rng));
    (i % 3 ? a : b).Add(v);
    all.push_back(v);
  }
  a.Merge(b);
  std::sort(all.begin(), all.end());
  for (double p : {1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) {
    const size_t rank = static_cast<size_t>(std::ceil(p / 100 * all.size()));
    EXPECT_EQ(a.Percentile(p), all[rank - 1]) << p;
  }
  EXPECT_EQ(a.Max(), all.back());
  a.Add(all.back() + 1);  // adding after a query keeps working
  EXPECT_EQ(a.Max(), all.back() + 1);
}

}  // namespace
}  // namespace hetps::bench
