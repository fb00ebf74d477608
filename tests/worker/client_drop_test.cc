// Dropping tensors (Client::Drop, DropAll) over every transport: a long-lived pool of shards
// serves job after job. And stopping a shard (Client::StopShard), an operator's call only. What a
// drop removes is gone from every shard (memory, stats, the memory cap's count, checkpoints), what
// waits on it ends at once with NotFound, its name can be declared again with another spec, and the
// other tensors go on untouched.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "tests/worker/client_test_fixture.h"
#include "worker/client.h"

namespace hetps {
namespace {

using testing::Spec;

class ClientDropTest : public testing::ClientClusterTest {
 protected:
  uint64_t ShardTotal(uint64_t (hetps::v1::StatsResponse::*field)() const) {
    uint64_t total = 0;
    for (size_t s = 0; s < cluster_->addresses().size(); ++s) {
      total += (cluster_->shard(static_cast<int>(s)).Stats().*field)();
    }
    return total;
  }
  // Polls the shards' stats until `field` sums to `want` (or a deadline passes).
  bool AwaitShardTotal(uint64_t (hetps::v1::StatsResponse::*field)() const, uint64_t want) {
    return testing::AwaitCondition([&] { return ShardTotal(field) == want; }, absl::Seconds(20),
                                   absl::Milliseconds(5));
  }
  void TrainSteps(TensorId id, uint64_t n, uint64_t elements) {
    std::vector<float> g(elements, 0.5f), w0(elements), w1(elements);
    for (uint64_t step = 0; step < n; ++step) {
      Operation a = c0_->PushPull(id, g, absl::MakeSpan(w0), step);
      Operation b = c1_->PushPull(id, g, absl::MakeSpan(w1), step);
      ASSERT_TRUE(a.Wait().ok()) << a.Wait();
      ASSERT_TRUE(b.Wait().ok()) << b.Wait();
    }
  }
};

TEST_P(ClientDropTest, ADroppedTensorIsGoneFromEveryShardAndItsNameCanBeDeclaredAgain) {
  StartCluster(2, 2);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  TensorSpec adam = Spec("w", 1000);
  adam.optimizer = {"adam", {{"lr", 0.01}}};
  TensorId id = 0, kept = 0;
  for (Client* worker : {c0_.get(), c1_.get()}) {
    id = *worker->Declare(adam);
    kept = *worker->Declare(Spec("kept", 300));
  }
  TrainSteps(id, 2, 1000);
  TrainSteps(kept, 1, 300);
  const uint64_t state_before = ShardTotal(&hetps::v1::StatsResponse::optimizer_state_bytes);
  EXPECT_GT(state_before, 0u);

  const std::string names[] = {"w", "never-declared"};
  absl::StatusOr<DropResult> dropped = c0_->Drop(names);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(dropped->tensors, 1u);
  EXPECT_GE(dropped->released_bytes, 1000u * 3 * sizeof(float));      // weights and two moments
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::num_tensors), 2u);  // "kept", on each shard
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::optimizer_state_bytes), 0u);  // sgd keeps none
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::tensors_dropped), 2u);

  // Every worker's calls on it fail, the dropping one's at once (it forgot the id), the
  // other's at the shards.
  std::vector<float> g(1000, 1.0f), w(1000);
  EXPECT_EQ(c0_->Push(id, g, 2).Wait().code(), absl::StatusCode::kNotFound);
  const absl::Status other = c1_->PushPull(id, g, absl::MakeSpan(w), 2).Wait();
  EXPECT_EQ(other.code(), absl::StatusCode::kNotFound) << other;
  EXPECT_TRUE(absl::StrContains(other.message(), "dropped") ||
              absl::StrContains(other.message(), "no tensor"))
      << other;
  // Dropping again is not an error, and drops nothing.
  const std::string again[] = {"w"};
  EXPECT_EQ(c1_->Drop(again)->tensors, 0u);

  // The name is free: another spec (another size and rule) is declared, from fresh weights.
  for (Client* worker : {c0_.get(), c1_.get()}) {
    absl::StatusOr<TensorId> redeclared = worker->Declare(Spec("w", 500));
    ASSERT_TRUE(redeclared.ok()) << redeclared.status();
    id = *redeclared;
  }
  std::vector<float> fresh(500, -1.0f);
  ASSERT_OK(c1_->Pull(id, absl::MakeSpan(fresh)).Wait());
  EXPECT_TRUE(std::all_of(fresh.begin(), fresh.end(), [](float v) { return v == 0; }));
  TrainSteps(id, 1, 500);
  // The other tensor went on untouched: still at version 1.
  std::vector<float> kept_weights(300);
  EXPECT_OK(c0_->Pull(kept, absl::MakeSpan(kept_weights), 1).Wait());
}

