// Replication at the partition level: a primary hands every change to its replicate hook, a
// backup that applies them holds exactly what the primary holds (a batch sent twice counts
// once, a step out of order is refused), and the primary answers pulls and acknowledges pushes
// only for what the backup confirmed.
#include <cmath>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "optimizer/registry.h"
#include "server/initializer.h"
#include "server/partition.h"
#include "tests/testing/status_assertions.h"

namespace hetps::server {
namespace {

using transport::AsBytes;
using transport::Payload;

constexpr uint64_t kRun = 7;
constexpr size_t kElements = 300;

class PartitionReplicationTest : public ::testing::Test {
 protected:
  // With `deferred`, the primary starts from the initializer's values and the backup from
  // zeros, to draw them later (a rejoining shard's copy); otherwise both from the same values.
  void MakePair(hetps::v1::SyncMode mode, uint32_t workers,
                const hetps::v1::Initializer* deferred = nullptr) {
    auto optimizer = CreateOptimizer("adam", {{"lr", 0.01}});
    ASSERT_OK(optimizer);
    std::shared_ptr<const Optimizer> rule = *std::move(optimizer);
    Partition::Config config;
    config.tensor_key = 42;
    config.index = 3;
    config.range = {0, kElements};
    config.sync_mode = mode;
    config.num_workers = workers;
    config.optimizer = rule;
    Partition::Config primary = config;
    primary.replicate = [this](Partition&, std::vector<ReplicatedChange> changes) {
      batches_.push_back(std::move(changes));
    };
    Partition::Config backup = config;
    backup.backup = true;
    backup.deferred_init = deferred;
    for (auto [target, with] : {std::pair{&primary_, &primary}, std::pair{&backup_, &backup}}) {
      absl::StatusOr<AlignedBuffer> weights = AlignedBuffer::AllocateZeroed(kElements);
      ASSERT_OK(weights);
      if (deferred == nullptr) {
        for (size_t i = 0; i < kElements; ++i) weights->data()[i] = 0.01f * i;
      } else if (target == &primary_) {
        FillInitialWeights(*deferred, config.range, weights->data());
      }
      auto partition = Partition::Create(*with, *std::move(weights));
      ASSERT_OK(partition);
      *target = *std::move(partition);
    }
  }

  // Applies the primary's oldest batch on the backup, and confirms it.
  void Deliver(bool twice = false) {
    ASSERT_FALSE(batches_.empty());
    std::vector<ReplicatedChange> batch = std::move(batches_.front());
    batches_.erase(batches_.begin());
    for (int round = 0; round < (twice ? 2 : 1); ++round) {
      for (const ReplicatedChange& change : batch) {
        const absl::Status applied = backup_->ApplyReplicated(change.meta, change.bytes);
        ASSERT_TRUE(applied.ok()) << applied;
      }
    }
    primary_->Replicated();
  }

  std::vector<float> Gradient(uint32_t rank, uint64_t step) {
    std::vector<float> g(kElements);
    for (size_t i = 0; i < kElements; ++i) g[i] = std::sin(0.1f * i + rank + 2.0f * step);
    return g;
  }

  // The bytes as a transport hands them over; they stay alive while the test runs (a batch
  // still refers to them, as it would to a received buffer).
  Payload Kept(std::vector<float> g) {
    kept_.push_back(std::move(g));
    return Payload::Borrow(AsBytes(absl::MakeConstSpan(kept_.back())));
  }
  static std::vector<float> Floats(const Payload& bytes) {
    std::vector<float> values(bytes.size() / sizeof(float));
    bytes.CopyTo(0, transport::AsWritableBytes(absl::MakeSpan(values)));
    return values;
  }
  absl::Status Push(Partition::PushOrigin origin, std::vector<float> g) {
    return primary_->Push(origin, FloatFormat::kFp32, Kept(std::move(g))).status();
  }

  std::shared_ptr<PendingRequest> Request(bool weights, absl::Notification* replied) {
    return std::make_shared<PendingRequest>(
        std::vector<hetps::v1::PartitionItem>(1), weights,
        [replied](absl::StatusOr<transport::Response> r) {
          EXPECT_TRUE(r.ok()) << r.status();
          replied->Notify();
        },
        std::make_shared<ShardMetrics>());
  }

