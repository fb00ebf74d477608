// /metrics of shards (ServerOptions::metrics_address) and workers (ClientOptions::metrics_port):
// the figures agree with what the test did, over every transport.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"

namespace hetps::testing {
namespace {

class MetricsTest : public ClientClusterTest {};

TEST_P(MetricsTest, ShardAndWorkerPagesCountWhatTheJobDid) {
  server::ServerOptions base;
  base.metrics_address = "127.0.0.1:0";
  StartCluster(1, 1, base);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.metrics_port = 0;
  options.metrics_host = "127.0.0.1";
  options.partition_bytes = 4096;  // one partition, one message per operation
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_FALSE((*client)->metrics_address().empty());
  absl::StatusOr<TensorId> id = (*client)->Declare(Spec("w", 1000));
  ASSERT_TRUE(id.ok()) << id.status();

  std::vector<float> gradient(1000, 1.0f), weights(1000);
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_OK((*client)->PushPull(*id, gradient, absl::MakeSpan(weights), step).Wait());
  }
  for (int i = 0; i < 2; ++i) ASSERT_OK((*client)->Pull(*id, absl::MakeSpan(weights)).Wait());
  // Refused by the shard (too far ahead), and by the client (no such tensor).
  EXPECT_EQ((*client)->Push(*id, gradient, 100).Wait().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*client)->Push(12345, gradient, 0).Wait().code(), absl::StatusCode::kNotFound);

  const std::string shard_address = cluster_->shard(0).metrics_address();
  std::map<std::string, double> shard = ScrapeSamples(shard_address);
  EXPECT_EQ(shard["hetps_shard_serving"], 1);
  EXPECT_EQ(shard["hetps_shard_requests_total{method=\"push_pull\",code=\"OK\"}"], 3);
  EXPECT_EQ(shard["hetps_shard_requests_total{method=\"pull\",code=\"OK\"}"], 2);
  EXPECT_EQ(shard["hetps_shard_requests_total{method=\"push\",code=\"FAILED_PRECONDITION\"}"], 1);
  EXPECT_EQ(shard["hetps_shard_requests_total{method=\"declare\",code=\"OK\"}"], 1);
  EXPECT_EQ(shard["hetps_shard_request_duration_seconds_count{method=\"push_pull\"}"], 3);
  EXPECT_EQ(shard["hetps_shard_request_duration_seconds_bucket{method=\"push_pull\",le=\"+Inf\"}"],
            3);
  EXPECT_GT(shard["hetps_shard_request_duration_seconds_sum{method=\"push_pull\"}"], 0);
  EXPECT_EQ(shard["hetps_shard_optimizer_apply_duration_seconds_count"], 3);
  EXPECT_EQ(shard["hetps_shard_items_total{kind=\"push\"}"], 3);
  EXPECT_EQ(shard["hetps_shard_items_total{kind=\"pull\"}"], 5);
  // The refused push's bytes came in too.
  EXPECT_EQ(shard["hetps_shard_received_payload_bytes_total"], 4 * 4000);
  EXPECT_EQ(shard["hetps_shard_sent_payload_bytes_total"], 5 * 4000);
  EXPECT_EQ(shard["hetps_shard_connected_workers"], 1);
  EXPECT_EQ(shard["hetps_shard_tensors"], 1);
  EXPECT_EQ(shard["hetps_shard_partitions{role=\"served\"}"], 1);
  EXPECT_EQ(shard["hetps_shard_parameter_bytes"], 4000);
  EXPECT_EQ(shard["hetps_shard_partition_version{bound=\"max\"}"], 3);
  EXPECT_GT(shard["hetps_shard_tensor_memory_bytes"], 0);
  EXPECT_GT(shard["process_resident_memory_bytes"], 0);

  std::map<std::string, double> worker = ScrapeSamples((*client)->metrics_address());
  EXPECT_EQ(worker["hetps_client_operations_total{op=\"push_pull\",code=\"OK\"}"], 3);
  EXPECT_EQ(worker["hetps_client_operations_total{op=\"pull\",code=\"OK\"}"], 2);
  EXPECT_EQ(worker["hetps_client_operations_total{op=\"push\",code=\"FAILED_PRECONDITION\"}"], 1);
  EXPECT_EQ(worker["hetps_client_operations_total{op=\"push\",code=\"NOT_FOUND\"}"], 1);
  EXPECT_EQ(worker["hetps_client_operation_duration_seconds_count{op=\"push_pull\"}"], 3);
  EXPECT_EQ(worker["hetps_client_sent_payload_bytes_total"], 4 * 4000);
  EXPECT_EQ(worker["hetps_client_received_payload_bytes_total"], 5 * 4000);
  EXPECT_EQ(worker["hetps_client_retries_total"], 0);

