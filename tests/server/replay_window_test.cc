#include "server/replay_window.h"

#include "gtest/gtest.h"

namespace hetps::server {
namespace {

bool Accept(ReplayWindow& window, uint64_t sequence) {
  if (!window.IsNew(sequence)) return false;
  window.Mark(sequence);
  return true;
}

TEST(ReplayWindowTest, AcceptsEachNumberOnceInAnyOrder) {
  ReplayWindow window;
  EXPECT_TRUE(Accept(window, 10));
  EXPECT_TRUE(Accept(window, 12));
  EXPECT_TRUE(Accept(window, 11));  // overtaken by 12, still new
  EXPECT_FALSE(Accept(window, 11));
  EXPECT_FALSE(Accept(window, 12));
  EXPECT_FALSE(Accept(window, 10));
  EXPECT_TRUE(Accept(window, 9));
  EXPECT_FALSE(Accept(window, 0));
}

TEST(ReplayWindowTest, ForgetsOnlyWhatFallsOutOfTheWindow) {
  ReplayWindow window;
  EXPECT_TRUE(Accept(window, 1000));
  EXPECT_TRUE(Accept(window, 1000 - 63));   // oldest still inside
  EXPECT_FALSE(Accept(window, 1000 - 64));  // too old to tell from a repeat
  EXPECT_TRUE(Accept(window, 1001));
  EXPECT_FALSE(Accept(window, 1000));
  EXPECT_TRUE(Accept(window, 5000));  // a jump clears the window
  EXPECT_TRUE(Accept(window, 4999));
  EXPECT_FALSE(Accept(window, 5000));
}

}  // namespace
}  // namespace hetps::server
