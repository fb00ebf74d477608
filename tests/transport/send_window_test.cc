// The UCX connections' window of large sends: one under way until a send is seen to be quick,
// then two, and one again after a slow one; the others started in order as earlier ones end,
// none after the endpoint failed.
#include "transport/ucx/send_window.h"

#include <vector>

#include "gtest/gtest.h"

namespace hetps::transport::ucx_internal {
namespace {

int64_t fake_now = 0;
int64_t FakeNow() { return fake_now; }

constexpr int64_t kQuick = SendWindow::kQuickSendNanos / 2;
constexpr int64_t kSlow = SendWindow::kQuickSendNanos * 2;

class SendWindowTest : public ::testing::Test {
 protected:
  SendWindowTest() { fake_now = 1'000'000'000; }
  SendWindow window_{&FakeNow};
  std::vector<int> started_;
};

TEST_F(SendWindowTest, OneAtATimeUntilSendsAreQuickThenTwoAndOneAgainAfterSlowOnes) {
  for (int i = 0; i < 7; ++i) window_.Send([this, i] { started_.push_back(i); });
  ASSERT_EQ(started_, std::vector<int>({0}));  // nothing measured yet: one
  fake_now += kQuick;
  window_.Done();  // 0 took kQuick: 1 and 2 start
  ASSERT_EQ(started_, std::vector<int>({0, 1, 2}));
  fake_now += kQuick;
  window_.Done();  // 1: quick again, 3 starts
  ASSERT_EQ(started_, std::vector<int>({0, 1, 2, 3}));
  // 2 started with 1 but its time counts from 1's end: kSlow of the link's own, and with 1's
  // kQuick a mean above the limit.
  fake_now += kSlow;
  window_.Done();
  ASSERT_EQ(started_, std::vector<int>({0, 1, 2, 3}));  // 3 still under way: full at one
  fake_now += kQuick;
  window_.Done();  // 3 was quick, but the mean with 2 is not: only 4 starts
  ASSERT_EQ(started_, std::vector<int>({0, 1, 2, 3, 4}));
  fake_now += kQuick;
  window_.Done();  // two quick ones: 5 and 6 start
  EXPECT_EQ(started_, std::vector<int>({0, 1, 2, 3, 4, 5, 6}));
}

TEST_F(SendWindowTest, TwoThatShareTheLinkAndEndTogetherKeepTheWindowAtTwo) {
  // Two under way end one after both's time (a quick link's two messages, together longer than
  // kQuickSendNanos) and one at once: each pair's mean is quick.
  for (int i = 0; i < 8; ++i) window_.Send([this, i] { started_.push_back(i); });
  fake_now += kQuick;
  window_.Done();
  for (size_t done = 1; done < 7; done += 2) {
    ASSERT_EQ(started_.size(), done + 2) << done;
    fake_now += 3 * kQuick - 1;
    window_.Done();  // the pair's first end: the one left and a new one under way
    ASSERT_EQ(started_.size(), done + 3) << done;
    fake_now += 1;
    window_.Done();
  }
  EXPECT_EQ(window_.limit(), 2);
}

TEST_F(SendWindowTest, SendsBeyondTheWindowWaitAndStartInOrder) {
  for (int i = 0; i < 4; ++i) window_.Send([this, i] { started_.push_back(i); });
  ASSERT_EQ(started_.size(), 1u);
  fake_now += kSlow;
  window_.Done();
  ASSERT_EQ(started_.size(), 2u);
  window_.Done();
  window_.Done();
  window_.Done();  // nothing waits any more: the window only opens
  ASSERT_EQ(started_.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(started_[i], i);
}

TEST_F(SendWindowTest, ASendStartedByDoneMayEndAtOnce) {
  // A send that fails at once calls Done() from inside Done(): the next one starts, and the
  // count stays right.
  window_.Send([this] { started_.push_back(-1); });
  for (int i = 0; i < 3; ++i) {
    window_.Send([this, i] {
      started_.push_back(i);
      window_.Done();
    });
  }
  fake_now += kSlow;
  window_.Done();  // the first ends: the three waiting ones run, each ending at once
  EXPECT_EQ(started_, std::vector<int>({-1, 0, 1, 2}));
  EXPECT_EQ(window_.limit(), 2);  // those ended at once: quick
  window_.Send([this] { started_.push_back(3); });
  window_.Send([this] { started_.push_back(4); });
  EXPECT_EQ(started_.back(), 4);  // two places are free
  window_.Send([this] { started_.push_back(5); });
  EXPECT_EQ(started_.back(), 4);  // the window is full again
}

TEST_F(SendWindowTest, AfterClearNothingWaitingRunsAndTheWindowIsOpenAtOne) {
  int runs = 0;
  window_.Send([&runs] { ++runs; });
  fake_now += kQuick;
  window_.Done();  // quick: two from now on
  for (int i = 0; i < 5; ++i) window_.Send([&runs] { ++runs; });
  EXPECT_EQ(runs, 3);
  window_.Clear();  // the endpoint failed
  window_.Done();   // a send under way ends with an error
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(window_.limit(), 1);  // the next endpoint is measured afresh
  window_.Send([&runs] { ++runs; });
  window_.Send([&runs] { ++runs; });
  EXPECT_EQ(runs, 4);
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