  std::unique_ptr<Partition> primary_, backup_;
  std::vector<std::vector<ReplicatedChange>> batches_;
  std::vector<std::vector<float>> kept_;
};

TEST_F(PartitionReplicationTest, BspBackupEqualsThePrimaryAndABatchSentTwiceCountsOnce) {
  MakePair(hetps::v1::SYNC_MODE_BSP, 3);
  for (uint64_t step = 0; step < 4; ++step) {
    for (uint32_t rank = 0; rank < 3; ++rank) {
      // Worker 2 restarts before step 2: the backup learns its new run.
      const uint64_t run = rank == 2 && step >= 2 ? kRun + 1 : kRun;
      ASSERT_OK(Push({rank, run, step, 0}, Gradient(rank, step)));
    }
    ASSERT_EQ(batches_.size(), 1u);
    EXPECT_EQ(batches_[0][0].meta.kind(), hetps::v1::CHANGE_KIND_STEP);
    Deliver(/*twice=*/step == 1);
    EXPECT_EQ(backup_->version(), step + 1);
    EXPECT_EQ(backup_->Digest(), primary_->Digest()) << "after step " << step;
  }
}

TEST_F(PartitionReplicationTest, AspBackupEqualsThePrimaryWithBatchedPushes) {
  MakePair(hetps::v1::SYNC_MODE_ASP, 2);
  ASSERT_OK(Push({0, kRun, 0, 1}, Gradient(0, 0)));
  // While the first batch is out, the next pushes queue and go in one batch.
  ASSERT_OK(Push({1, kRun, 0, 1}, Gradient(1, 0)));
  ASSERT_OK(Push({0, kRun, 0, 2}, Gradient(0, 1)));
  ASSERT_EQ(batches_.size(), 1u);
  Deliver();
  ASSERT_EQ(batches_.size(), 1u);
  EXPECT_EQ(batches_[0].size(), 2u);
  Deliver(/*twice=*/true);
  EXPECT_EQ(backup_->version(), 3u);
  EXPECT_EQ(backup_->Digest(), primary_->Digest());
}

TEST_F(PartitionReplicationTest, AStepThatDoesNotFollowIsRefusedAndChangesNothing) {
  MakePair(hetps::v1::SYNC_MODE_BSP, 1);
  ASSERT_OK(Push({0, kRun, 0, 0}, Gradient(0, 0)));
  ASSERT_OK(Push({0, kRun, 1, 0}, Gradient(0, 1)));  // pushed ahead: queued
  primary_->Replicated();                            // the first batch, not delivered
  ASSERT_EQ(batches_.size(), 2u);
  const uint64_t before = backup_->Digest();
  const ReplicatedChange& second = batches_[1][0];
  const absl::Status status = backup_->ApplyReplicated(second.meta, second.bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(backup_->Digest(), before);
}

TEST_F(PartitionReplicationTest, PullsAndPushAcknowledgementsWaitForTheBackup) {
  MakePair(hetps::v1::SYNC_MODE_BSP, 1);
  absl::Notification pulled, acknowledged;
  primary_->Pull(1, FloatFormat::kFp32, Request(true, &pulled), 0);
  absl::StatusOr<uint64_t> pushed =
      primary_->Push({0, kRun, 0, 0}, FloatFormat::kFp32, Kept(Gradient(0, 0)));
  ASSERT_OK(pushed);
  primary_->AckWhenReplicated(*pushed, Request(false, &acknowledged), 0);
  EXPECT_EQ(primary_->version(), 1u);      // applied here...
  EXPECT_FALSE(pulled.HasBeenNotified());  // ...but not served or acknowledged yet
  EXPECT_FALSE(acknowledged.HasBeenNotified());
  EXPECT_NE(primary_->DescribeWait(1).find("backup"), std::string::npos)
      << primary_->DescribeWait(1);
  Deliver();
  EXPECT_TRUE(pulled.HasBeenNotified());
  EXPECT_TRUE(acknowledged.HasBeenNotified());
}

TEST_F(PartitionReplicationTest, AStateWrittenReachesTheBackup) {
  MakePair(hetps::v1::SYNC_MODE_BSP, 1);
  ASSERT_OK(Push({0, kRun, 0, 0}, Gradient(0, 0)));
  Deliver();
  // Weights and Adam's two moments.
  ASSERT_OK(primary_->WriteState(9, Kept(std::vector<float>(kElements * 3, 0.5f))));
  ASSERT_EQ(batches_.size(), 1u);
  EXPECT_EQ(batches_[0][0].meta.kind(), hetps::v1::CHANGE_KIND_WRITE_STATE);
  Deliver();
  EXPECT_EQ(backup_->version(), 9u);
  EXPECT_EQ(backup_->Digest(), primary_->Digest());
}

// A copy built to take its values from elsewhere holds zeros until they come or it draws them;
// what it reports meanwhile is the values it stands for, the initializer's, as the primary's.
TEST_F(PartitionReplicationTest, ACopyWhoseValuesAreNotDrawnYetReadsAsItsInitializersValues) {
  hetps::v1::Initializer normal;
  normal.set_kind(hetps::v1::INIT_KIND_NORMAL);
  normal.set_b(0.5);
  normal.set_seed(11);
  MakePair(hetps::v1::SYNC_MODE_BSP, 1, &normal);
  uint64_t primary_version = 1, backup_version = 1;
  const std::vector<float> primary = Floats(primary_->ReadState(&primary_version));
  EXPECT_EQ(Floats(backup_->ReadState(&backup_version)), primary);
  EXPECT_EQ(backup_version, primary_version);
  EXPECT_EQ(backup_->Digest(), primary_->Digest());
  // Reporting them drew nothing: the copy still holds zeros, for a snapshot to overwrite.
  EXPECT_EQ(Floats(backup_->Snapshot(FloatFormat::kFp32).bytes),
            std::vector<float>(kElements, 0.0f));
  // A first change draws them for good: the two stay equal.
  ASSERT_OK(Push({0, kRun, 0, 0}, Gradient(0, 0)));
  Deliver();
  EXPECT_EQ(backup_->Digest(), primary_->Digest());
}

}  // namespace
}  // namespace hetps::server
