// Shards finding each other in etcd (Debian's etcd-server, started for the test on 127.0.0.1):
// what a shard writes into the group records, and when.
#include <signal.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "server/shard.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/transports.h"

namespace hetps::server {
namespace {

// The fields of group 0's record in etcd: epoch, server, backup, backup's lease, server's lease.
std::vector<std::string> GroupRecordFields(EtcdClient& etcd) {
  absl::StatusOr<std::optional<EtcdClient::Value>> value = etcd.Get("/hetps/hetps/groups/0");
  if (!value.ok() || !value->has_value()) return {};
  return absl::StrSplit((*value)->value, ' ');
}

// At a job's start, the backup names its lease in its primary's group record only once it is
// registered: a primary that finds a backup's lease in the record but the backup not
// registered takes it for gone, and its partitions go on without copies (seen in CI: shard 1
// wrote its lease 240 ms before it registered, and shard 0 dropped it).
TEST(ShardMembershipTest, ABackupIsNotTakenForGoneBeforeItRegisters) {
  auto etcd = testing::EtcdProcess::Start();
  if (etcd.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << etcd.status();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  std::shared_ptr<transport::Transport> transport = testing::NewTestTransport("grpc");
  ShardOptions options;
  options.num_shards = 2;
  options.replicas = 2;
  options.etcd = (*etcd)->endpoint();
  options.lease_ttl = absl::Milliseconds(400);  // both watch every 100 ms
  options.peer_transport = transport.get();
  options.shard_index = 0;
  Shard primary(options);
  options.shard_index = 1;
  Shard backup(options);
  ASSERT_OK(primary.JoinCluster());
  ASSERT_OK(primary.Register("127.0.0.1:1"));
  ASSERT_OK(backup.JoinCluster());  // its watcher runs; not registered yet
  auto client = EtcdClient::Connect((*etcd)->endpoint());
  ASSERT_TRUE(client.ok()) << client.status();

  // Ten watch periods of both shards: shard 1 stays named, with no lease yet.
  for (const absl::Time end = absl::Now() + absl::Seconds(1); absl::Now() < end;) {
    const std::vector<std::string> fields = GroupRecordFields(**client);
    ASSERT_EQ(fields.size(), 5u);
    ASSERT_EQ(fields[2], "1") << "shard 0 dropped its backup before it registered";
    ASSERT_EQ(fields[3], "0") << "shard 1 named its lease before it registered";
    absl::SleepFor(absl::Milliseconds(20));
  }
  // Registered, it names its lease, and stays the backup.
  ASSERT_OK(backup.Register("127.0.0.1:2"));
  std::vector<std::string> fields;
  testing::AwaitCondition(
      [&] {
        fields = GroupRecordFields(**client);
        return fields.size() == 5 && fields[3] != "0";
      },
      absl::Seconds(20));
  ASSERT_EQ(fields.size(), 5u);
  EXPECT_NE(fields[3], "0") << "shard 1 never named its lease";
  for (const absl::Time end = absl::Now() + absl::Milliseconds(500); absl::Now() < end;) {
    fields = GroupRecordFields(**client);
    ASSERT_EQ(fields.size(), 5u);
    EXPECT_EQ(fields[2], "1") << "shard 0 dropped its registered backup";
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// A shard told to stop while etcd does not answer (SIGTERM during an etcd outage) waits for
// etcd no longer than its lease: its watcher's read and its lease's renewal are cancelled, and
// the lease is revoked only while it holds. It took 10 to 15 s (the etcd client's 5 s call
// timeout, two or three times over).
TEST(ShardMembershipTest, AShardStopsWithinItsLeaseWhileEtcdIsSilent) {
  auto etcd = testing::EtcdProcess::Start();
  if (etcd.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP() << etcd.status();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  std::shared_ptr<transport::Transport> transport = testing::NewTestTransport("grpc");
  ShardOptions options;
  options.num_shards = 2;  // a watcher runs only where there is a backup to watch for
  options.replicas = 2;
  options.etcd = (*etcd)->endpoint();
  options.lease_ttl = absl::Seconds(1);
  options.peer_transport = transport.get();
  Shard shard(options);
  ASSERT_OK(shard.JoinCluster());
  ASSERT_OK(shard.Register("127.0.0.1:1"));
  ASSERT_TRUE((*etcd)->process().Stop());
  // Long enough for the watcher (every quarter lease) and the renewal (every third) to have
  // sent what etcd now leaves unanswered.
  absl::SleepFor(absl::Milliseconds(600));
  const absl::Time stopping = absl::Now();
  shard.Stop();
  EXPECT_LT(absl::Now() - stopping, absl::Seconds(3));
  (*etcd)->process().Signal(SIGCONT);
}

}  // namespace
}  // namespace hetps::server
