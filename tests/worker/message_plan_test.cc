#include "worker/internal/message_plan.h"

#include <vector>

#include "gtest/gtest.h"

namespace hetps::internal {
namespace {

Piece PieceOf(uint32_t partition, size_t bytes) {
  Piece piece;
  piece.partition = partition;
  piece.bytes = bytes;
  return piece;
}

// Partitions of each message, in order.
std::vector<std::vector<uint32_t>> Layout(const std::vector<PlannedMessage>& messages) {
  std::vector<std::vector<uint32_t>> layout;
  for (const PlannedMessage& message : messages) {
    layout.emplace_back();
    for (const Piece& piece : message.pieces) layout.back().push_back(piece.partition);
  }
  return layout;
}

TEST(MessagePlanTest, SmallPiecesShareMessagesUpToTheLimit) {
  std::vector<std::vector<Piece>> pieces(1);
  for (uint32_t i = 0; i < 5; ++i) pieces[0].push_back(PieceOf(i, 40 << 10));
  EXPECT_EQ(Layout(PackMessages(pieces, 100 << 10)),
            (std::vector<std::vector<uint32_t>>{{0, 1}, {2, 3}, {4}}));
}

TEST(MessagePlanTest, LargePiecesTravelAloneSoTheyMoveWithoutCopies) {
  std::vector<std::vector<Piece>> pieces(1);
  pieces[0] = {PieceOf(0, kPieceAloneBytes),
               PieceOf(1, kPieceAloneBytes),
               PieceOf(2, 1024),
               PieceOf(3, 1024),
               PieceOf(4, 2 * kPieceAloneBytes),
               PieceOf(5, 1024)};
  EXPECT_EQ(Layout(PackMessages(pieces, 4 << 20)),
            (std::vector<std::vector<uint32_t>>{{0}, {1}, {2, 3}, {4}, {5}}));
}

TEST(MessagePlanTest, MessagesAlternateOverTheShards) {
  std::vector<std::vector<Piece>> pieces(2);
  pieces[0] = {PieceOf(0, 1 << 20), PieceOf(2, 1 << 20)};
  pieces[1] = {PieceOf(1, 1 << 20)};
  const std::vector<PlannedMessage> messages = PackMessages(pieces, 4 << 20);
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0].shard, 0u);
  EXPECT_EQ(messages[1].shard, 1u);
  EXPECT_EQ(messages[2].shard, 0u);
  EXPECT_EQ(Layout(messages), (std::vector<std::vector<uint32_t>>{{0}, {1}, {2}}));
}

}  // namespace
}  // namespace hetps::internal