  absl::StatusOr<HttpResponse> ready = HttpGet(shard_address, "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->status, 200);
  (*client)->Shutdown();
  cluster_->shard(0).Shutdown();
  // The endpoint goes with the shard.
  EXPECT_FALSE(HttpGet(shard_address, "/healthz").ok());
}

// An operation that finished before its Wait() cost the job no waiting, so only a wait that
// surely blocks is checked: a pull of a version no one pushes, held by the shard until its
// deadline. Each try can only see 0 if this thread stalled past the deadline before Wait().
TEST_P(MetricsTest, TheTimeTheJobWaitedIsCounted) {
  StartCluster(1, 1);
  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.metrics_port = 0;
  options.metrics_host = "127.0.0.1";
  options.call_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<TensorId> id = (*client)->Declare(Spec("w", 100));
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> weights(100);
  double waited = 0;
  for (int attempt = 0; attempt < 5 && waited == 0; ++attempt) {
    EXPECT_EQ((*client)->Pull(*id, absl::MakeSpan(weights), /*min_version=*/1).Wait().code(),
              absl::StatusCode::kDeadlineExceeded);
    waited = ScrapeSamples((*client)->metrics_address())["hetps_client_ps_wait_seconds_total"];
  }
  EXPECT_GT(waited, 0);
  EXPECT_LT(waited, 5 * 10);
}

TEST_P(MetricsTest, NothingIsServedUnlessAskedAndABadPortIsRefused) {
  StartCluster(1, 1);
  EXPECT_EQ(cluster_->shard(0).metrics_address(), "");
  std::unique_ptr<Client> client = NewClient(0);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->metrics_address(), "");

  ClientOptions options = cluster_->ClientOptionsFor(0);
  options.metrics_port = 70000;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  server::ServerOptions taken;
  taken.metrics_address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<TestCluster>> first = TestCluster::Start(GetParam(), 1, 1, taken);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string busy = (*first)->shard(0).metrics_address();
  options.metrics_host = "127.0.0.1";
  options.metrics_port = std::stoi(busy.substr(busy.rfind(':') + 1));
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kUnavailable);
  taken.metrics_address = busy;
  EXPECT_EQ(TestCluster::Start(GetParam(), 1, 1, taken).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_P(MetricsTest, ShardsTellTheirNewestCheckpointAndItsAge) {
  ScopedTempDir dir;
  server::ServerOptions base;
  base.metrics_address = "127.0.0.1:0";
  base.checkpoint_dir = dir.path();
  StartCluster(1, 1, base);
  std::unique_ptr<Client> client = NewClient(0);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<TensorId> id = client->Declare(Spec("w", 100));
  ASSERT_TRUE(id.ok()) << id.status();
  std::map<std::string, double> before = ScrapeSamples(cluster_->shard(0).metrics_address());
  EXPECT_EQ(before["hetps_shard_last_checkpoint_step"], 0);
  EXPECT_EQ(before.count("hetps_shard_checkpoint_age_seconds"), 0u);

  std::vector<float> gradient(100, 1.0f), weights(100);
  for (uint64_t step = 0; step < 2; ++step) {
    ASSERT_OK(client->PushPull(*id, gradient, absl::MakeSpan(weights), step).Wait());
  }
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  ASSERT_OK(client->Checkpoint(2));
  std::map<std::string, double> after = ScrapeSamples(cluster_->shard(0).metrics_address());
  EXPECT_EQ(after["hetps_shard_last_checkpoint_step"], 2);
  EXPECT_GE(after["hetps_shard_last_checkpoint_timestamp_seconds"], now - 1);
  EXPECT_GE(after["hetps_shard_checkpoint_age_seconds"], 0);
  EXPECT_LT(after["hetps_shard_checkpoint_age_seconds"], 60);
}

INSTANTIATE_TEST_SUITE_P(Transports, MetricsTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::testing
