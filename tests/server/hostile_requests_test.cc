// Malformed, oversized, out-of-order and forged requests, sent raw to a shard over every
// transport as a hostile or broken client would: each gets its own error code, none changes
// anything the shard holds (a digest of its whole state), and a well-behaved worker still
// trains correctly afterwards.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/server/shard_test_fixture.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using transport::Payload;

constexpr uint64_t kRun0 = 100, kRun1 = 101;

struct Case {
  std::string what;
  uint32_t method;
  std::string header;
  std::string payload;
  absl::StatusCode code;
};

class HostileRequestsTest : public ShardTest {
 protected:
  // One call on the raw connection to shard 0, header and payload as bytes.
  absl::Status CallRaw(uint32_t method, const std::string& header,
                       const std::string& payload = "") {
    transport::Request request;
    request.method = method;
    request.header = header;
    request.payload = Payload::Copy(
        transport::ByteSpan(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
    request.deadline = absl::Now() + absl::Seconds(10);
    return testing::CallAndWait(*shard0_, std::move(request)).status();
  }

  static hetps::v1::DeclareRequest Declare(const std::string& name, uint64_t elements,
                                           hetps::v1::SyncMode sync) {
    hetps::v1::DeclareRequest declare;
    hetps::v1::TensorDecl* decl = declare.mutable_tensor();
    decl->set_name(name);
    decl->set_key(TensorKeyFromName(name));
    decl->set_num_elements(elements);
    decl->set_dtype(hetps::v1::DTYPE_FP32);
    decl->set_sync_mode(sync);
    decl->set_partition_elements(32);
    decl->mutable_init()->set_kind(hetps::v1::INIT_KIND_CONSTANT);
    decl->mutable_init()->set_a(1.5);
    decl->mutable_optimizer()->set_name("sgd");
    (*decl->mutable_optimizer()->mutable_params())["lr"] = 0.1;
    return declare;
  }
  static hetps::v1::PartitionItem ItemOf(const std::string& name, uint32_t partition,
                                         uint64_t bytes) {
    hetps::v1::PartitionItem item;
    item.set_tensor_key(TensorKeyFromName(name));
    item.set_partition(partition);
    item.set_dtype(hetps::v1::DTYPE_FP32);
    item.set_num_bytes(bytes);
    return item;
  }
  static uint64_t Bytes(uint32_t partition) { return (partition == 3 ? 4 : 32) * sizeof(float); }
  static std::string Ones(uint64_t bytes) {
    const std::vector<float> ones(bytes / sizeof(float), 1.0f);
    return std::string(reinterpret_cast<const char*>(ones.data()), bytes);
  }
  // A push of every partition "t" has on shard 0.
  hetps::v1::PushRequest PushOfT(uint32_t rank, uint64_t run, uint64_t step,
                                 std::string* payload) const {
    hetps::v1::PushRequest push;
    push.set_worker_rank(rank);
    push.set_incarnation(run);
    push.set_step(step);
    push.set_sequence(step + 1);
    payload->clear();
    for (uint32_t p : mine_) {
      *push.add_items() = ItemOf("t", p, Bytes(p));
      *payload += Ones(Bytes(p));
    }
    return push;
  }
};

TEST_P(HostileRequestsTest, EachGetsItsCodeAndTheShardsStateIsUnchanged) {
  using Code = absl::StatusCode;
  using hetps::v1::Method;
  // A shard with some history: both workers said hello, "t" (BSP) applied step 0, "a" (ASP)
  // took one push, and barrier 1 completed.
  ASSERT_OK(CallRaw(hetps::v1::METHOD_HELLO, Hello(0, kRun0).SerializeAsString()));
  ASSERT_OK(CallRaw(hetps::v1::METHOD_HELLO, Hello(1, kRun1).SerializeAsString()));
  ASSERT_OK(CallRaw(hetps::v1::METHOD_DECLARE,
                    Declare("t", kElements, hetps::v1::SYNC_MODE_BSP).SerializeAsString()));
  std::string a_name;
  for (int i = 0; a_name.empty() || ShardOfPartition(TensorKeyFromName(a_name), 0, 2) != 0; ++i) {
    a_name = absl::StrCat("a", i);
  }
  ASSERT_OK(CallRaw(hetps::v1::METHOD_DECLARE,
                    Declare(a_name, 16, hetps::v1::SYNC_MODE_ASP).SerializeAsString()));
  std::string payload;
  for (auto [rank, run] : {std::pair{0u, kRun0}, std::pair{1u, kRun1}}) {
    ASSERT_OK(CallRaw(hetps::v1::METHOD_PUSH, PushOfT(rank, run, 0, &payload).SerializeAsString(),
                      payload));
  }
  hetps::v1::PushRequest asp;
  asp.set_worker_rank(0);
  asp.set_incarnation(kRun0);
  asp.set_sequence(10);
  *asp.add_items() = ItemOf(a_name, 0, 64);
  ASSERT_OK(CallRaw(hetps::v1::METHOD_PUSH, asp.SerializeAsString(), Ones(64)));
  hetps::v1::BarrierRequest barrier;
  barrier.set_generation(1);
  std::vector<std::thread> arrivals;
  for (auto [rank, run] : {std::pair{0u, kRun0}, std::pair{1u, kRun1}}) {
    barrier.set_worker_rank(rank);
    barrier.set_incarnation(run);
    arrivals.emplace_back([this, header = barrier.SerializeAsString()] {
      EXPECT_OK(CallRaw(hetps::v1::METHOD_BARRIER, header));
    });
  }
  for (std::thread& arrival : arrivals) arrival.join();
  const uint64_t before = cluster_->shard(0).StateDigest();

  const uint32_t p = mine_[0];
  std::vector<Case> cases;
  auto add = [&](std::string what, uint32_t method, const google::protobuf::Message& header,
                 std::string bytes, Code code) {
    cases.push_back({std::move(what), method, header.SerializeAsString(), std::move(bytes), code});
  };
  // Hello.
  hetps::v1::HelloRequest hello = Hello(0, kRun0);
  hello.set_protocol_version(99);
  add("hello: another protocol version", hetps::v1::METHOD_HELLO, hello, "",
      Code::kFailedPrecondition);
  hello = Hello(0, kRun0);
  hello.set_job_id("other");
  add("hello: another job", hetps::v1::METHOD_HELLO, hello, "", Code::kFailedPrecondition);
  hello = Hello(0, kRun0);
  hello.set_world_size(3);
  add("hello: another world size", hetps::v1::METHOD_HELLO, hello, "", Code::kFailedPrecondition);
  add("hello: rank out of range", hetps::v1::METHOD_HELLO, Hello(2, kRun0), "",
      Code::kInvalidArgument);
  hello = Hello(0, kRun0);
  hello.set_shard_index(1);
  add("hello: wrong shard", hetps::v1::METHOD_HELLO, hello, "", Code::kFailedPrecondition);
  add("hello: no run", hetps::v1::METHOD_HELLO, Hello(0, 0), "", Code::kInvalidArgument);
  cases.push_back({"hello: not a message", hetps::v1::METHOD_HELLO, "\xff\xff\xff", "",
                   Code::kInvalidArgument});
  // Declarations.
  cases.push_back({"declare: not a message", hetps::v1::METHOD_DECLARE, "\x0a\xff", "",
                   Code::kInvalidArgument});
  hetps::v1::DeclareRequest declare = Declare("", 8, hetps::v1::SYNC_MODE_BSP);
  add("declare: no name", hetps::v1::METHOD_DECLARE, declare, "", Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->set_key(1);
  add("declare: key of another name", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->set_dtype(hetps::v1::DTYPE_BF16);
  add("declare: master copy not fp32", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kInvalidArgument);
  declare = Declare("u", 16, static_cast<hetps::v1::SyncMode>(7));
  add("declare: unknown sync mode", hetps::v1::METHOD_DECLARE, declare, "", Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->mutable_optimizer()->set_name("nope");
  add("declare: unknown optimizer", hetps::v1::METHOD_DECLARE, declare, "", Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  (*declare.mutable_tensor()->mutable_optimizer()->mutable_params())["lr"] = -1;
  add("declare: negative learning rate", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->set_partition_elements(30);
  add("declare: unaligned partitions", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kInvalidArgument);
  add("declare: same name, other size", hetps::v1::METHOD_DECLARE,
      Declare("t", 2 * kElements, hetps::v1::SYNC_MODE_BSP), "", Code::kAlreadyExists);
  declare = Declare("u", uint64_t{1} << 62, hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->set_partition_elements(uint64_t{1} << 40);
  add("declare: size that wraps 64 bits", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kResourceExhausted);
  declare = Declare("u", 16 * ((uint64_t{1} << 32) - 1), hetps::v1::SYNC_MODE_BSP);
  declare.mutable_tensor()->set_partition_elements(16);
  add("declare: four billion partitions", hetps::v1::METHOD_DECLARE, declare, "",
      Code::kResourceExhausted);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.add_value_partitions(0);
  add("declare: values for a constant initializer", hetps::v1::METHOD_DECLARE, declare, Ones(64),
      Code::kInvalidArgument);
  declare = Declare("u", 16, hetps::v1::SYNC_MODE_BSP);
  declare.set_worker_rank(9);
  add("declare: rank out of range", hetps::v1::METHOD_DECLARE, declare, "", Code::kInvalidArgument);
  // Pushes.
  auto push_of = [&](std::vector<hetps::v1::PartitionItem> items, uint64_t step = 1) {
    hetps::v1::PushRequest push;
    push.set_worker_rank(0);
    push.set_incarnation(kRun0);
    push.set_step(step);
    push.set_sequence(11);
    for (auto& item : items) *push.add_items() = item;
    return push;
  };
  hetps::v1::PartitionItem item = ItemOf("t", p, Bytes(p));
  item.set_tensor_key(12345);
  add("push: unknown tensor", hetps::v1::METHOD_PUSH, push_of({item}), Ones(Bytes(p)),
      Code::kNotFound);
  add("push: partition out of range", hetps::v1::METHOD_PUSH, push_of({ItemOf("t", 9, 16)}),
      Ones(16), Code::kOutOfRange);
  for (uint32_t q = 0; q < 4; ++q) {
    if (ShardOfPartition(TensorKeyFromName("t"), q, 2) != 0) {
      add("push: another shard's partition", hetps::v1::METHOD_PUSH,
          push_of({ItemOf("t", q, Bytes(q))}), Ones(Bytes(q)), Code::kFailedPrecondition);
      break;
    }
  }
  item = ItemOf("t", p, Bytes(p));
  item.set_dtype(static_cast<hetps::v1::DType>(9));
  add("push: unknown dtype", hetps::v1::METHOD_PUSH, push_of({item}), Ones(Bytes(p)),
      Code::kInvalidArgument);
  add("push: wrong size for the partition", hetps::v1::METHOD_PUSH,
      push_of({ItemOf("t", p, Bytes(p) - 4)}), Ones(Bytes(p) - 4), Code::kInvalidArgument);
  add("push: payload shorter than announced", hetps::v1::METHOD_PUSH,
      push_of({ItemOf("t", p, Bytes(p))}), Ones(Bytes(p) - 4), Code::kInvalidArgument);
  add("push: payload longer than announced", hetps::v1::METHOD_PUSH,
      push_of({ItemOf("t", p, Bytes(p))}), Ones(Bytes(p) + 4), Code::kInvalidArgument);
  add("push: no items", hetps::v1::METHOD_PUSH, push_of({}), "", Code::kInvalidArgument);
  add("push: one partition twice", hetps::v1::METHOD_PUSH,
      push_of({ItemOf("t", p, Bytes(p)), ItemOf("t", p, Bytes(p))}), Ones(2 * Bytes(p)),
      Code::kInvalidArgument);
  add("push: step too far ahead", hetps::v1::METHOD_PUSH, push_of({ItemOf("t", p, Bytes(p))}, 9),
      Ones(Bytes(p)), Code::kFailedPrecondition);
  hetps::v1::PushRequest forged = push_of({ItemOf("t", p, Bytes(p))});
  forged.set_worker_rank(5);
  add("push: rank out of range", hetps::v1::METHOD_PUSH, forged, Ones(Bytes(p)),
      Code::kInvalidArgument);
  forged = push_of({ItemOf("t", p, Bytes(p))});
  forged.set_incarnation(0);
  add("push: no run", hetps::v1::METHOD_PUSH, forged, Ones(Bytes(p)), Code::kInvalidArgument);
  forged.set_incarnation(kRun1);
  add("push: another worker's run", hetps::v1::METHOD_PUSH, forged, Ones(Bytes(p)),
      Code::kFailedPrecondition);
  forged = push_of({ItemOf("t", p, Bytes(p))}, 0);
  forged.set_worker_rank(1);
  forged.set_incarnation(kRun1);
  add("push: an applied step again, forged as another run's", hetps::v1::METHOD_PUSH, forged,
      Ones(Bytes(p)), Code::kOk);  // a retry of worker 1's step 0: acknowledged, not applied
  hetps::v1::PushRequest asp_push = asp;
  asp_push.set_sequence(0);
  add("push: ASP sequence 0", hetps::v1::METHOD_PUSH, asp_push, Ones(64), Code::kInvalidArgument);
  asp_push.set_sequence(~uint64_t{0});
  add("push: ASP sequence far ahead", hetps::v1::METHOD_PUSH, asp_push, Ones(64),
      Code::kInvalidArgument);
  cases.push_back(
      {"push: not a message", hetps::v1::METHOD_PUSH, "\x22\x05\x08", "", Code::kInvalidArgument});
  // Pulls, barriers, hyperparameters, echo, unknown methods.
  hetps::v1::PullRequest pull;
  *pull.add_items() = ItemOf("t", p, 0);
  add("pull: with a payload", hetps::v1::METHOD_PULL, pull, "xx", Code::kInvalidArgument);
  pull.mutable_items(0)->set_tensor_key(777);
  add("pull: unknown tensor", hetps::v1::METHOD_PULL, pull, "", Code::kNotFound);
  barrier.set_worker_rank(0);
  barrier.set_incarnation(kRun0);
  barrier.set_generation(0);
  add("barrier: generation 0", hetps::v1::METHOD_BARRIER, barrier, "", Code::kInvalidArgument);
  barrier.set_generation(~uint64_t{0});
  add("barrier: generation far ahead", hetps::v1::METHOD_BARRIER, barrier, "",
      Code::kInvalidArgument);
  barrier.set_generation(2);
  barrier.set_incarnation(0);
  add("barrier: no run", hetps::v1::METHOD_BARRIER, barrier, "", Code::kInvalidArgument);
  hetps::v1::SetOptimizerRequest change;
  change.set_tensor_key(999);
  change.set_from_version(3);
  add("set optimizer: unknown tensor", hetps::v1::METHOD_SET_OPTIMIZER, change, "",
      Code::kNotFound);
  change.set_tensor_key(TensorKeyFromName("t"));
  (*change.mutable_params())["momentum"] = 0.9;
  add("set optimizer: changes the state layout", hetps::v1::METHOD_SET_OPTIMIZER, change, "",
      Code::kInvalidArgument);
  change.clear_params();
  (*change.mutable_params())["lr"] = 0.5;
  change.set_from_version(0);
  add("set optimizer: for an applied step", hetps::v1::METHOD_SET_OPTIMIZER, change, "",
      Code::kFailedPrecondition);
  hetps::v1::EchoRequest echo;
  echo.set_reply_bytes(uint64_t{1} << 40);
  add("echo: a terabyte", hetps::v1::METHOD_ECHO, echo, "", Code::kResourceExhausted);
  add("unknown method", 99, hetps::v1::StatsRequest(), "", Code::kUnimplemented);
  add("method 0", 0, hetps::v1::StatsRequest(), "", Code::kUnimplemented);

  ASSERT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    const absl::Status status = CallRaw(c.method, c.header, c.payload);
    EXPECT_EQ(status.code(), c.code) << c.what << ": " << status;
  }
  EXPECT_EQ(cluster_->shard(0).StateDigest(), before) << "a refused request changed the shard";

  // A well-behaved worker pair still trains: step 1 of "t" on shard 0.
  for (auto [rank, run] : {std::pair{0u, kRun0}, std::pair{1u, kRun1}}) {
    ASSERT_OK(CallRaw(hetps::v1::METHOD_PUSH, PushOfT(rank, run, 1, &payload).SerializeAsString(),
                      payload));
  }
  hetps::v1::PullRequest after;
  after.set_min_version(2);
  *after.add_items() = ItemOf("t", p, 0);
  transport::Request request;
  request.method = hetps::v1::METHOD_PULL;
  request.header = after.SerializeAsString();
  request.deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<transport::Response> pulled = testing::CallAndWait(*shard0_, std::move(request));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  float first = 0;
  pulled->payload.CopyTo(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(&first), 4));
  EXPECT_FLOAT_EQ(first, 1.5f - 0.1f * 2 - 0.1f * 2);  // two steps of two workers' gradients of 1
}

INSTANTIATE_TEST_SUITE_P(Transports, HostileRequestsTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::server
