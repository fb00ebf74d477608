// Initial weights: spread over a thread pool they are the same bits as on one thread, and each
// element's value depends only on its index in the tensor (so every shard, and every split of
// the work, computes the same weights).
#include "server/initializer.h"

#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "gtest/gtest.h"

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
      SCOPED_TRACE(testing::Message() << "kind " << init.kind() << ", elements " << range.begin
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
    SCOPED_TRACE(testing::Message() << "kind " << kind);
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

}  // namespace
}  // namespace hetps::server
