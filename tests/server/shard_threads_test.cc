// Which thread applies a request. An idle shard applies a request over partitions of up to
// kRunHereBytes on the thread that received it: waking the partition's owner thread costs more
// than such an update, and on two CPUs the woken owner waited for one (256 KiB push+pulls took
// 130 to 180 us where their echo took 50; bench/PERFORMANCE.md). Larger requests go to the
// owner, which starts on it before the receiving thread moves on. Over the in-process transport,
// whose answers complete on the thread that gives them.
#include <pthread.h>
#include <sched.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "server/request_util.h"
#include "tests/server/shard_test_fixture.h"
#include "tests/testing/one_cpu.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

std::string ThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

class ShardThreadsTest : public ShardTest {
 protected:
  // Declares a tensor of one partition of `elements` on shard 0 (its owner thread is the one
  // after the previous partition's).
  hetps::v1::TensorDecl DeclareOnShard0(uint64_t elements) {
    std::string name;
    for (int i = 0; name.empty() || ShardOfPartition(TensorKeyFromName(name), 0, 2) != 0; ++i) {
      name = absl::StrCat("threads", elements, "-", i);
    }
    hetps::v1::TensorDecl decl = Decl();
    decl.set_name(name);
    decl.set_key(TensorKeyFromName(name));
    decl.set_num_elements(elements);
    decl.set_partition_elements(elements);
    EXPECT_OK(Call(hetps::v1::METHOD_DECLARE, DeclareOf(decl)));
    return decl;
  }

  // A push of ones to that tensor as worker 0.
  transport::Request PushOf(const hetps::v1::TensorDecl& decl) {
    hetps::v1::PartitionItem item = Item(0, decl.num_elements() * sizeof(float));
    item.set_tensor_key(decl.key());
    transport::Request request;
    request.method = hetps::v1::METHOD_PUSH;
    request.header = Push({item}).SerializeAsString();
    request.payload = Gradient(decl.num_elements() * sizeof(float));
    request.deadline = absl::Now() + absl::Seconds(30);
    return request;
  }

  // Pushes to a new tensor of one partition of `elements` and returns the name of the thread
  // its answer came from.
  std::string PushAnsweredOn(uint64_t elements) {
    transport::Request request = PushOf(DeclareOnShard0(elements));
    absl::Notification answered;
    std::string thread;
    shard0_->Call(std::move(request), [&](absl::StatusOr<transport::Response> response) {
      EXPECT_TRUE(response.ok()) << response.status();
      thread = ThreadName();
      answered.Notify();
    });
    EXPECT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
    return thread;
  }
};

TEST_P(ShardThreadsTest, AnIdleShardAppliesUpToAMebibyteOnTheReceivingThread) {
  constexpr uint64_t kMebibyte = uint64_t{1} << 20;
  EXPECT_THAT(PushAnsweredOn(16), StartsWith("inproc"));
  EXPECT_THAT(PushAnsweredOn(kMebibyte / 4 / sizeof(float)), StartsWith("inproc"));
  EXPECT_THAT(PushAnsweredOn(kMebibyte / sizeof(float)), StartsWith("inproc"));
  EXPECT_THAT(PushAnsweredOn(2 * kMebibyte / sizeof(float)), StartsWith("shard-owner"));
}

// The shards' threads and the test's share one CPU under SCHED_FIFO at one priority, where a
// thread keeps the CPU until it blocks or yields: which thread runs when is then decided, not a
// matter of timing. Skipped where the process may not use SCHED_FIFO (it needs CAP_SYS_NICE).
class ShardOnOneCpuTest : public ShardThreadsTest {
 protected:
  void SetUp() override {
    one_cpu_ = std::make_unique<testing::OneCpuFifo>();
    if (!one_cpu_->active()) GTEST_SKIP() << one_cpu_->reason();
    ShardThreadsTest::SetUp();  // the shards' threads inherit both
  }

  void TearDown() override {
    ShardThreadsTest::TearDown();
    one_cpu_.reset();
  }

  std::unique_ptr<testing::OneCpuFifo> one_cpu_;
};

// A request too large to run where it was received goes to its owner thread, which must start
// on it before the receiving thread takes the next request; otherwise, on a shard with one CPU,
// the receiving thread takes in every message of a large push-pull before any is answered.
TEST_P(ShardOnOneCpuTest, AnOwnerGivenALargeRequestRunsBeforeTheReceivingThreadMovesOn) {
  // Posted to its owner thread; the small one, for the next owner thread, which is idle, runs
  // on the receiving thread.
  const hetps::v1::TensorDecl large = DeclareOnShard0(2 * kRunHereBytes / sizeof(float));
  const hetps::v1::TensorDecl small = DeclareOnShard0(16);
  absl::Mutex mu;
  std::vector<std::string> answered;
  auto answer = [&](std::string what) {
    return [&, what](absl::StatusOr<transport::Response> response) {
      EXPECT_TRUE(response.ok()) << what << ": " << response.status();
      absl::MutexLock lock(&mu);
      answered.push_back(what);
    };
  };
  // This thread keeps the CPU until it waits: both requests are queued on the shard's receiving
  // thread before it takes the first.
  shard0_->Call(PushOf(large), answer("large"));
  shard0_->Call(PushOf(small), answer("small"));
  absl::MutexLock lock(&mu);
  auto both = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered.size() == 2; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(30)));
  EXPECT_THAT(answered, ElementsAre("large", "small"));
}

INSTANTIATE_TEST_SUITE_P(InProc, ShardOnOneCpuTest, ::testing::Values(std::string("inproc")),
                         [](const auto& info) { return testing::TestName(info.param); });

INSTANTIATE_TEST_SUITE_P(InProc, ShardThreadsTest, ::testing::Values(std::string("inproc")),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
