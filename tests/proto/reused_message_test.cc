#include "proto/reused_message.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace hetps {
namespace {

using hetps::v1::PushRequest;

void AddItems(PushRequest& request, int count) {
  for (int i = 0; i < count; ++i) {
    hetps::v1::PartitionItem* item = request.add_items();
    item->set_tensor_key(0x1234567890abcdef + i);
    item->set_num_bytes(4096);
  }
}

// Whatever the last use left, the next handle starts from an empty message.
TEST(ReusedMessageTest, EveryHandleStartsEmpty) {
  {
    ReusedMessage<PushRequest> first;
    first->set_step(5);
    AddItems(*first, 3);
  }
  ReusedMessage<PushRequest> second;
  EXPECT_EQ(second->step(), 0u);
  EXPECT_EQ(second->items_size(), 0);
  PushRequest parsed;
  parsed.set_step(7);
  AddItems(parsed, 1);
  ASSERT_TRUE(second->ParseFromString(parsed.SerializeAsString()));
  EXPECT_EQ(second->step(), 7u);
  ASSERT_EQ(second->items_size(), 1);
  EXPECT_EQ(second->items(0).num_bytes(), 4096u);
}

TEST(ReusedMessageTest, TheThreadsMessageIsUsedAgain) {
  const PushRequest* used = nullptr;
  {
    ReusedMessage<PushRequest> first;
    used = &*first;
  }
  ReusedMessage<PushRequest> second;
  EXPECT_EQ(&*second, used);
}

// A handle taken while another of the same type lives (a nested use) gets its own message.
TEST(ReusedMessageTest, HandlesAliveAtOnceAreDistinctMessages) {
  ReusedMessage<PushRequest> outer;
  outer->set_step(1);
  {
    ReusedMessage<PushRequest> inner;
    EXPECT_NE(&*inner, &*outer);
    inner->set_step(2);
  }
  EXPECT_EQ(outer->step(), 1u);
}

// A message that grew large is not kept by the thread.
TEST(ReusedMessageTest, ALargeMessageIsReleasedAfterUse) {
  {
    ReusedMessage<PushRequest> large;
    AddItems(*large, 2000);
  }
  ReusedMessage<PushRequest> next;
  EXPECT_LT(next->SpaceUsedLong(), 2000 * sizeof(hetps::v1::PartitionItem) / 2);
}

}  // namespace
}  // namespace hetps
