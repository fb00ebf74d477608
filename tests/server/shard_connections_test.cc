// A shard's connections: each is admitted on its greeting (the worker's hello), so what Hello
// checks holds for every request of the connection; pulls a client left waiting are let go
// when it disconnects.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/server/shard_test_fixture.h"
#include "tests/testing/call.h"
#include "tests/testing/transports.h"

namespace hetps::server {
namespace {

class ShardConnectionsTest : public ShardTest {
 protected:
  absl::StatusOr<std::unique_ptr<transport::Connection>> ConnectWith(const std::string& greeting) {
    transport::ConnectOptions connect;
    connect.greeting = greeting;
    return transport_->Connect(cluster_->addresses()[0], absl::Now() + absl::Seconds(10), connect);
  }

  static transport::Request RequestOf(uint32_t method, const google::protobuf::Message& header,
                                      absl::Duration timeout = absl::Seconds(10)) {
    transport::Request request;
    request.method = method;
    request.header = header.SerializeAsString();
    request.deadline = absl::Now() + timeout;
    return request;
  }

  uint64_t RequestsWaiting() { return cluster_->shard(0).Stats().requests_waiting(); }

  // Waits (with a deadline) until shard 0 has `count` requests waiting for a version.
  bool AwaitRequestsWaiting(uint64_t count, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (RequestsWaiting() != count) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }
};

TEST_P(ShardConnectionsTest, AConnectionNotAdmittedIsRefusedForEveryMethod) {
  const uint64_t before = cluster_->shard(0).StateDigest();
  struct Case {
    std::string what;
    std::string greeting;
    absl::StatusCode code;
    std::string mentions;
  };
  std::vector<Case> cases;
  cases.push_back({"no greeting", "", absl::StatusCode::kFailedPrecondition, "did not say"});
  cases.push_back(
      {"malformed greeting", "\xff\xff\xff", absl::StatusCode::kInvalidArgument, "malformed"});
  hetps::v1::HelloRequest hello = Hello(0, 7);
  hello.set_job_id("another-job");
  cases.push_back({"another job", hello.SerializeAsString(), absl::StatusCode::kFailedPrecondition,
                   "another-job"});
  hello = Hello(0, 7);
  hello.set_world_size(3);
  cases.push_back({"another world size", hello.SerializeAsString(),
                   absl::StatusCode::kFailedPrecondition, "3 workers"});
  hello = Hello(0, 7);
  hello.set_shard_index(1);
  cases.push_back({"another shard", hello.SerializeAsString(),
                   absl::StatusCode::kFailedPrecondition, "shard 1 of 2"});
  hello = Hello(0, 7);
  hello.set_protocol_version(hetps::v1::PROTOCOL_VERSION_UNSPECIFIED);
  cases.push_back({"another protocol", hello.SerializeAsString(),
                   absl::StatusCode::kFailedPrecondition, "protocol version"});
  hello = Hello(5, 7);
  cases.push_back({"a rank out of range", hello.SerializeAsString(),
                   absl::StatusCode::kInvalidArgument, "rank 5"});

  // Requests that a welcome connection would have answered OK.
  hetps::v1::PullRequest pull;
  *pull.add_items() = Item(mine_[0], 0);
  std::vector<transport::Request> requests;
  requests.push_back(RequestOf(hetps::v1::METHOD_HELLO, Hello(0, 7)));
  requests.push_back(RequestOf(hetps::v1::METHOD_DECLARE, DeclareOf(Decl())));
  requests.push_back(RequestOf(hetps::v1::METHOD_PULL, pull));
  requests.push_back(RequestOf(hetps::v1::METHOD_STATS, hetps::v1::StatsRequest()));
  requests.push_back(RequestOf(hetps::v1::METHOD_ECHO, hetps::v1::EchoRequest()));
  transport::Request push =
      RequestOf(hetps::v1::METHOD_PUSH, Push({Item(mine_[0], PartitionBytes(mine_[0]))}, 0, 0, 1));
  push.payload = Gradient(PartitionBytes(mine_[0]));
  requests.push_back(push);

  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<transport::Connection>> connection = ConnectWith(c.greeting);
    if (!connection.ok()) {
      // UCX learns the refusal at its bootstrap: no endpoint is ever made.
      EXPECT_EQ(connection.status().code(), c.code) << c.what << ": " << connection.status();
      EXPECT_TRUE(absl::StrContains(connection.status().message(), c.mentions))
          << c.what << ": " << connection.status();
      continue;
    }
    for (const transport::Request& request : requests) {
      transport::Request copy = request;
      copy.deadline = absl::Now() + absl::Seconds(10);
      const absl::Status status =
          testing::CallAndWait(**connection, std::move(copy), transport_.get()).status();
      EXPECT_EQ(status.code(), c.code) << c.what << ", method " << request.method << ": " << status;
      EXPECT_TRUE(absl::StrContains(status.message(), c.mentions)) << c.what << ": " << status;
    }
    (*connection)->Shutdown();
  }
  EXPECT_EQ(cluster_->shard(0).StateDigest(), before) << "a refused connection changed the shard";
  ExpectUnchanged();  // the test's own, admitted connection is served
}

TEST_P(ShardConnectionsTest, PullsOfAClientThatDisconnectedAreLetGo) {
  absl::StatusOr<std::unique_ptr<transport::Connection>> connection =
      ConnectWith(testing::WorkerGreeting(0, 2, 1, 2).greeting);
  ASSERT_TRUE(connection.ok()) << connection.status();
  // Version 1 of "t" needs pushes nobody sends: the pull waits (up to 60 s by its deadline).
  hetps::v1::PullRequest pull;
  pull.set_worker_rank(1);
  pull.set_min_version(1);
  *pull.add_items() = Item(mine_[0], 0);
  absl::Notification answered;
  (*connection)
      ->Call(RequestOf(hetps::v1::METHOD_PULL, pull, absl::Seconds(60)),
             [&answered](absl::StatusOr<transport::Response>) { answered.Notify(); });
  ASSERT_TRUE(AwaitRequestsWaiting(1, absl::Seconds(20)));

  (*connection)->Shutdown();
  EXPECT_TRUE(answered.HasBeenNotified());  // the client side ends its call at once
  EXPECT_TRUE(AwaitRequestsWaiting(0, absl::Seconds(20)))
      << "the shard still holds the pull of a client that is gone";
  ExpectUnchanged();
}

INSTANTIATE_TEST_SUITE_P(Transports, ShardConnectionsTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
