// Every kind of bad request a shard can get is answered with its own error code, changes
// nothing, and leaves the shard serving the others. Requests are sent raw, as a faulty or
// hostile client would, over each transport.
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
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "transport/grpc/grpc_transport.h"

namespace hetps::server {
namespace {

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
    auto connection =
        transport_->Connect(cluster_->addresses()[0], absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(connection.ok()) << connection.status();
    shard0_ = *std::move(connection);

    key_ = TensorKeyFromName("t");
    for (uint32_t p = 0; p < 4; ++p) {
      (ShardOfPartition(key_, p, 2) == 0 ? mine_ : theirs_).push_back(p);
    }
    ASSERT_FALSE(mine_.empty());
    ASSERT_FALSE(theirs_.empty());
    ASSERT_TRUE(Call(hetps::v1::METHOD_DECLARE, DeclareOf(Decl())).ok());
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
    EXPECT_TRUE(Call(hetps::v1::METHOD_DECLARE, DeclareOf(decl)).ok());
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

TEST_P(ShardTest, HelloChecksVersionJobWorldSizeAndPlace) {
  hetps::v1::HelloRequest hello = Hello(1, RunOf(1));
  absl::StatusOr<transport::Response> ok = Call(hetps::v1::METHOD_HELLO, hello);
  ASSERT_TRUE(ok.ok()) << ok.status();
  hetps::v1::HelloResponse response;
  ASSERT_TRUE(response.ParseFromString(ok->header));
  EXPECT_EQ(response.shard_index(), 0u);
  EXPECT_EQ(response.num_workers(), 2u);
  EXPECT_GT(response.max_message_bytes(), 0u);

  auto expect = [&](hetps::v1::HelloRequest bad, absl::StatusCode code, const char* words) {
    absl::Status status = Call(hetps::v1::METHOD_HELLO, bad).status();
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_NE(status.message().find(words), absl::string_view::npos) << status;
  };
  hetps::v1::HelloRequest bad = hello;
  bad.set_protocol_version(99);
  expect(bad, absl::StatusCode::kFailedPrecondition, "protocol version 99");
  bad = hello;
  bad.set_world_size(3);
  expect(bad, absl::StatusCode::kFailedPrecondition, "3 workers");
  bad = hello;
  bad.set_job_id("other");
  expect(bad, absl::StatusCode::kFailedPrecondition, "job 'other'");
  bad = hello;
  bad.set_shard_index(1);
  expect(bad, absl::StatusCode::kFailedPrecondition, "shard 1 of 2");
  bad = hello;
  bad.set_worker_rank(2);
  expect(bad, absl::StatusCode::kInvalidArgument, "rank 2");
  bad = hello;
  bad.set_incarnation(0);
  expect(bad, absl::StatusCode::kInvalidArgument, "incarnation");
}

TEST_P(ShardTest, AProcessThatTookARankOverMakesTheOtherOnesRequestsFail) {
  const uint32_t p = mine_[0];
  ASSERT_TRUE(Call(hetps::v1::METHOD_HELLO, Hello(1, RunOf(1))).ok());
  // A second process starts with rank 1: its Hello takes the rank over.
  ASSERT_TRUE(Call(hetps::v1::METHOD_HELLO, Hello(1, 555)).ok());
  absl::Status stale = Call(hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}, 0, 1),
                            Gradient(PartitionBytes(p)))
                           .status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_NE(stale.message().find("taken over"), absl::string_view::npos) << stale;
  hetps::v1::BarrierRequest barrier;
  barrier.set_worker_rank(1);
  barrier.set_generation(1);
  barrier.set_incarnation(RunOf(1));
  EXPECT_EQ(Call(hetps::v1::METHOD_BARRIER, barrier).status().code(),
            absl::StatusCode::kFailedPrecondition);
  barrier.set_incarnation(0);
  EXPECT_EQ(Call(hetps::v1::METHOD_BARRIER, barrier).status().code(),
            absl::StatusCode::kInvalidArgument);
  hetps::v1::PushRequest unnamed = Push({Item(p, PartitionBytes(p))}, 0, 1);
  unnamed.set_incarnation(0);
  EXPECT_EQ(Call(hetps::v1::METHOD_PUSH, unnamed, Gradient(PartitionBytes(p))).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectUnchanged();
  // The new process's own pushes are taken.
  hetps::v1::PushRequest current = Push({Item(p, PartitionBytes(p))}, 0, 1);
  current.set_incarnation(555);
  EXPECT_TRUE(Call(hetps::v1::METHOD_PUSH, current, Gradient(PartitionBytes(p))).ok());
}

TEST_P(ShardTest, ASecondRunOfTheJobIsToldTheShardHoldsAnEarlierRunsState) {
  const uint32_t p = mine_[0];
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push({Item(p, PartitionBytes(p))}, 0, rank),
                     Gradient(PartitionBytes(p)))
                    .ok());
  }
  const hetps::v1::PartitionItem item = Item(p, PartitionBytes(p));
  const std::pair<float, uint64_t> trained = Read(item);
  ASSERT_EQ(trained.second, 1u);
  // The same job started again: new runs, counting steps from 0 again.
  const uint64_t refused_before = cluster_->shard(0).Stats().pushes_refused();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(Call(hetps::v1::METHOD_HELLO, Hello(rank, 900 + rank)).ok());
    hetps::v1::PushRequest again = Push({item}, 0, rank);
    again.set_incarnation(900 + rank);
    absl::Status status = Call(hetps::v1::METHOD_PUSH, again, Gradient(PartitionBytes(p))).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("earlier run"), absl::string_view::npos) << status;
    EXPECT_NE(status.message().find("tensor 't'"), absl::string_view::npos) << status;
  }
  EXPECT_EQ(Read(item), trained);
  EXPECT_EQ(cluster_->shard(0).Stats().pushes_refused(), refused_before + 2);
}

