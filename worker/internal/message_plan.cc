#include "worker/internal/message_plan.h"

#include <utility>

namespace hetps::internal {

std::vector<PlannedMessage> PackMessages(std::vector<std::vector<Piece>> pieces_by_shard,
                                         size_t max_bytes) {
  std::vector<std::vector<PlannedMessage>> by_shard(pieces_by_shard.size());
  for (uint32_t shard = 0; shard < pieces_by_shard.size(); ++shard) {
    std::vector<PlannedMessage>& messages = by_shard[shard];
    bool last_takes_more = false;  // whether the last message may take more pieces
    for (Piece& piece : pieces_by_shard[shard]) {
      const bool alone = piece.bytes >= kPieceAloneBytes;
      const bool fits = last_takes_more && !alone &&
                        messages.back().bytes + piece.bytes <= max_bytes &&
                        messages.back().pieces.size() < kMaxItemsPerMessage;
      last_takes_more = !alone;
      if (!fits) messages.push_back(PlannedMessage{shard, 0, {}});
      messages.back().bytes += piece.bytes;
      messages.back().pieces.push_back(piece);
    }
  }
  std::vector<PlannedMessage> ordered;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (std::vector<PlannedMessage>& messages : by_shard) {
      if (round >= messages.size()) continue;
      ordered.push_back(std::move(messages[round]));
      any = true;
    }
    if (!any) break;
  }
  return ordered;
}

}  // namespace hetps::internal
