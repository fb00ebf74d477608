// ShardTest: a cluster of two shards in this process for a job of two workers, tensor "t"
// (100 elements in partitions of 32, 32, 32, 4; SGD, lr 0.1, initial value 1.5) declared, and a
// raw connection to shard 0: requests are sent as a faulty or hostile client would, over the
// transport under test (the parameter).
#ifndef HETPS_TESTS_SERVER_SHARD_TEST_FIXTURE_H_
#define HETPS_TESTS_SERVER_SHARD_TEST_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "transport/grpc/grpc_transport.h"

namespace hetps::server {

using transport::AsBytes;
using transport::Payload;

constexpr uint64_t kElements = 100;
constexpr uint64_t kPartitionElements = 32;  // 4 partitions: 32, 32, 32, 4 (aligned to 16)

class ShardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ServerOptions base;
    base.max_pending_steps = 2;
    auto cluster = testing::TestCluster::Start(GetParam(), 2, 2, base);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    transport_ = cluster_->inproc();
    if (transport_ == nullptr) transport_ = testing::NewTestTransport(GetParam());
    auto connection = transport_->Connect(cluster_->addresses()[0], absl::Now() + absl::Seconds(10),
                                          testing::WorkerGreeting(0, 2, 0, 2));
    ASSERT_TRUE(connection.ok()) << connection.status();
    shard0_ = *std::move(connection);

