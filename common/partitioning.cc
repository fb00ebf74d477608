#include "common/partitioning.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace hetps {

uint64_t TensorKeyFromName(absl::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

absl::StatusOr<PartitionLayout> PartitionLayout::Create(uint64_t num_elements,
                                                        uint64_t max_partition_elements) {
  if (num_elements == 0) return absl::InvalidArgumentError("a tensor needs at least one element");
  if (max_partition_elements == 0 || max_partition_elements % kPartitionAlignElements != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("partition size %d elements is not a positive multiple of %d",
                        max_partition_elements, kPartitionAlignElements));
  }
  const uint64_t parts = (num_elements - 1) / max_partition_elements + 1;
  const uint64_t even = (num_elements - 1) / parts + 1;
  const uint64_t chunk = (even + kPartitionAlignElements - 1) / kPartitionAlignElements *
                         kPartitionAlignElements;  // <= max because max is aligned
  const uint64_t count = (num_elements - 1) / chunk + 1;
  if (count > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d elements in partitions of %d make too many partitions", num_elements,
                        max_partition_elements));
  }
  return PartitionLayout(num_elements, max_partition_elements, chunk, static_cast<uint32_t>(count));
}

PartitionRange PartitionLayout::partition(uint32_t index) const {
  const uint64_t begin = static_cast<uint64_t>(index) * chunk_elements_;
  const uint64_t end = std::min(num_elements_, begin + chunk_elements_);
  return PartitionRange{begin, end - begin};
}

uint32_t ShardOfPartition(uint64_t tensor_key, uint32_t partition, uint32_t num_shards) {
  return static_cast<uint32_t>((Mix64(tensor_key) % num_shards + partition) % num_shards);
}

ShardShare ShareOfShard(const PartitionLayout& layout, uint64_t tensor_key, uint32_t num_shards,
                        uint32_t shard) {
  // Partition p is on shard (start + p) mod S: those of `shard` are first, first + S, ...
  const uint32_t start = static_cast<uint32_t>(Mix64(tensor_key) % num_shards);
  ShardShare share;
  share.first_partition = (shard + num_shards - start) % num_shards;
  const uint32_t total = layout.num_partitions();
  if (share.first_partition >= total) return share;
  share.partitions = (total - 1 - share.first_partition) / num_shards + 1;
  // All partitions but the last are full.
  const uint32_t last = share.first_partition + (share.partitions - 1) * num_shards;
  share.elements = static_cast<uint64_t>(share.partitions - 1) * layout.partition(0).size +
                   layout.partition(last).size;
  return share;
}

}  // namespace hetps
