// Planning the messages of one push or pull: each tensor is cut into its partitions, each
// partition goes to its shard (common/partitioning.h), and the partitions bound for one shard
// are packed into messages of at most `max_bytes` payload bytes and kMaxItemsPerMessage items
// (a partition larger than max_bytes, which cannot happen with the client's own layout, would
// travel alone). A piece of kPieceAloneBytes or more travels alone too. Messages are ordered
// round-robin over the shards so all shards start early.
#ifndef HETPS_WORKER_INTERNAL_MESSAGE_PLAN_H_
#define HETPS_WORKER_INTERNAL_MESSAGE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/half.h"

namespace hetps::internal {

inline constexpr size_t kMaxItemsPerMessage = 4096;
// Packing saves per-message costs, which matter for small pieces only. A large piece in a message
// of its own is one buffer on both sides, which a transport can move without copies (UCX's
// rendezvous reads one contiguous buffer directly, where several pieces go through its
// shared-memory FIFO): e.g. two 2 MiB bf16 partitions were 1.8x slower packed together.
inline constexpr size_t kPieceAloneBytes = 256 << 10;

// One partition's share of a push or pull.
struct Piece {
  uint64_t tensor_key = 0;
  uint32_t partition = 0;
  size_t elements = 0;
  // What it adds to the request or to the response, whichever is more (for packing).
  size_t bytes = 0;
  // Push: the caller's values for this partition, their format, and the format on the wire.
  const void* gradient = nullptr;
  FloatFormat gradient_format = FloatFormat::kFp32;
  FloatFormat push_format = FloatFormat::kFp32;
  // Pull: where the partition's weights go, in which format, and the format on the wire.
  void* weights = nullptr;
  FloatFormat weights_format = FloatFormat::kFp32;
  FloatFormat pull_format = FloatFormat::kFp32;
};

struct PlannedMessage {
  uint32_t shard = 0;
  size_t bytes = 0;
  std::vector<Piece> pieces;
};

// REQUIRES: pieces_by_shard.size() is the number of shards.
std::vector<PlannedMessage> PackMessages(std::vector<std::vector<Piece>> pieces_by_shard,
                                         size_t max_bytes);

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_MESSAGE_PLAN_H_
