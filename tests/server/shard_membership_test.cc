// Shards finding each other in etcd (Debian's etcd-server, started for the test on 127.0.0.1):
// what a shard writes into the group records, and when.
#include <signal.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "server/etcd_client.h"
#include "server/shard.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/transports.h"
#include "transport/transport.h"

namespace hetps::server {
namespace {

using ::testing::IsEmpty;

// The fields of group 0's record in etcd: epoch, server, backup, backup's lease, server's lease.
std::vector<std::string> GroupRecordFields(EtcdClient& etcd) {
  absl::StatusOr<std::optional<EtcdClient::Value>> value = etcd.Get("/hetps/hetps/groups/0");
  if (!value.ok() || !value->has_value()) return {};
  return absl::StrSplit((*value)->value, ' ');
}

using Fields = std::vector<std::string>;

// Reads group 0's record every 20 ms for `duration`: the first fields read that fail `holds`
// (empty if it held throughout).
Fields FirstBreach(EtcdClient& etcd, absl::Duration duration,
                   absl::FunctionRef<bool(const Fields&)> holds) {
  for (const absl::Time end = absl::Now() + duration; absl::Now() < end;) {
    Fields fields = GroupRecordFields(etcd);
    if (fields.size() != 5 || !holds(fields)) {
      fields.push_back("(read at " + absl::FormatTime(absl::Now()) + ")");
      return fields;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return {};
}

// Reads group 0's record until `done` (at most 20 s): the last fields read.
Fields AwaitRecord(EtcdClient& etcd, absl::FunctionRef<bool(const Fields&)> done) {
  Fields fields;
  testing::AwaitCondition(
      [&] {
        fields = GroupRecordFields(etcd);
        return fields.size() == 5 && done(fields);
      },
      absl::Seconds(20));
  return fields;
}

// A request handed to a shard, and its answer once it comes.
class Answer {
 public:
  static std::shared_ptr<Answer> Ask(Shard& shard, uint32_t method,
                                     const google::protobuf::Message& header) {
    auto answer = std::make_shared<Answer>();
    transport::Request request;
    request.method = method;
    request.header = header.SerializeAsString();
    request.deadline = absl::Now() + absl::Seconds(30);
    shard.HandleRequest(std::move(request), [answer](absl::StatusOr<transport::Response> result) {
      answer->status_ = result.status();
      answer->done_.Notify();
    });
    return answer;
  }
  // The answer's status; DeadlineExceeded if none came within `timeout`.
  absl::Status Await(absl::Duration timeout) {
    if (!done_.WaitForNotificationWithTimeout(timeout)) {
      return absl::DeadlineExceededError("the shard did not answer");
    }
    return status_;
  }

 private:
  absl::Notification done_;
  absl::Status status_;  // written before done_ is notified
};

// A BSP tensor of one partition (16 values) placed on shard 0 of 2.
hetps::v1::DeclareRequest DeclareOnShard0() {
  std::string name;
  for (int i = 0; name.empty() || ShardOfPartition(TensorKeyFromName(name), 0, 2) != 0; ++i) {
    name = absl::StrCat("w", i);
  }
  hetps::v1::DeclareRequest request;
  hetps::v1::TensorDecl* decl = request.mutable_tensor();
  decl->set_name(name);
  decl->set_key(TensorKeyFromName(name));
  decl->set_num_elements(16);
  decl->set_partition_elements(16);
  decl->set_dtype(hetps::v1::DTYPE_FP32);
  decl->set_sync_mode(hetps::v1::SYNC_MODE_BSP);
  decl->mutable_init()->set_kind(hetps::v1::INIT_KIND_CONSTANT);
  decl->mutable_optimizer()->set_name("sgd");
  (*decl->mutable_optimizer()->mutable_params())["lr"] = 0.1;
  return request;
}

hetps::v1::PullRequest PullOf(const hetps::v1::TensorDecl& decl, uint64_t min_version) {
  hetps::v1::PullRequest pull;
  pull.set_min_version(min_version);
  hetps::v1::PartitionItem* item = pull.add_items();
  item->set_tensor_key(decl.key());
  item->set_dtype(hetps::v1::DTYPE_FP32);
  return pull;
}

// Each test has an etcd of its own (skipped where Debian's etcd-server is not installed), a
// client of it, and a gRPC transport for the shards it starts.
class ShardMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::EtcdProcess>> etcd = testing::EtcdProcess::Start();
    if (etcd.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << etcd.status();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Connect(etcd_->endpoint());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Shard `index` of 2, replicated, whose lease ends after 400 ms (it watches every 100).
  ShardOptions Replicated(uint32_t index) const {
    ShardOptions options;
    options.shard_index = index;
    options.num_shards = 2;
    options.replicas = 2;
    options.etcd = etcd_->endpoint();
    options.lease_ttl = absl::Milliseconds(400);
    options.peer_transport = transport_.get();
    return options;
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::shared_ptr<transport::Transport> transport_ = testing::NewTestTransport("grpc");
};

// At a job's start, the backup names its lease in its primary's group record only once it is
// registered: a primary that finds a backup's lease in the record but the backup not
// registered takes it for gone, and its partitions go on without copies (seen in CI: shard 1
// wrote its lease 240 ms before it registered, and shard 0 dropped it).
TEST_F(ShardMembershipTest, ABackupIsNotTakenForGoneBeforeItRegisters) {
  Shard primary(Replicated(0));
  Shard backup(Replicated(1));
  ASSERT_OK(primary.JoinCluster());
  ASSERT_OK(primary.Register("127.0.0.1:1"));
  ASSERT_OK(backup.JoinCluster());  // its watcher runs; not registered yet

  // Ten watch periods of both shards: shard 1 stays named, with no lease yet.
  EXPECT_THAT(FirstBreach(*client_, absl::Seconds(1),
                          [](const Fields& f) { return f[2] == "1" && f[3] == "0"; }),
              IsEmpty())
      << "shard 0 dropped its backup, or shard 1 named its lease, before it registered";
  // Registered, it names its lease, and stays the backup.
  ASSERT_OK(backup.Register("127.0.0.1:2"));
  const Fields fields = AwaitRecord(*client_, [](const Fields& f) { return f[3] != "0"; });
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_NE(fields[3], "0") << "shard 1 never named its lease";
  EXPECT_THAT(
      FirstBreach(*client_, absl::Milliseconds(500), [](const Fields& f) { return f[2] == "1"; }),
      IsEmpty())
      << "shard 0 dropped its registered backup";
}

// A shard that serves a group with no backup (restored from a checkpoint, or a record of the
// last run names none) copies it to the next shard only once it is registered, and takes no
// update before: a backup takes a server that sent it changes but is not registered for gone.
// Seen in a test: a restored shard copied its partitions 40 ms before it registered, its new
// backup took them over, and the first step after the restore waited until its deadline.
TEST_F(ShardMembershipTest, AServerIsNotTakenForGoneBeforeItRegisters) {
  // The last run's record: shard 0 served its partitions, with no backup.
  ASSERT_OK(client_->Put("/hetps/hetps/groups/0", "3 0 - 0 1"));
  Shard backup(Replicated(1));
  ASSERT_OK(backup.JoinCluster());
  auto listener = transport_->Listen("127.0.0.1:0", &backup);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_OK(backup.Register((*listener)->address()));
  Shard primary(Replicated(0));
  // A tensor the shard holds before it joins, as a restored one does.
  const hetps::v1::DeclareRequest declare = DeclareOnShard0();
  ASSERT_OK(Answer::Ask(primary, hetps::v1::METHOD_DECLARE, declare)->Await(absl::Seconds(10)));
  ASSERT_OK(primary.JoinCluster());  // its watcher runs; not registered yet

  hetps::v1::PushRequest push;
  push.set_step(0);
  EXPECT_EQ(Answer::Ask(primary, hetps::v1::METHOD_PUSH, push)->Await(absl::Seconds(10)).code(),
            absl::StatusCode::kUnavailable)
      << "an update taken before the registration";
  // Ten watch periods of both shards: shard 0 still serves its partitions (a copy would name
  // its backup first, and then shard 1 took them over).
  EXPECT_THAT(FirstBreach(*client_, absl::Seconds(1),
                          [](const Fields& f) { return f[1] == "0" && f[2] == "-"; }),
              IsEmpty())
      << "shard 0 copied its partitions before it registered, or shard 1 took them over";
  // Registered, it copies them to shard 1 and names it the backup, and goes on serving.
  ASSERT_OK(primary.Register("127.0.0.1:1"));
  const Fields fields =
      AwaitRecord(*client_, [](const Fields& f) { return f[2] == "1" && f[3] != "0"; });
  ASSERT_EQ(fields.size(), 5u);
  ASSERT_EQ(fields[2], "1") << "shard 0 never named its backup";
  EXPECT_THAT(
      FirstBreach(*client_, absl::Milliseconds(500), [](const Fields& f) { return f[1] == "0"; }),
      IsEmpty())
      << "shard 1 took over the partitions of a registered shard 0";
}

// A shard whose partitions another took over while it ran (etcd names the other) answers what
// waits for them, and every later request, Unavailable: workers retry those at the other copy.
// It kept them waiting until their deadlines, and went on serving copies the other one no
// longer updates.
TEST_F(ShardMembershipTest, AShardTakenOverWhileItRunsSendsItsWorkersToTheOtherCopy) {
  Shard shard(Replicated(0));
  ASSERT_OK(shard.JoinCluster());
  ASSERT_OK(shard.Register("127.0.0.1:1"));
  const hetps::v1::DeclareRequest declare = DeclareOnShard0();
  ASSERT_OK(Answer::Ask(shard, hetps::v1::METHOD_DECLARE, declare)->Await(absl::Seconds(10)));
  ASSERT_OK(Answer::Ask(shard, hetps::v1::METHOD_PULL, PullOf(declare.tensor(), 0))
                ->Await(absl::Seconds(10)));
  std::shared_ptr<Answer> waiting =
      Answer::Ask(shard, hetps::v1::METHOD_PULL, PullOf(declare.tensor(), 5));

  // Shard 1 took group 0 over (as etcd says once it has).
  const Fields fields = GroupRecordFields(*client_);
  ASSERT_EQ(fields.size(), 5u);
  uint64_t epoch = 0;
  ASSERT_TRUE(absl::SimpleAtoi(fields[0], &epoch));
  ASSERT_OK(client_->Put("/hetps/hetps/groups/0", absl::StrCat(epoch + 1, " 1 - 0 0")));

  const absl::Status let_go = waiting->Await(absl::Seconds(10));
  EXPECT_EQ(let_go.code(), absl::StatusCode::kUnavailable) << let_go;
  EXPECT_TRUE(
      absl::StrContains(let_go.message(), "shard 1 serves the partitions placed on shard 0"))
      << let_go;
  const absl::Status later = Answer::Ask(shard, hetps::v1::METHOD_PULL, PullOf(declare.tensor(), 0))
                                 ->Await(absl::Seconds(10));
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable) << later;
  EXPECT_TRUE(absl::StrContains(later.message(), "served by shard 1 since a takeover")) << later;
}

// A shard told to stop while etcd does not answer (SIGTERM during an etcd outage) waits for
// etcd no longer than its lease: its watcher's read and its lease's renewal are cancelled, and
// the lease is revoked only while it holds. It took 10 to 15 s (the etcd client's 5 s call
// timeout, two or three times over).
TEST_F(ShardMembershipTest, AShardStopsWithinItsLeaseWhileEtcdIsSilent) {
  ShardOptions options = Replicated(0);  // a watcher runs only where there is a backup to watch
  options.lease_ttl = absl::Seconds(1);
  Shard shard(options);
  ASSERT_OK(shard.JoinCluster());
  ASSERT_OK(shard.Register("127.0.0.1:1"));
  ASSERT_TRUE(etcd_->process().Stop());
  // Long enough for the watcher (every quarter lease) and the renewal (every third) to have
  // sent what etcd now leaves unanswered.
  absl::SleepFor(absl::Milliseconds(600));
  const absl::Time stopping = absl::Now();
  shard.Stop();
  EXPECT_LT(absl::Now() - stopping, absl::Seconds(3));
  etcd_->process().Signal(SIGCONT);
}

}  // namespace
}  // namespace hetps::server
