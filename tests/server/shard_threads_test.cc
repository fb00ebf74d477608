// Which thread applies a request. An idle shard applies a request over partitions of up to
// kRunHereBytes on the thread that received it: waking the partition's owner thread costs more
// than such an update, and on two CPUs the woken owner waited for one (256 KiB push+pulls took
// 130 to 180 us where their echo took 50; bench/PERFORMANCE.md). Larger requests go to the
// owner. Over the in-process transport, whose answers complete on the thread that gives them.
#include <pthread.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "server/request_util.h"
#include "tests/server/shard_test_fixture.h"

namespace hetps::server {
namespace {

using ::testing::StartsWith;

std::string ThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

class ShardThreadsTest : public ShardTest {
 protected:
  // Declares a tensor of one partition of `elements` on shard 0, pushes ones to it as worker 0
  // and returns the name of the thread its answer came from.
  std::string PushAnsweredOn(uint64_t elements) {
    std::string name;
    for (int i = 0; name.empty() || ShardOfPartition(TensorKeyFromName(name), 0, 2) != 0; ++i) {
      name = absl::StrCat("threads", elements, "-", i);
    }
    hetps::v1::TensorDecl decl = Decl();
    decl.set_name(name);
    decl.set_key(TensorKeyFromName(name));
    decl.set_num_elements(elements);
    decl.set_partition_elements(elements);
    EXPECT_TRUE(Call(hetps::v1::METHOD_DECLARE, DeclareOf(decl)).ok());
    hetps::v1::PartitionItem item = Item(0, elements * sizeof(float));
    item.set_tensor_key(decl.key());

    transport::Request request;
    request.method = hetps::v1::METHOD_PUSH;
    request.header = Push({item}).SerializeAsString();
    request.payload = Gradient(elements * sizeof(float));
    request.deadline = absl::Now() + absl::Seconds(30);
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

INSTANTIATE_TEST_SUITE_P(InProc, ShardThreadsTest, ::testing::Values(std::string("inproc")),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
