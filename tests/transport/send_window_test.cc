// The UCX connections' window of large sends: at most kInFlight under way, the others started
// in order as earlier ones end, none after the endpoint failed.
#include "transport/ucx/send_window.h"

#include <vector>

#include "gtest/gtest.h"

namespace hetps::transport::ucx_internal {
namespace {

TEST(SendWindowTest, SendsBeyondTheWindowWaitAndStartInOrder) {
  SendWindow window;
  std::vector<int> started;
  for (int i = 0; i < SendWindow::kInFlight + 2; ++i) {
    window.Send([&started, i] { started.push_back(i); });
  }
  ASSERT_EQ(started.size(), static_cast<size_t>(SendWindow::kInFlight));
  window.Done();
  ASSERT_EQ(started.size(), static_cast<size_t>(SendWindow::kInFlight + 1));
  window.Done();
  window.Done();  // nothing waits any more: the window only opens
  ASSERT_EQ(started.size(), static_cast<size_t>(SendWindow::kInFlight + 2));
  for (int i = 0; i < SendWindow::kInFlight + 2; ++i) EXPECT_EQ(started[i], i);
}

TEST(SendWindowTest, ASendStartedByDoneMayEndAtOnce) {
  // A send that fails at once calls Done() from inside Done(): the next one starts, and the
  // count stays right.
  SendWindow window;
  std::vector<int> started;
  for (int i = 0; i < SendWindow::kInFlight; ++i)
    window.Send([&started] { started.push_back(-1); });
  for (int i = 0; i < 3; ++i) {
    window.Send([&window, &started, i] {
      started.push_back(i);
      window.Done();
    });
  }
  window.Done();  // one of the first ends: the three waiting ones run, each ending at once
  std::vector<int> expected(SendWindow::kInFlight, -1);
  for (int i = 0; i < 3; ++i) expected.push_back(i);
  EXPECT_EQ(started, expected);
  window.Send([&started] { started.push_back(3); });  // one place is free
  EXPECT_EQ(started.back(), 3);
  window.Send([&started] { started.push_back(4); });  // the window is full again
  EXPECT_EQ(started.back(), 3);
}

TEST(SendWindowTest, AfterClearNothingWaitingRunsAndTheWindowIsOpen) {
  SendWindow window;
  int runs = 0;
  for (int i = 0; i < SendWindow::kInFlight + 3; ++i) window.Send([&runs] { ++runs; });
  EXPECT_EQ(runs, SendWindow::kInFlight);
  window.Clear();  // the endpoint failed
  window.Done();   // a send under way ends with an error
  EXPECT_EQ(runs, SendWindow::kInFlight);
  for (int i = 0; i < SendWindow::kInFlight; ++i) window.Send([&runs] { ++runs; });
  EXPECT_EQ(runs, 2 * SendWindow::kInFlight);
}

}  // namespace
}  // namespace hetps::transport::ucx_internal
