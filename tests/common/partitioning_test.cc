#include "common/partitioning.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"

namespace hetps {
namespace {

TEST(TensorKeyTest, IsFnv1a64OfTheName) {
  // Reference values of FNV-1a 64.
  EXPECT_EQ(TensorKeyFromName(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(TensorKeyFromName("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(TensorKeyFromName("layer1.weight"), TensorKeyFromName("layer1.bias"));
}

TEST(PartitionLayoutTest, CoversEveryElementOnceWithAlignedStarts) {
  for (uint64_t n : {1ull, 15ull, 16ull, 17ull, 1000ull, 4096ull, 4097ull, 1234567ull}) {
    for (uint64_t max : {16ull, 64ull, 1024ull, 1ull << 20}) {
      absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(n, max);
      ASSERT_TRUE(layout.ok()) << layout.status();
      uint64_t next = 0;
      for (uint32_t p = 0; p < layout->num_partitions(); ++p) {
        const PartitionRange range = layout->partition(p);
        EXPECT_EQ(range.begin, next) << n << " " << max << " " << p;
        EXPECT_GT(range.size, 0u);
        EXPECT_LE(range.size, max);
        EXPECT_EQ(range.begin % kPartitionAlignElements, 0u);
        next += range.size;
      }
      EXPECT_EQ(next, n) << n << " " << max;
      EXPECT_EQ(layout->num_partitions(), (n - 1) / max + 1) << n << " " << max;
    }
  }
}

// The closed form a shard sizes a declaration with agrees with visiting every partition.
TEST(ShareOfShardTest, EqualsCountingPartitionByPartition) {
  for (uint64_t n : {1ull, 17ull, 1000ull, 4097ull, 1234567ull}) {
    for (uint64_t max : {16ull, 64ull, 1024ull}) {
      absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(n, max);
      ASSERT_TRUE(layout.ok()) << layout.status();
      for (uint32_t shards : {1u, 2u, 3u, 7u, 100u}) {
        for (uint64_t key : {uint64_t{1}, uint64_t{0xdeadbeef}, TensorKeyFromName("w")}) {
          uint64_t total = 0;
          for (uint32_t shard = 0; shard < shards; ++shard) {
            std::vector<uint32_t> owned;
            uint64_t elements = 0;
            for (uint32_t p = 0; p < layout->num_partitions(); ++p) {
              if (ShardOfPartition(key, p, shards) != shard) continue;
              owned.push_back(p);
              elements += layout->partition(p).size;
            }
            const ShardShare share = ShareOfShard(*layout, key, shards, shard);
            ASSERT_EQ(share.partitions, owned.size()) << n << " " << max << " " << shards;
            ASSERT_EQ(share.elements, elements) << n << " " << max << " " << shards;
            if (!owned.empty()) {
              ASSERT_EQ(share.first_partition, owned[0]);
            }
            total += share.elements;
          }
          EXPECT_EQ(total, n);
        }
      }
    }
  }
  // Four billion partitions are sized at once.
  absl::StatusOr<PartitionLayout> huge = PartitionLayout::Create(uint64_t{16} << 32, 16);
  ASSERT_FALSE(huge.ok());  // 2^32 partitions: one too many
  huge = PartitionLayout::Create((uint64_t{1} << 36) - 16, 16);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(ShareOfShard(*huge, 5, 1, 0).elements, (uint64_t{1} << 36) - 16);
}

TEST(PartitionLayoutTest, PartitionsAreNearlyEqual) {
  // 1.1 partitions' worth is cut into two halves, not a full one and a sliver.
  absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(1100, 1008);
  ASSERT_OK(layout);
  ASSERT_EQ(layout->num_partitions(), 2u);
  EXPECT_EQ(layout->partition(0).size, 560u);
  EXPECT_EQ(layout->partition(1).size, 540u);
}

TEST(PartitionLayoutTest, SmallerThanOnePartition) {
  absl::StatusOr<PartitionLayout> layout = PartitionLayout::Create(3, 1 << 20);
  ASSERT_OK(layout);
  ASSERT_EQ(layout->num_partitions(), 1u);
  EXPECT_EQ(layout->partition(0).begin, 0u);
  EXPECT_EQ(layout->partition(0).size, 3u);
}

TEST(PartitionLayoutTest, RefusesBadArguments) {
  EXPECT_EQ(PartitionLayout::Create(0, 16).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayout::Create(10, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayout::Create(10, 24).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionLayout::Create(1ull << 40, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementTest, IsDeterministic) {
  for (uint32_t p = 0; p < 100; ++p) {
    EXPECT_EQ(ShardOfPartition(12345, p, 7), ShardOfPartition(12345, p, 7));
  }
  // Pinned values: a change here changes where every existing job's data lives.
  EXPECT_EQ(ShardOfPartition(TensorKeyFromName("w"), 0, 4),
            (Mix64(TensorKeyFromName("w")) % 4 + 0) % 4);
}

TEST(PlacementTest, LargeTensorIsSpreadEvenly) {
  for (uint32_t shards : {1u, 2u, 3u, 5u, 8u}) {
    std::vector<int> count(shards, 0);
    const uint32_t partitions = 1001;
    for (uint32_t p = 0; p < partitions; ++p) ++count[ShardOfPartition(987654321, p, shards)];
    for (int c : count) {
      EXPECT_GE(c, static_cast<int>(partitions / shards));
      EXPECT_LE(c, static_cast<int>(partitions / shards + 1));
    }
  }
}

TEST(PlacementTest, ManySmallTensorsScatterAcrossShards) {
  const uint32_t shards = 4;
  std::vector<int> count(shards, 0);
  for (int t = 0; t < 4000; ++t) {
    ++count[ShardOfPartition(TensorKeyFromName(absl::StrCat("tensor", t)), 0, shards)];
  }
  for (int c : count) {
    EXPECT_GT(c, 850);  // expectation 1000 each
    EXPECT_LT(c, 1150);
  }
}

}  // namespace
}  // namespace hetps
