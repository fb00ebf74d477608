// Every kind of bad request a shard can get is answered with its own error code, changes
// nothing, and leaves the shard serving the others. Requests are sent raw, as a faulty or
// hostile client would, over each transport.
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/server/shard_test_fixture.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using transport::AsBytes;
using transport::Payload;

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
  ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push(good, 0, 0), payload));
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
  ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push(good, 0, 1), payload));
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
  ASSERT_OK(change(key_, 1, {{"lr", 0.5}}));

  std::vector<hetps::v1::PartitionItem> items;
  for (uint32_t p : mine_) items.push_back(Item(p, PartitionBytes(p)));
  for (uint64_t step = 0; step < 2; ++step) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      Payload payload;
      for (uint32_t p : mine_) payload.Append(Gradient(PartitionBytes(p)));
      ASSERT_OK(Call(hetps::v1::METHOD_PUSH, Push(items, step, rank), payload));
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
  ASSERT_OK(pulled);
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
  ASSERT_OK(back);
  EXPECT_EQ(back->payload.ToString(),
            Payload::Borrow(AsBytes(absl::MakeConstSpan(sent))).ToString());
  echo.set_reply_bytes(0);  // an acknowledgement only
  absl::StatusOr<transport::Response> ack =
      Call(hetps::v1::METHOD_ECHO, echo, Payload::Borrow(AsBytes(absl::MakeConstSpan(sent))));
  ASSERT_OK(ack);
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