TEST_P(ShardTest, AspPushesOvertakingEachOtherAreAppliedOrRefusedNeverDropped) {
  const hetps::v1::PartitionItem item = DeclareAspPartition("overtaken");
  // 200 pushes in flight at once from one worker to one partition, in reverse sequence order:
  // every push more than 64 below the newest to arrive cannot be told from a retry.
  constexpr int kPushes = 200;
  std::vector<float> ones(16, 1.0f);
  absl::Mutex mu;
  int answered = 0, ok = 0, aborted = 0;
  std::vector<absl::Status> others;
  const uint64_t refused_before = cluster_->shard(0).Stats().pushes_refused();
  for (int i = 0; i < kPushes; ++i) {
    transport::Request request;
    request.method = hetps::v1::METHOD_PUSH;
    request.header = Push({item}, 0, 0, /*sequence=*/kPushes - i).SerializeAsString();
    request.payload = Payload::Borrow(AsBytes(absl::MakeConstSpan(ones)));
    request.deadline = absl::Now() + absl::Seconds(20);
    shard0_->Call(std::move(request), [&](absl::StatusOr<transport::Response> result) {
      absl::MutexLock lock(&mu);
      ++answered;
      if (result.ok()) {
        ++ok;
      } else if (result.status().code() == absl::StatusCode::kAborted) {
        ++aborted;
      } else {
        others.push_back(result.status());
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == kPushes; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
    EXPECT_TRUE(others.empty()) << others[0];
    EXPECT_GT(aborted, 0);  // the order above makes some too old
  }
  // Every push answered OK was applied, once; none answered with an error was.
  const std::pair<float, uint64_t> now = Read(item);
  EXPECT_EQ(now.second, static_cast<uint64_t>(ok));
  EXPECT_FLOAT_EQ(now.first, -static_cast<float>(ok));
  EXPECT_EQ(cluster_->shard(0).Stats().pushes_refused(), refused_before + aborted);
  // The retries of the applied ones are recognised; a refused one sent again as a new push counts.
  ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, kPushes),
                   Payload::Borrow(AsBytes(absl::MakeConstSpan(ones))))
                  .ok());
  EXPECT_EQ(Read(item).second, static_cast<uint64_t>(ok));
  ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, kPushes + 1),
                   Payload::Borrow(AsBytes(absl::MakeConstSpan(ones))))
                  .ok());
  EXPECT_EQ(Read(item).second, static_cast<uint64_t>(ok) + 1);
}

