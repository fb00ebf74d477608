// The UCX connections' window of large sends: one under way until a send is seen to be quick,
// then two, and one again after a slow one; the others started in order as earlier ones end,
// none after the endpoint failed; eager sends on a slow network link for a while, then the link
// measured again.
#include "transport/ucx/send_window.h"

#include <vector>

#include "gtest/gtest.h"

namespace hetps::transport::ucx_internal {
namespace {

int64_t fake_now = 0;
int64_t FakeNow() { return fake_now; }

constexpr int64_t kQuick = SendWindow::kQuickSendNanos / 2;
constexpr int64_t kSlow = SendWindow::kQuickSendNanos * 2;
// A message that takes kSlow on a link still fast enough for rendezvous (4 ms for 4 MiB: 1 GB/s),
// and one of a link slow enough for eager sends (1 MiB in 8 ms: 1 Gbit/s).
constexpr size_t kBytes = 4 << 20;
constexpr size_t kSlowLinkBytes = 1 << 20;
constexpr int64_t kSlowLinkNanos = 8'000'000;
static_assert(kBytes * 1'000'000'000 / kSlow > SendWindow::kEagerBelowBytesPerSecond);
static_assert(kSlowLinkBytes * 1'000'000'000 / kSlowLinkNanos <
              SendWindow::kEagerBelowBytesPerSecond);

class SendWindowTest : public ::testing::Test {
 protected:
  SendWindowTest() { fake_now = 1'000'000'000; }
  SendWindow window_{&FakeNow};
  std::vector<int> started_;
};

TEST_F(SendWindowTest, OneAtATimeUntilSendsAreQuickThenTwoAndOneAgainAfterSlowOnes) {
  for (int i = 0; i < 7; ++i) window_.Send(kBytes, [this, i](bool) { started_.push_back(i); });
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
  for (int i = 0; i < 8; ++i) window_.Send(kBytes, [this, i](bool) { started_.push_back(i); });
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
  for (int i = 0; i < 4; ++i) window_.Send(kBytes, [this, i](bool) { started_.push_back(i); });
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
  window_.Send(kBytes, [this](bool) { started_.push_back(-1); });
  for (int i = 0; i < 3; ++i) {
    window_.Send(kBytes, [this, i](bool) {
      started_.push_back(i);
      window_.Done();
    });
  }
  fake_now += kSlow;
  window_.Done();  // the first ends: the three waiting ones run, each ending at once
  EXPECT_EQ(started_, std::vector<int>({-1, 0, 1, 2}));
  EXPECT_EQ(window_.limit(), 2);  // those ended at once: quick
  window_.Send(kBytes, [this](bool) { started_.push_back(3); });
  window_.Send(kBytes, [this](bool) { started_.push_back(4); });
  EXPECT_EQ(started_.back(), 4);  // two places are free
  window_.Send(kBytes, [this](bool) { started_.push_back(5); });
  EXPECT_EQ(started_.back(), 4);  // the window is full again
}

TEST_F(SendWindowTest, AfterClearNothingWaitingRunsAndTheWindowIsOpenAtOne) {
  int runs = 0;
  window_.Send(kBytes, [&runs](bool) { ++runs; });
  fake_now += kQuick;
  window_.Done();  // quick: two from now on
  for (int i = 0; i < 5; ++i) window_.Send(kBytes, [&runs](bool) { ++runs; });
  EXPECT_EQ(runs, 3);
  window_.Clear();  // the endpoint failed
  window_.Done();   // a send under way ends with an error
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(window_.limit(), 1);  // the next endpoint is measured afresh
  window_.Send(kBytes, [&runs](bool) { ++runs; });
  window_.Send(kBytes, [&runs](bool) { ++runs; });
  EXPECT_EQ(runs, 4);
}

constexpr int kToEager = SendWindow::kWarmUpSends + SendWindow::kSlowInARow;

// `count` sends of `bytes` that each take the link `nanos`, none of them eager.
void SendRendezvous(SendWindow& window, int count, size_t bytes, int64_t nanos) {
  for (int i = 0; i < count; ++i) {
    window.Send(bytes, [](bool eager) { EXPECT_FALSE(eager); });
    fake_now += nanos;
    window.Done();
  }
}

// Rendezvous sends of 1 MiB at 1 Gbit/s, over TCP through a network device, until the window
// takes the link for a slow one.
void MeasureSlowLink(SendWindow& window) {
  window.AllowEager(true);
  SendRendezvous(window, kToEager - 1, kSlowLinkBytes, kSlowLinkNanos);
  EXPECT_FALSE(window.eager());
  SendRendezvous(window, 1, kSlowLinkBytes, kSlowLinkNanos);
  EXPECT_TRUE(window.eager());
}

TEST_F(SendWindowTest, ASlowLinkGetsEagerSendsOneAtATime) {
  MeasureSlowLink(window_);
  ASSERT_TRUE(window_.eager());
  std::vector<bool> eager;
  for (int i = 0; i < 40; ++i) {
    window_.Send(kSlowLinkBytes, [&eager](bool e) { eager.push_back(e); });
    EXPECT_EQ(window_.limit(), 1);
  }
  // An eager send ends when the socket takes it: the first few at once (its buffer was
  // empty), the others as the link drains it.
  for (int i = 0; i < 40; ++i) {
    fake_now += i < 4 ? 100'000 : kSlowLinkNanos;
    window_.Done();
  }
  EXPECT_EQ(eager, std::vector<bool>(40, true));
  EXPECT_TRUE(window_.eager()) << "eager sends ending at once said the link was fast";
}

TEST_F(SendWindowTest, AFastLinkWithASlowStartOrASlowMomentKeepsRendezvous) {
  // A process's first large messages are slow on any link (loopback TCP: 4 MiB in 25, 16 and
  // 116 ms, then 7.5), and a descheduled receiver makes a few slow later.
  window_.AllowEager(true);
  const std::vector<int64_t> took = {25'000'000, 16'000'000, 116'000'000, 40'000'000, 7'500'000,
                                     40'000'000, 40'000'000, 40'000'000,  7'500'000,  40'000'000};
  for (int64_t nanos : took) {
    SendRendezvous(window_, 1, kBytes, nanos);
    EXPECT_FALSE(window_.eager());
  }
}

TEST_F(SendWindowTest, AfterTheHoldTheLinkIsMeasuredAgain) {
  MeasureSlowLink(window_);
  std::vector<bool> eager;
  auto send = [&eager](bool e) { eager.push_back(e); };
  window_.Send(kSlowLinkBytes, send);
  fake_now += kSlowLinkNanos;
  window_.Done();
  fake_now += SendWindow::kEagerHoldNanos;
  // Still slow: rendezvous sends say so again (the endpoint is warm), and eager sends follow.
  for (int i = 0; i <= SendWindow::kSlowInARow; ++i) {
    window_.Send(kSlowLinkBytes, send);
    fake_now += kSlowLinkNanos;
    window_.Done();
  }
  std::vector<bool> expected = {true};
  expected.insert(expected.end(), SendWindow::kSlowInARow, false);
  expected.push_back(true);
  EXPECT_EQ(eager, expected);
  fake_now += SendWindow::kEagerHoldNanos;
  // Now quick (a link that looked slow while its receiver was descheduled): rendezvous stays.
  for (int i = 0; i < 2 * SendWindow::kSlowInARow; ++i) {
    window_.Send(kSlowLinkBytes, send);
    fake_now += kQuick;
    window_.Done();
  }
  expected.insert(expected.end(), 2 * SendWindow::kSlowInARow, false);
  EXPECT_EQ(eager, expected);
  EXPECT_FALSE(window_.eager());
  EXPECT_EQ(window_.limit(), 2);
}

TEST_F(SendWindowTest, FastLinksKeepRendezvousEvenWhenSlowerThanQuick) {
  // Large messages on a fast link may take longer than kQuickSendNanos: one at a time, but by
  // rendezvous (eager would copy them at both ends).
  window_.AllowEager(true);
  SendRendezvous(window_, 4 * kToEager, kBytes, kSlow);
  EXPECT_FALSE(window_.eager());
  EXPECT_EQ(window_.limit(), 1);
}

TEST_F(SendWindowTest, LoopbackAndSharedMemoryNeverGoEager) {
  // However slow their large messages (a process's first ones, whose memory is faulted in):
  // there a copy is what the link costs, and eager adds two.
  SendRendezvous(window_, 4 * kToEager, kSlowLinkBytes, kSlowLinkNanos);
  EXPECT_FALSE(window_.eager());
}

TEST_F(SendWindowTest, ClearForgetsASlowLink) {
  MeasureSlowLink(window_);
  window_.Clear();
  EXPECT_FALSE(window_.eager());
  // The next endpoint's link is not known yet; once known, it warms up again.
  SendRendezvous(window_, kToEager, kSlowLinkBytes, kSlowLinkNanos);
  MeasureSlowLink(window_);
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