TEST_P(ClientDropTest, APullWaitingOnADroppedTensorEndsAtOnceWithNotFound) {
  StartCluster(1, 2);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  TensorId id = 0;
  for (Client* worker : {c0_.get(), c1_.get()}) id = *worker->Declare(Spec("w", 100));
  // Worker 0's step waits for worker 1's push, which never comes: the job ended without it.
  std::vector<float> g(100, 1.0f), w(100);
  Operation waiting = c0_->PushPull(id, g, absl::MakeSpan(w), 0);
  ASSERT_TRUE(AwaitShardTotal(&hetps::v1::StatsResponse::requests_waiting, 1));
  const absl::Time start = absl::Now();
  ASSERT_OK(c1_->DropAll());
  const absl::Status ended = waiting.Wait();
  EXPECT_EQ(ended.code(), absl::StatusCode::kNotFound) << ended;
  EXPECT_TRUE(absl::StrContains(ended.message(), "'w' was dropped")) << ended;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the call's deadline (60 s)
  EXPECT_EQ(cluster_->shard(0).Stats().requests_waiting(), 0u);
}

TEST_P(ClientDropTest, DroppedTensorsGiveTheirMemoryBackToTheCap) {
  server::ServerOptions capped;
  capped.max_memory_bytes = 6 << 20;  // one of the tensors below (3.7 MB), not two
  StartCluster(1, 1, capped);
  c0_ = NewClient(0);
  constexpr uint64_t kElements =
      300'000;  // 1.2 MB of weights; with buffers and 1 KiB partitions, 3.7 MB
  absl::StatusOr<TensorId> first = c0_->Declare(Spec("first", kElements));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(c0_->Declare(Spec("second", kElements)).status().code(),
            absl::StatusCode::kResourceExhausted);
  for (int job = 0; job < 3; ++job) {  // job after job on one shard
    absl::StatusOr<DropResult> dropped = c0_->DropAll();
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    EXPECT_EQ(dropped->tensors, 1u);
    EXPECT_EQ(cluster_->shard(0).Stats().num_tensors(), 0u);
    absl::StatusOr<TensorId> next =
        c0_->Declare(Spec(job % 2 == 0 ? "second" : "first", kElements));
    ASSERT_TRUE(next.ok()) << "job " << job << ": " << next.status();
  }
}