TEST_P(ShardTest, AspSequencesFromTheWireAreChecked) {
  const hetps::v1::PartitionItem item = DeclareAspPartition("sequenced");
  std::vector<float> ones(16, 1.0f);
  auto push = [&](uint64_t sequence) {
    return Call(hetps::v1::METHOD_PUSH, Push({item}, 0, 0, sequence),
                Payload::Borrow(AsBytes(absl::MakeConstSpan(ones))))
        .status();
  };
  EXPECT_EQ(push(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push(~uint64_t{0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push((uint64_t{1} << 32) + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read(item), std::make_pair(0.0f, uint64_t{0}));
  // The forged numbers did not move the window: the worker's real pushes are applied.
  ASSERT_TRUE(push(1).ok());
  ASSERT_TRUE(push(2).ok());
  EXPECT_EQ(Read(item), std::make_pair(-2.0f, uint64_t{2}));
  // A new run of the worker counts from 1 again, and is not taken for a retry.
  ASSERT_TRUE(Call(hetps::v1::METHOD_HELLO, Hello(0, 4242)).ok());
  hetps::v1::PushRequest next_run = Push({item}, 0, 0, 1);
  next_run.set_incarnation(4242);
  ASSERT_TRUE(
      Call(hetps::v1::METHOD_PUSH, next_run, Payload::Borrow(AsBytes(absl::MakeConstSpan(ones))))
          .ok());
  EXPECT_EQ(Read(item), std::make_pair(-3.0f, uint64_t{3}));
}

TEST_P(ShardTest, BadDeclarationsAreRefused) {
  auto expect = [&](const hetps::v1::DeclareRequest& request, absl::StatusCode code,
                    Payload payload = Payload()) {
    absl::Status status = Call(hetps::v1::METHOD_DECLARE, request, std::move(payload)).status();
    EXPECT_EQ(status.code(), code) << status;
  };
  hetps::v1::TensorDecl decl = Decl();
  decl.set_name("");
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl = Decl();
  decl.set_key(key_ + 1);
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl = Decl();
  decl.set_dtype(hetps::v1::DTYPE_UNSPECIFIED);
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl = Decl();
  decl.set_sync_mode(hetps::v1::SYNC_MODE_UNSPECIFIED);
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl = Decl();
  decl.set_name("u");
  decl.set_key(TensorKeyFromName("u"));
  decl.mutable_optimizer()->set_name("no-such-rule");
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  (*decl.mutable_optimizer()->mutable_params())["lr"] = -1;
  decl.mutable_optimizer()->set_name("sgd");
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl = Decl();
  decl.set_name("v");
  decl.set_key(TensorKeyFromName("v"));
  decl.set_partition_elements(30);  // not a multiple of 16
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  decl.set_partition_elements(32);
  decl.mutable_init()->set_kind(hetps::v1::INIT_KIND_UNIFORM);
  decl.mutable_init()->set_a(1);
  decl.mutable_init()->set_b(0);
  expect(DeclareOf(decl), absl::StatusCode::kInvalidArgument);
  // Values for a tensor whose initializer is not "values".
  hetps::v1::DeclareRequest with_values = DeclareOf(Decl());
  with_values.add_value_partitions(mine_[0]);
  expect(with_values, absl::StatusCode::kInvalidArgument, Gradient(PartitionBytes(mine_[0])));
  // Worker rank out of range.
  hetps::v1::DeclareRequest bad_rank = DeclareOf(Decl());
  bad_rank.set_worker_rank(5);
  expect(bad_rank, absl::StatusCode::kInvalidArgument);

  // Same name, other shape: AlreadyExists, and the tensor keeps its shape and values.
  decl = Decl();
  decl.set_num_elements(kElements * 2);
  absl::Status exists = Call(hetps::v1::METHOD_DECLARE, DeclareOf(decl)).status();
  EXPECT_EQ(exists.code(), absl::StatusCode::kAlreadyExists) << exists;
  EXPECT_NE(exists.message().find("100 elements"), absl::string_view::npos) << exists;
  // Declaring identically again is fine.
  absl::StatusOr<transport::Response> again = Call(hetps::v1::METHOD_DECLARE, DeclareOf(Decl()));
  ASSERT_TRUE(again.ok()) << again.status();
  hetps::v1::DeclareResponse response;
  ASSERT_TRUE(response.ParseFromString(again->header));
  EXPECT_FALSE(response.created());
  EXPECT_EQ(response.num_partitions(), 4u);
  EXPECT_EQ(response.owned_partitions(), mine_.size());
  ExpectUnchanged();
  EXPECT_EQ(cluster_->shard(0).Stats().num_tensors(), 1u);
}

// Sizes from the wire are checked by arithmetic before anything is allocated or visited: a
// reservation that would wrap around 64 bits, or billions of tiny partitions, are refused at
// once and the shard keeps serving.
TEST_P(ShardTest, HostileDeclarationSizesAreRefusedByArithmetic) {
  hetps::v1::TensorDecl huge = Decl();
  huge.set_name("huge");
  huge.set_key(TensorKeyFromName("huge"));
  huge.set_num_elements(uint64_t{1} << 62);  // x 4 bytes x 4 (adam) wraps to 0
  huge.set_partition_elements(uint64_t{1} << 40);
  huge.mutable_optimizer()->set_name("adam");
  huge.mutable_optimizer()->clear_params();
  absl::Status status = Call(hetps::v1::METHOD_DECLARE, DeclareOf(huge)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("more than 2^64"), absl::string_view::npos) << status;

  hetps::v1::TensorDecl tiny = Decl();
  tiny.set_name("tiny");
  tiny.set_key(TensorKeyFromName("tiny"));
  tiny.set_partition_elements(16);
  tiny.set_num_elements(uint64_t{16} * ((uint64_t{1} << 32) - 1));  // 4 billion partitions
  const absl::Time start = absl::Now();
  for (int i = 0; i < 2; ++i) {
    status = Call(hetps::v1::METHOD_DECLARE, DeclareOf(tiny)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  }
  // Visiting the partitions took tens of seconds per declaration.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(cluster_->shard(0).Stats().num_tensors(), 1u);
  ExpectUnchanged();
}

TEST_P(ShardTest, BadPushesAreRefusedWithSpecificCodes) {
  const uint32_t p = mine_[0];
  const uint64_t bytes = PartitionBytes(p);
  auto expect = [&](uint32_t method, const google::protobuf::Message& header, Payload payload,
                    absl::StatusCode code) {
    absl::Status status = Call(method, header, std::move(payload)).status();
    EXPECT_EQ(status.code(), code) << status;
  };
  hetps::v1::PartitionItem unknown = Item(p, bytes);
  unknown.set_tensor_key(12345);
  expect(hetps::v1::METHOD_PUSH, Push({unknown}), Gradient(bytes), absl::StatusCode::kNotFound);
  expect(hetps::v1::METHOD_PUSH, Push({Item(4, 16)}), Gradient(16), absl::StatusCode::kOutOfRange);
  expect(hetps::v1::METHOD_PUSH, Push({Item(theirs_[0], PartitionBytes(theirs_[0]))}),
         Gradient(PartitionBytes(theirs_[0])), absl::StatusCode::kFailedPrecondition);
  hetps::v1::PartitionItem wrong_dtype = Item(p, bytes);
  wrong_dtype.set_dtype(hetps::v1::DTYPE_UNSPECIFIED);
  expect(hetps::v1::METHOD_PUSH, Push({wrong_dtype}), Gradient(bytes),
         absl::StatusCode::kInvalidArgument);
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes - 4)}), Gradient(bytes - 4),
         absl::StatusCode::kInvalidArgument);  // size mismatch
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes)}), Gradient(bytes - 4),
         absl::StatusCode::kInvalidArgument);  // payload shorter than announced
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes)}), Gradient(bytes + 4),
         absl::StatusCode::kInvalidArgument);  // payload longer than announced
  expect(hetps::v1::METHOD_PUSH, Push({}), Payload(), absl::StatusCode::kInvalidArgument);
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes)}, 0, /*rank=*/7), Gradient(bytes),
         absl::StatusCode::kInvalidArgument);
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes)}, /*step=*/5), Gradient(bytes),
         absl::StatusCode::kFailedPrecondition);  // too far ahead
  // The same partition twice in one push.
  Payload twice = Gradient(bytes);
  twice.Append(Gradient(bytes));
  expect(hetps::v1::METHOD_PUSH, Push({Item(p, bytes), Item(p, bytes)}), twice,
         absl::StatusCode::kInvalidArgument);
  // A malformed header and an unknown method.
  hetps::v1::PushRequest empty;
  expect(hetps::v1::METHOD_PUSH, empty, Payload(), absl::StatusCode::kInvalidArgument);
  expect(99, empty, Payload(), absl::StatusCode::kUnimplemented);
  ExpectUnchanged();
}

