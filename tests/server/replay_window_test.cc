#include "server/replay_window.h"

#include "gtest/gtest.h"

namespace hetps::server {
namespace {

ReplayWindow::Verdict Accept(ReplayWindow& window, uint64_t sequence) {
  const ReplayWindow::Verdict verdict = window.Judge(sequence);
  if (verdict == ReplayWindow::kNew) window.Mark(sequence);
  return verdict;
}

TEST(ReplayWindowTest, AcceptsEachNumberOnceInAnyOrder) {
  ReplayWindow window;
  EXPECT_EQ(Accept(window, 10), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 12), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 11), ReplayWindow::kNew);  // overtaken by 12, still new
  EXPECT_EQ(Accept(window, 11), ReplayWindow::kSeen);
  EXPECT_EQ(Accept(window, 12), ReplayWindow::kSeen);
  EXPECT_EQ(Accept(window, 10), ReplayWindow::kSeen);
  EXPECT_EQ(Accept(window, 9), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 0), ReplayWindow::kTooOld);
}

TEST(ReplayWindowTest, WhatFallsOutOfTheWindowIsTooOldNotARepeat) {
  ReplayWindow window;
  EXPECT_EQ(Accept(window, 1000), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 1000 - 63), ReplayWindow::kNew);     // oldest still inside
  EXPECT_EQ(Accept(window, 1000 - 64), ReplayWindow::kTooOld);  // cannot tell from a repeat
  EXPECT_EQ(Accept(window, 1001), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 1000), ReplayWindow::kSeen);
  EXPECT_EQ(Accept(window, 5000), ReplayWindow::kNew);  // a jump clears the window
  EXPECT_EQ(Accept(window, 4999), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 5000), ReplayWindow::kSeen);
  EXPECT_EQ(Accept(window, 1001), ReplayWindow::kTooOld);
}

TEST(ReplayWindowTest, AJumpBeyondTheLimitIsRefusedAndLeavesTheWindowAsItWas) {
  ReplayWindow window;
  EXPECT_EQ(Accept(window, ReplayWindow::kMaxJump + 1), ReplayWindow::kTooFarAhead);
  EXPECT_EQ(Accept(window, ~uint64_t{0}), ReplayWindow::kTooFarAhead);
  EXPECT_EQ(window.highest(), 0u);
  EXPECT_EQ(Accept(window, 1), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 2), ReplayWindow::kNew);
  EXPECT_EQ(Accept(window, 2 + ReplayWindow::kMaxJump), ReplayWindow::kNew);  // at the limit
}

}  // namespace
}  // namespace hetps::server
