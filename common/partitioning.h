// The deterministic functions every worker and every shard computes alike, so that nobody has to
// ask anyone where a piece of a tensor lives:
//
//   key       = TensorKeyFromName(name)                     FNV-1a 64 of the name's bytes
//   layout    = PartitionLayout::Create(n, max_elements)    how a tensor of n elements is cut
//   shard     = ShardOfPartition(key, p, num_shards)        (Mix64(key) mod S + p) mod S
//
// Partitions are near-equal: a tensor of n elements with at most m elements per partition is cut
// into k = ceil(n / m) partitions of c = ceil(n / k) elements rounded up to a multiple of
// kPartitionAlignElements (the last one takes what is left). Consecutive partitions of one
// tensor go to consecutive shards, starting at a shard chosen by the key's hash, so a large
// tensor is spread within one partition of even and small tensors scatter across shards.
#ifndef HETPS_COMMON_PARTITIONING_H_
#define HETPS_COMMON_PARTITIONING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps {

// Partition sizes are multiples of 16 elements (64 bytes of fp32) so every partition starts on a
// cache line and SIMD kernels need no unaligned head.
inline constexpr uint64_t kPartitionAlignElements = 16;

uint64_t TensorKeyFromName(absl::string_view name);

// A well-mixed 64-bit hash of `x` (the splitmix64 finalizer). Inline: the initializer's
// vectorised loops (server/initializer.cc) call it per element.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct PartitionRange {
  uint64_t begin = 0;  // first element
  uint64_t size = 0;   // number of elements
};

class PartitionLayout {
 public:
  // REQUIRES nothing: bad arguments give InvalidArgument (num_elements == 0, max_partition_elements
  // not a positive multiple of kPartitionAlignElements, or more than 2^32 - 1 partitions).
  static absl::StatusOr<PartitionLayout> Create(uint64_t num_elements,
                                                uint64_t max_partition_elements);

  uint64_t num_elements() const { return num_elements_; }
  uint64_t max_partition_elements() const { return max_partition_elements_; }
  uint32_t num_partitions() const { return num_partitions_; }
  // REQUIRES: index < num_partitions().
  PartitionRange partition(uint32_t index) const;

 private:
  PartitionLayout(uint64_t num_elements, uint64_t max_partition_elements, uint64_t chunk,
                  uint32_t num_partitions)
      : num_elements_(num_elements),
        max_partition_elements_(max_partition_elements),
        chunk_elements_(chunk),
        num_partitions_(num_partitions) {}

  uint64_t num_elements_;
  uint64_t max_partition_elements_;
  uint64_t chunk_elements_;
  uint32_t num_partitions_;
};

// REQUIRES: num_shards > 0.
uint32_t ShardOfPartition(uint64_t tensor_key, uint32_t partition, uint32_t num_shards);

// What shard `shard` holds of a tensor, computed without visiting the partitions (a hostile
// declaration may ask for billions of them). REQUIRES: shard < num_shards.
struct ShardShare {
  uint32_t first_partition = 0;  // the lowest index it holds (meaningless if partitions == 0)
  uint32_t partitions = 0;       // it holds first_partition, + num_shards, + 2 * num_shards, ...
  uint64_t elements = 0;
};
ShardShare ShareOfShard(const PartitionLayout& layout, uint64_t tensor_key, uint32_t num_shards,
                        uint32_t shard);

}  // namespace hetps

#endif  // HETPS_COMMON_PARTITIONING_H_