TEST_P(ShardTest, RequestWithOneBadItemAppliesNone) {
  // Both workers push every partition of this shard, but worker 1's request also names an
  // unknown tensor: it must be refused whole, so no step completes.
  std::vector<hetps::v1::PartitionItem> good;
  Payload payload;
  for (uint32_t p : mine_) {
    good.push_back(Item(p, PartitionBytes(p)));
    payload.Append(Gradient(PartitionBytes(p)));
  }
  ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push(good, 0, 0), payload).ok());
  std::vector<hetps::v1::PartitionItem> mixed = good;
  hetps::v1::PartitionItem unknown = Item(0, 4);
  unknown.set_tensor_key(777);
  mixed.push_back(unknown);
  Payload mixed_payload = payload;
  mixed_payload.Append(Gradient(4));
  EXPECT_EQ(Call(hetps::v1::METHOD_PUSH, Push(mixed, 0, 1), mixed_payload).status().code(),
            absl::StatusCode::kNotFound);
  ExpectUnchanged();
  EXPECT_EQ(cluster_->shard(0).Stats().max_version(), 0u);
  // The good request from worker 1 completes the step.
  ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push(good, 0, 1), payload).ok());
  EXPECT_EQ(cluster_->shard(0).Stats().min_version(), 1u);
}

TEST_P(ShardTest, PullOfAVersionThatNeverComesEndsAtTheDeadline) {
  hetps::v1::PullRequest pull;
  pull.set_min_version(1);
  *pull.add_items() = Item(mine_[0], 0);
  const absl::Time start = absl::Now();
  absl::Status status =
      Call(hetps::v1::METHOD_PULL, pull, Payload(), absl::Milliseconds(300)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ExpectUnchanged();
}

TEST_P(ShardTest, StatsReportSizesAndFailures) {
  const hetps::v1::StatsResponse before = cluster_->shard(0).Stats();
  EXPECT_EQ(before.num_tensors(), 1u);
  EXPECT_EQ(before.num_partitions(), mine_.size());
  uint64_t bytes = 0;
  for (uint32_t p : mine_) bytes += PartitionBytes(p);
  EXPECT_EQ(before.parameter_bytes(), bytes);
  EXPECT_EQ(before.optimizer_state_bytes(), 0u);  // sgd keeps no state
  hetps::v1::PushRequest empty;
  EXPECT_FALSE(Call(hetps::v1::METHOD_PUSH, empty).ok());
  EXPECT_EQ(cluster_->shard(0).Stats().failed_requests(), before.failed_requests() + 1);
}

TEST_P(ShardTest, OptimizerChangesAreCheckedAndApplyFromTheirVersion) {
  auto change = [&](uint64_t key, uint64_t from, std::map<std::string, double> params) {
    hetps::v1::SetOptimizerRequest request;
    request.set_tensor_key(key);
    request.set_from_version(from);
    for (const auto& [name, value] : params) (*request.mutable_params())[name] = value;
    return Call(hetps::v1::METHOD_SET_OPTIMIZER, request).status();
  };
  EXPECT_EQ(change(999, 1, {{"lr", 0.5}}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(change(key_, 1, {{"lr", -0.5}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(change(key_, 1, {{"learning_rate", 0.5}}).code(), absl::StatusCode::kInvalidArgument);
  // Turning momentum on would need state the partitions do not have.
  EXPECT_EQ(change(key_, 1, {{"momentum", 0.9}}).code(), absl::StatusCode::kInvalidArgument);
  ExpectUnchanged();
  ASSERT_TRUE(change(key_, 1, {{"lr", 0.5}}).ok());

  std::vector<hetps::v1::PartitionItem> items;
  for (uint32_t p : mine_) items.push_back(Item(p, PartitionBytes(p)));
  for (uint64_t step = 0; step < 2; ++step) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      Payload payload;
      for (uint32_t p : mine_) payload.Append(Gradient(PartitionBytes(p)));
      ASSERT_TRUE(Call(hetps::v1::METHOD_PUSH, Push(items, step, rank), payload).ok());
    }
  }
  hetps::v1::PullRequest pull;
  *pull.add_items() = Item(mine_[0], 0);
  absl::StatusOr<transport::Response> pulled = Call(hetps::v1::METHOD_PULL, pull);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  float first;
  pulled->payload.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&first), 4));
  // Step 0 with lr 0.1, step 1 with lr 0.5; two workers' gradients of 1 each.
  EXPECT_FLOAT_EQ(first, 1.5f - 0.1f * 2 - 0.5f * 2);
  EXPECT_EQ(change(key_, 1, {{"lr", 0.01}}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(ShardTest, SixteenBitItemsCarryTwoBytesPerElement) {
  const uint32_t p = mine_[0];
  const uint64_t elements = PartitionBytes(p) / sizeof(float);
  hetps::v1::PartitionItem item = Item(p, elements * 4);
  item.set_dtype(hetps::v1::DTYPE_BF16);
  EXPECT_EQ(Call(hetps::v1::METHOD_PUSH, Push({item}), Gradient(elements * 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  item.set_num_bytes(elements * 2);
  item.set_dtype(static_cast<hetps::v1::DType>(9));
  EXPECT_EQ(Call(hetps::v1::METHOD_PUSH, Push({item}), Gradient(elements * 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpectUnchanged();
  item.set_dtype(hetps::v1::DTYPE_FP16);
  absl::Status pushed = Call(hetps::v1::METHOD_PUSH, Push({item}), Gradient(elements * 2)).status();
  EXPECT_TRUE(pushed.ok()) << pushed;
  // A bf16 pull returns two bytes per element.
  hetps::v1::PullRequest pull;
  hetps::v1::PartitionItem wanted = Item(p, 0);
  wanted.set_dtype(hetps::v1::DTYPE_BF16);
  *pull.add_items() = wanted;
  absl::StatusOr<transport::Response> pulled = Call(hetps::v1::METHOD_PULL, pull);
  ASSERT_TRUE(pulled.ok());
  EXPECT_EQ(pulled->payload.size(), elements * 2);
}

TEST_P(ShardTest, EchoReturnsTheAskedBytesWithoutTouchingTensors) {
  hetps::v1::EchoRequest echo;
  echo.set_reply_bytes(8);
  absl::StatusOr<transport::Response> zeros = Call(hetps::v1::METHOD_ECHO, echo);
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(zeros->payload.ToString(), std::string(8, '\0'));
  std::vector<float> sent = {1.5f, -2.0f, 3.25f};
  echo.set_reply_bytes(12);
  absl::StatusOr<transport::Response> back =
      Call(hetps::v1::METHOD_ECHO, echo, Payload::Borrow(AsBytes(absl::MakeConstSpan(sent))));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->payload.ToString(),
            Payload::Borrow(AsBytes(absl::MakeConstSpan(sent))).ToString());
  echo.set_reply_bytes(0);  // an acknowledgement only
  absl::StatusOr<transport::Response> ack =
      Call(hetps::v1::METHOD_ECHO, echo, Payload::Borrow(AsBytes(absl::MakeConstSpan(sent))));
  ASSERT_TRUE(ack.ok());
  EXPECT_TRUE(ack->payload.empty());
  echo.set_reply_bytes(uint64_t{1} << 40);
  EXPECT_EQ(Call(hetps::v1::METHOD_ECHO, echo).status().code(),
            absl::StatusCode::kResourceExhausted);
  ExpectUnchanged();
}

INSTANTIATE_TEST_SUITE_P(Transports, ShardTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