    key_ = TensorKeyFromName("t");
    for (uint32_t p = 0; p < 4; ++p) {
      (ShardOfPartition(key_, p, 2) == 0 ? mine_ : theirs_).push_back(p);
    }
    ASSERT_FALSE(mine_.empty());
    ASSERT_FALSE(theirs_.empty());
    ASSERT_OK(Call(hetps::v1::METHOD_DECLARE, DeclareOf(Decl())));
  }

  void TearDown() override {
    if (shard0_) shard0_->Shutdown();
  }

  absl::StatusOr<transport::Response> Call(uint32_t method, const google::protobuf::Message& header,
                                           Payload payload = Payload(),
                                           absl::Duration timeout = absl::Seconds(10)) {
    transport::Request request;
    request.method = method;
    request.header = header.SerializeAsString();
    request.payload = std::move(payload);
    request.deadline = absl::Now() + timeout;
    return testing::CallAndWait(*shard0_, std::move(request));
  }

  hetps::v1::TensorDecl Decl() const {
    hetps::v1::TensorDecl decl;
    decl.set_name("t");
    decl.set_key(key_);
    decl.set_num_elements(kElements);
    decl.set_dtype(hetps::v1::DTYPE_FP32);
    decl.set_sync_mode(hetps::v1::SYNC_MODE_BSP);
    decl.set_partition_elements(kPartitionElements);
    decl.mutable_init()->set_kind(hetps::v1::INIT_KIND_CONSTANT);
    decl.mutable_init()->set_a(1.5);
    decl.mutable_optimizer()->set_name("sgd");
    (*decl.mutable_optimizer()->mutable_params())["lr"] = 0.1;
    return decl;
  }

  static hetps::v1::DeclareRequest DeclareOf(const hetps::v1::TensorDecl& decl) {
    hetps::v1::DeclareRequest request;
    request.set_worker_rank(0);
    *request.mutable_tensor() = decl;
    return request;
  }

  uint64_t PartitionBytes(uint32_t p) const {
    return (p == 3 ? kElements - 3 * kPartitionElements : kPartitionElements) * sizeof(float);
  }

  hetps::v1::PartitionItem Item(uint32_t partition, uint64_t bytes) const {
    hetps::v1::PartitionItem item;
    item.set_tensor_key(key_);
    item.set_partition(partition);
    item.set_dtype(hetps::v1::DTYPE_FP32);
    item.set_num_bytes(bytes);
    return item;
  }

  // The run (incarnation) the test's workers push as.
  static uint64_t RunOf(uint32_t rank) { return 100 + rank; }

  hetps::v1::PushRequest Push(std::vector<hetps::v1::PartitionItem> items, uint64_t step = 0,
                              uint32_t rank = 0, uint64_t sequence = 1) const {
    hetps::v1::PushRequest request;
    request.set_worker_rank(rank);
    request.set_step(step);
    request.set_sequence(sequence);
    request.set_incarnation(RunOf(rank));
    for (auto& item : items) *request.add_items() = item;
    return request;
  }

  hetps::v1::HelloRequest Hello(uint32_t rank, uint64_t incarnation) const {
    hetps::v1::HelloRequest hello;
    hello.set_protocol_version(hetps::v1::PROTOCOL_VERSION_CURRENT);
    hello.set_job_id("hetps");
    hello.set_world_size(2);
    hello.set_worker_rank(rank);
    hello.set_shard_index(0);
    hello.set_num_shards(2);
    hello.set_incarnation(incarnation);
    return hello;
  }

  // Declares an ASP tensor of one partition on shard 0 (sgd, lr 1, initial value 0), named
  // `prefix` and a number.
  hetps::v1::PartitionItem DeclareAspPartition(const std::string& prefix) {
    std::string name;
    for (int i = 0; name.empty() || ShardOfPartition(TensorKeyFromName(name), 0, 2) != 0; ++i) {
      name = absl::StrCat(prefix, i);
    }
    hetps::v1::TensorDecl decl = Decl();
    decl.set_name(name);
    decl.set_key(TensorKeyFromName(name));
    decl.set_sync_mode(hetps::v1::SYNC_MODE_ASP);
    decl.set_num_elements(16);
    decl.set_partition_elements(16);
    decl.mutable_init()->set_a(0);
    (*decl.mutable_optimizer()->mutable_params())["lr"] = 1;
    EXPECT_OK(Call(hetps::v1::METHOD_DECLARE, DeclareOf(decl)));
    hetps::v1::PartitionItem item = Item(0, 16 * sizeof(float));
    item.set_tensor_key(decl.key());
    return item;
  }

  // The first weight and the version of one partition.
  std::pair<float, uint64_t> Read(const hetps::v1::PartitionItem& item) {
    hetps::v1::PullRequest pull;
    hetps::v1::PartitionItem wanted = item;
    wanted.set_num_bytes(0);
    *pull.add_items() = wanted;
    absl::StatusOr<transport::Response> pulled = Call(hetps::v1::METHOD_PULL, pull);
    EXPECT_TRUE(pulled.ok()) << pulled.status();
    if (!pulled.ok()) return {0, 0};
    hetps::v1::PullResponse header;
    EXPECT_TRUE(header.ParseFromString(pulled->header));
    float first = 0;
    pulled->payload.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&first), 4));
    return {first, header.items(0).version()};
  }

  Payload Gradient(uint64_t bytes) {
    buffers_.push_back(std::vector<float>(bytes / sizeof(float), 1.0f));
    return Payload::Borrow(AsBytes(absl::MakeConstSpan(buffers_.back())));
  }

  // Pulls this shard's partitions of "t" and checks they still hold the initial value at
  // version 0.
  void ExpectUnchanged() {
    hetps::v1::PullRequest pull;
    for (uint32_t p : mine_) *pull.add_items() = Item(p, 0);
    absl::StatusOr<transport::Response> response = Call(hetps::v1::METHOD_PULL, pull);
    ASSERT_TRUE(response.ok()) << response.status();
    hetps::v1::PullResponse header;
    ASSERT_TRUE(header.ParseFromString(response->header));
    for (const auto& item : header.items()) EXPECT_EQ(item.version(), 0u);
    std::string bytes = response->payload.ToString();
    const float* values = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < bytes.size() / sizeof(float); ++i) ASSERT_EQ(values[i], 1.5f) << i;
  }

  std::unique_ptr<testing::TestCluster> cluster_;
  std::shared_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Connection> shard0_;
  uint64_t key_ = 0;
  std::vector<uint32_t> mine_, theirs_;
  std::vector<std::vector<float>> buffers_;
};

}  // namespace hetps::server

#endif  // HETPS_TESTS_SERVER_SHARD_TEST_FIXTURE_H_
