// Shards started with the job's token: only connections that present it are served, every
// method of every other connection is answered UNAUTHENTICATED, and the token shows in no
// error message.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/auth_token.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"

namespace hetps::server {
namespace {

constexpr char kToken[] = "the-jobs-s3cret-token";

class ShardAuthTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ServerOptions base;
    base.auth_token = kToken;
    auto cluster = testing::TestCluster::Start(GetParam(), 1, 1, base);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    transport_ = cluster_->inproc();
    if (transport_ == nullptr) transport_ = testing::NewTestTransport(GetParam());
  }

  // Echo's answer over a new connection that presents `token` ("" for none).
  absl::Status EchoWith(const std::string& token, std::unique_ptr<transport::Connection>* kept) {
    auto connection = transport_->Connect(cluster_->addresses()[0], absl::Now() + absl::Seconds(10),
                                          testing::WorkerGreeting(0, 1, 0, 1, "hetps", token));
    if (!connection.ok()) return connection.status();  // UCX: refused at its bootstrap
    absl::Status status = Call(**connection, hetps::v1::METHOD_ECHO, hetps::v1::EchoRequest());
    *kept = *std::move(connection);
    return status;
  }

  absl::Status Call(transport::Connection& connection, uint32_t method,
                    const google::protobuf::Message& header) {
    transport::Request request;
    request.method = method;
    request.header = header.SerializeAsString();
    request.deadline = absl::Now() + absl::Seconds(10);
    return testing::CallAndWait(connection, std::move(request), transport_.get()).status();
  }

  std::unique_ptr<testing::TestCluster> cluster_;
  std::shared_ptr<transport::Transport> transport_;
};

TEST_P(ShardAuthTest, OnlyConnectionsWithTheTokenAreServed) {
  std::unique_ptr<transport::Connection> right, wrong, none, later;
  EXPECT_OK(EchoWith(kToken, &right));
  for (const std::string& token :
       {std::string("the-jobs-s3cret-tokeN"), std::string(""), std::string(kToken) + "x"}) {
    std::unique_ptr<transport::Connection> refused;
    const absl::Status status = EchoWith(token, &refused);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << token << ": " << status;
    EXPECT_FALSE(absl::StrContains(status.message(), kToken)) << status;
    if (refused == nullptr) continue;
    // Every method, whatever its header: nothing but the refusal reaches a stranger.
    hetps::v1::HelloRequest hello;
    hello.set_job_id("hetps");
    for (uint32_t method : {hetps::v1::METHOD_HELLO, hetps::v1::METHOD_DECLARE,
                            hetps::v1::METHOD_PUSH, hetps::v1::METHOD_PULL, hetps::v1::METHOD_STATS,
                            hetps::v1::METHOD_BARRIER, hetps::v1::METHOD_ECHO}) {
      EXPECT_EQ(Call(*refused, method, hello).code(), absl::StatusCode::kUnauthenticated) << method;
    }
    refused->Shutdown();
  }
  // A token presented by one connection admits no other.
  EXPECT_EQ(EchoWith("", &later).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_OK(Call(*right, hetps::v1::METHOD_ECHO, hetps::v1::EchoRequest()));
  for (auto* connection : {&right, &later}) {
    if (*connection != nullptr) (*connection)->Shutdown();
  }
}

TEST_P(ShardAuthTest, AClientReadsTheTokenFromItsFileOrTheEnvironment) {
  ClientOptions options = cluster_->ClientOptionsFor(0);
  // A directory of this test's own: the instances for each transport run side by side.
  const testing::ScopedTempDir dir;
  const std::string file = dir.path() + "/job.token";
  std::ofstream(file, std::ios::trunc) << kToken << "\n";
  options.auth_token_file = file;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_OK((*client)->Stats());
  (*client)->Shutdown();

  options.auth_token_file = "";
  setenv(kAuthTokenEnvironment, kToken, 1);
  auto from_environment = Client::Create(options);
  unsetenv(kAuthTokenEnvironment);
  ASSERT_TRUE(from_environment.ok()) << from_environment.status();
  (*from_environment)->Shutdown();

  auto stranger = Client::Create(options);
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kUnauthenticated) << stranger.status();
  EXPECT_FALSE(absl::StrContains(stranger.status().message(), kToken));
}

INSTANTIATE_TEST_SUITE_P(Transports, ShardAuthTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