TEST_P(ClientDropTest, AnAdminClientDropsWithoutTakingAWorkersRankOver) {
  StartCluster(2, 1);
  c0_ = NewClient(0);
  TensorId finished = *c0_->Declare(Spec("finished", 100));
  TensorId running = *c0_->Declare(Spec("running", 100));
  std::vector<float> g(100, 1.0f), w(100);
  ASSERT_OK(c0_->PushPull(running, g, absl::MakeSpan(w), 0).Wait());

  // As ps-ctl connects: as "rank 0" of a job whose size it does not know.
  ClientOptions admin_options = cluster_->ClientOptionsFor(0);
  admin_options.admin = true;
  admin_options.world_size = 1;
  absl::StatusOr<std::unique_ptr<Client>> admin = Client::Create(admin_options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  const std::string names[] = {"finished"};
  absl::StatusOr<DropResult> dropped = (*admin)->Drop(names);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(dropped->tensors, 1u);
  EXPECT_EQ(c0_->Push(finished, g, 1).Wait().code(), absl::StatusCode::kNotFound);
  // The worker's run is still rank 0's: its steps go on.
  const absl::Status step = c0_->PushPull(running, g, absl::MakeSpan(w), 1).Wait();
  EXPECT_TRUE(step.ok()) << step;
}

TEST_P(ClientDropTest, OnlyAnOperatorsClientMayStopAShard) {
  StartCluster(2, 1);
  c0_ = NewClient(0);
  const absl::Status refused = c0_->StopShard(1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_FALSE(cluster_->shard(1).stop_requested());

  ClientOptions admin_options = cluster_->ClientOptionsFor(0);
  admin_options.admin = true;
  absl::StatusOr<std::unique_ptr<Client>> admin = Client::Create(admin_options);
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ((*admin)->StopShard(2).code(), absl::StatusCode::kOutOfRange);
  ASSERT_OK((*admin)->StopShard(1));
  EXPECT_TRUE(cluster_->shard(1).stop_requested());
  EXPECT_FALSE(cluster_->shard(0).stop_requested());
}

TEST_P(ClientDropTest, ACheckpointWaitingForADroppedTensorCompletesWithTheOthers) {
  testing::ScopedTempDir dir;
  server::ServerOptions base;
  base.checkpoint_dir = dir.path();
  StartCluster(1, 1, base);
  c0_ = NewClient(0);
  TensorId kept = *c0_->Declare(Spec("kept", 100));
  TensorId gone = *c0_->Declare(Spec("gone", 100));
  std::vector<float> g(100, 1.0f), w(100);
  for (TensorId id : {kept, gone}) ASSERT_OK(c0_->PushPull(id, g, absl::MakeSpan(w), 0).Wait());
  // The checkpoint of step 2 waits for both tensors to get there; only "kept" will.
  absl::Status checkpointed = absl::UnknownError("not returned");
  absl::Notification returned;
  std::thread checkpoint([&] {
    checkpointed = c0_->Checkpoint(2);
    returned.Notify();
  });
  ASSERT_TRUE(AwaitShardTotal(&hetps::v1::StatsResponse::checkpoints_waiting, 1));
  ASSERT_OK(c0_->PushPull(kept, g, absl::MakeSpan(w), 1).Wait());
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  const std::string names[] = {"gone"};
  ASSERT_OK(c0_->Drop(names));
  EXPECT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(20)));
  checkpoint.join();
  ASSERT_TRUE(checkpointed.ok()) << checkpointed;

  server::CheckpointIdentity identity;
  identity.job_id = cluster_->ClientOptionsFor(0).job_id;
  absl::StatusOr<server::CheckpointPartData> part =
      server::LoadCheckpointPart(server::CheckpointStepDir(dir.path(), 2), identity);
  ASSERT_TRUE(part.ok()) << part.status();
  ASSERT_EQ(part->header.tensors_size(), 1);
  EXPECT_EQ(part->header.tensors(0).decl().name(), "kept");
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientDropTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

// With --replicas 2 a drop reaches every shard: the backup copies go too, and a worker's
// calls find the tensor gone whichever copy they ask.
class ClientDropReplicatedTest : public ClientDropTest {
 protected:
  void TearDown() override {
    c0_.reset();
    c1_.reset();
    cluster_.reset();
  }
  std::unique_ptr<testing::EtcdProcess> etcd_;
};

TEST_P(ClientDropReplicatedTest, BackupCopiesAreDroppedTooAndTheNameIsReplicatedAfresh) {
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  etcd_ = *std::move(etcd);
  server::ServerOptions options;
  options.replicas = 2;
  options.etcd = etcd_->endpoint();
  options.lease_ttl = absl::Seconds(1);
  StartCluster(3, 2, options);
  c0_ = NewClient(0);
  c1_ = NewClient(1);
  TensorSpec adam = Spec("w", 1000);
  adam.optimizer = {"adam", {{"lr", 0.01}}};
  TensorId id = 0;
  for (Client* worker : {c0_.get(), c1_.get()}) id = *worker->Declare(adam);
  TrainSteps(id, 2, 1000);
  EXPECT_GT(ShardTotal(&hetps::v1::StatsResponse::backup_partitions), 0u);

  ASSERT_OK(c1_->DropAll());
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::backup_partitions), 0u);
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::num_partitions), 0u);
  EXPECT_EQ(ShardTotal(&hetps::v1::StatsResponse::num_tensors), 0u);

  // Declared again (another rule), it trains with its backups equal to their primaries.
  for (Client* worker : {c0_.get(), c1_.get()}) id = *worker->Declare(Spec("w", 1000));
  TrainSteps(id, 2, 1000);
  absl::StatusOr<TensorState> served = c0_->ReadState(id);
  absl::StatusOr<TensorState> backup = c0_->ReadBackupState(id);
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_TRUE(backup.ok()) << backup.status();
  EXPECT_EQ(served->version, 2u);
  EXPECT_EQ(served->weights, backup->weights);
  EXPECT_TRUE(served->slots.empty());  // sgd: the adam moments went with the drop
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientDropReplicatedTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
