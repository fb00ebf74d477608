// Replication across ps-server processes (--replicas 2), over every transport: the example job
// trains exactly as in one process, and every partition's backup (on the next shard, fed by
// its primary over the shards' own connections) holds bit for bit what its primary holds.
#include <signal.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "tests/integration/example_job.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"
#include "worker/client.h"

namespace hetps {
namespace {

using integration::AwaitText;
using integration::ExpectModelsMatchTheReference;
using integration::kDim;
using integration::kLearningRate;
using integration::WorkerLog;

class ReplicationTest : public integration::ExampleJobTest {
 protected:
  // etcd, `shards` shards with --replicas=2 and 1 s leases, and two workers training `steps`
  // BSP steps of Adam (lr 0.05, `extra` flags), running until worker 0 logged step `at_step`.
  void StartAdamJobUntil(int shards, int steps, int at_step,
                         const std::vector<std::string>& extra = {}) {
    auto etcd = testing::EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    ASSERT_OK(
        StartCluster(shards, 2, {"--replicas=2", "--etcd=" + etcd_->endpoint(), "--lease_s=1"}));
    std::vector<std::string> flags = {"--optimizer=adam", "--lr=0.05"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    workers_ = StartWorkers(2, steps, "bsp", flags);
    ASSERT_TRUE(AwaitText(absl::StrCat(cluster_.dir(), "/worker0.log"),
                          absl::StrCat("rank 0 step ", at_step, " "), absl::Seconds(60)))
        << WorkerLog(cluster_, 0);
  }

  // Both workers end, with the weights of one process running the same `steps` of Adam.
  void ExpectTheJobEndsLikeOneProcess(int steps) {
    for (int r = 0; r < 2; ++r) {
      // Every worker's log: one that stalls shows only in the other's error.
      ASSERT_EQ(workers_[r]->Wait(absl::Seconds(120)), 0)
          << integration::WorkerLogs(cluster_, 2) << integration::ShardLogs(cluster_);
    }
    const std::vector<float> reference =
        integration::SingleProcessReference(2, steps, "adam", {{"lr", 0.05}});
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> model =
          integration::ReadFloats(absl::StrCat(cluster_.dir(), "/model", r));
      ASSERT_EQ(model.size(), reference.size());
      EXPECT_LE(integration::MaxRelativeDifference(model, reference), 1e-5) << "worker " << r;
    }
  }

  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::vector<std::unique_ptr<integration::Subprocess>> workers_;
};

TEST_P(ReplicationTest, ReplicatedShardsTrainLikeOneProcessAndEveryBackupEqualsItsPrimary) {
  // The shards hold leases in etcd and find each other there (no --servers).
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_OK(StartCluster(3, 3, {"--replicas=2", "--etcd=" + (*etcd)->endpoint()}));
  const int steps = 40;
  std::vector<std::unique_ptr<integration::Subprocess>> workers = StartWorkers(3, steps, "bsp");
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectModelsMatchTheReference(cluster_, 3, steps));

  // The job is over: a client of its size reads both copies of the example's tensors.
  ClientOptions options = InProcessClientOptions(0, 3);
  options.partition_bytes = 1024;  // as the workers cut them
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  for (const auto& [name, elements] :
       {std::pair{"linreg.weight", kDim}, std::pair{"linreg.bias", 1}}) {
    TensorSpec spec;
    spec.name = name;
    spec.num_elements = static_cast<uint64_t>(elements);
    spec.optimizer = {"sgd", {{"lr", kLearningRate}}};
    absl::StatusOr<TensorId> id = (*client)->Declare(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<TensorState> served = (*client)->ReadState(*id);
    absl::StatusOr<TensorState> backup = (*client)->ReadBackupState(*id);
    ASSERT_TRUE(served.ok()) << served.status();
    ASSERT_TRUE(backup.ok()) << backup.status();
    EXPECT_EQ(served->version, static_cast<uint64_t>(steps)) << name;
    EXPECT_EQ(backup->version, served->version) << name;
    EXPECT_EQ(backup->weights, served->weights) << name;  // bitwise
  }
  absl::StatusOr<std::vector<ShardStats>> stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const ShardStats& shard : *stats) {
    EXPECT_GT(shard.backup_partitions, 0u) << "shard " << shard.shard_index;
  }
}

// Chaos: shard 1 is killed (SIGKILL) in the middle of Adam training. Its etcd lease ends,
// shard 2 takes its partitions over from the backups it kept (weights and both moments), shard
// 0 goes on without the copies shard 1 kept of its partitions, and the workers find the
// partitions where they are now: the job pauses for about a lease, finishes without a restart,
// and ends with the weights of a run that lost nothing (Adam's state included: a moment lost
// or applied twice would show).
TEST_P(ReplicationTest, AShardKilledMidTrainingCostsAPauseNotTheJob) {
  const int steps = 60;
  ASSERT_NO_FATAL_FAILURE(StartAdamJobUntil(3, steps, 20));
  cluster_.shard(1).Signal(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobEndsLikeOneProcess(steps));
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(2)), "shard 1 is gone"))
      << testing::ReadFile(cluster_.shard_log(2));
}

// etcd stops answering in the middle of Adam training (stopped, as a restart or a long stall
// would leave it) until every shard's lease has ended, so every shard stops acknowledging. Once
// etcd answers again, each shard takes a new lease and, since nobody took its partitions over,
// serves them again: the job pauses, finishes without a restart and ends with the weights of an
// uninterrupted run.
TEST_P(ReplicationTest, EtcdStalledLongerThanTheLeasesCostsAPauseNotTheJob) {
  // 50 ms of "compute" a step: the job lasts beyond the stall.
  const int steps = 100;
  ASSERT_NO_FATAL_FAILURE(StartAdamJobUntil(2, steps, 10, {"--compute_ms=50"}));
  etcd_->process().Signal(SIGSTOP);
  // Until both shards saw their leases end (bounded: a lease is 1 s).
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(AwaitText(cluster_.shard_log(i), "could not be renewed in time", absl::Seconds(30)))
        << testing::ReadFile(cluster_.shard_log(i));
  }
  EXPECT_TRUE(workers_[0]->running()) << "the job ended before the stall\n"
                                      << WorkerLog(cluster_, 0);
  etcd_->process().Signal(SIGCONT);
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobEndsLikeOneProcess(steps));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(i)), "new etcd lease"))
        << testing::ReadFile(cluster_.shard_log(i));
  }
}

// Shard 0 stalls (stopped) for longer than its lease while etcd and shard 1 run: shard 1 takes
// its partitions over. When shard 0 runs again, its partitions are out of date: it takes no
// new lease and serves nothing (no split brain), and the job ends with the weights of an
// uninterrupted run through shard 1.
TEST_P(ReplicationTest, AShardStalledLongerThanItsLeaseServesNothingOnceTakenOver) {
  const int steps = 100;
  ASSERT_NO_FATAL_FAILURE(StartAdamJobUntil(2, steps, 10, {"--compute_ms=50"}));
  cluster_.shard(0).Signal(SIGSTOP);
  EXPECT_TRUE(AwaitText(cluster_.shard_log(1), "shard 0 is gone", absl::Seconds(30)))
      << testing::ReadFile(cluster_.shard_log(1));
  cluster_.shard(0).Signal(SIGCONT);
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobEndsLikeOneProcess(steps));
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(0)), "no lease may replace"))
      << testing::ReadFile(cluster_.shard_log(0));
}

// While shard 1's process is stopped, a new process of shard 1 starts elsewhere (another port),
// ends the old process's lease and rejoins. The old process, running again, must not take a
// lease again: it would register over the new one, which holds the shard's place now.
TEST_P(ReplicationTest, AnOldProcessOfAShardIndexTakesNoLeaseOnceANewOneStarted) {
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::vector<std::string> replicated = {"--replicas=2", "--etcd=" + (*etcd)->endpoint(),
                                               "--lease_s=1"};
  ASSERT_OK(StartCluster(2, 1, replicated));
  ASSERT_TRUE(cluster_.shard(1).Stop(absl::Seconds(10)));
  std::vector<std::string> argv = {testing::BinaryPath("server/ps-server"),
                                   "--host=127.0.0.1",
                                   "--port=0",
                                   "--port_file=" + cluster_.dir() + "/port1-new",
                                   "--shard_index=1",
                                   "--num_shards=2",
                                   "--num_workers=1",
                                   "--threads=2",
                                   "--lifetime_s=300",
                                   TransportFlag()};
  argv.insert(argv.end(), replicated.begin(), replicated.end());
  const std::string new_log = cluster_.dir() + "/shard1-new.log";
  integration::Subprocess new_run(argv, new_log, Environment());
  ASSERT_TRUE(AwaitText(new_log, "registered", absl::Seconds(30))) << testing::ReadFile(new_log);
  cluster_.shard(1).Signal(SIGCONT);
  EXPECT_TRUE(
      AwaitText(cluster_.shard_log(1), "another process runs shard 1 now", absl::Seconds(30)))
      << testing::ReadFile(cluster_.shard_log(1));
  // The old process gave up (and revoked the lease it was granted): the registration is the
  // new process's.
  auto client = server::EtcdClient::Connect((*etcd)->endpoint());
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::optional<server::EtcdClient::Value>> member =
      (*client)->Get("/hetps/hetps/shards/1");
  ASSERT_TRUE(member.ok()) << member.status();
  ASSERT_TRUE(member->has_value());
  EXPECT_EQ((*member)->value,
            absl::StrCat("127.0.0.1:", absl::StripAsciiWhitespace(
                                           testing::ReadFile(cluster_.dir() + "/port1-new"))))
      << testing::ReadFile(cluster_.shard_log(1));
}

// Chaos with a rejoin: shard 1 is killed around step 80 (shard 2 takes its partitions over),
// comes back empty around step 120 and, while training goes on, shard 0 and shard 2 copy it
// the partitions it keeps copies of; then shard 2 is killed: shard 1 takes its own partitions
// back from those copies and shard 0 takes shard 2's. The job finishes without a restart, with
// exactly the weights of an uninterrupted run (bitwise).
TEST_P(ReplicationTest, AShardThatRejoinsCatchesUpAndTakesOverWhenTheNextGoes) {
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::vector<std::string> flags = {"--replicas=2", "--etcd=" + (*etcd)->endpoint(),
                                          "--lease_s=1"};
  ASSERT_OK(StartCluster(3, 2, flags));
  const int steps = 400;
  // Each step computes for 20 ms, so that the shards fail and rejoin while training goes on.
  std::vector<std::unique_ptr<integration::Subprocess>> workers =
      StartWorkers(2, steps, "bsp", {"--compute_ms=20"});
  auto await_log = [&](const std::string& path, const std::string& text) {
    testing::AwaitCondition(
        [&] { return absl::StrContains(testing::ReadFile(path), text) || !workers[0]->running(); },
        absl::Seconds(60));
    return absl::StrContains(testing::ReadFile(path), text);
  };
  const std::string worker0 = absl::StrCat(cluster_.dir(), "/worker0.log");
  ASSERT_TRUE(await_log(worker0, "rank 0 step 80 ")) << WorkerLog(cluster_, 0);
  cluster_.shard(1).Signal(SIGKILL);
  ASSERT_TRUE(await_log(worker0, "rank 0 step 120 ")) << WorkerLog(cluster_, 0);
  ASSERT_TRUE(await_log(cluster_.shard_log(2), "shard 1 is gone"))
      << testing::ReadFile(cluster_.shard_log(2));
  ASSERT_OK(cluster_.Restart(1));
  // Shard 0 copies its own partitions to shard 1, shard 2 the ones it took over from shard 1.
  ASSERT_TRUE(await_log(cluster_.shard_log(0),
                        "shard 1 is a full backup of the partitions placed on shard 0 again"))
      << testing::ReadFile(cluster_.shard_log(0));
  ASSERT_TRUE(await_log(cluster_.shard_log(2),
                        "shard 1 is a full backup of the partitions placed on shard 1 again"))
      << testing::ReadFile(cluster_.shard_log(2));
  ASSERT_FALSE(absl::StrContains(WorkerLog(cluster_, 0), "final loss"))
      << "training ended before shard 1 caught up: nothing is left to test";
  ASSERT_TRUE(await_log(worker0, "rank 0 step 160 ")) << WorkerLog(cluster_, 0);
  cluster_.shard(2).Signal(SIGKILL);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
  }
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(1)), "shard 2 is gone"))
      << testing::ReadFile(cluster_.shard_log(1));
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(0)), "shard 2 is gone"))
      << testing::ReadFile(cluster_.shard_log(0));

  // The same job, undisturbed.
  auto etcd2 = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd2.ok()) << etcd2.status();
  testing::LocalCluster undisturbed;  // stops before its etcd
  ASSERT_OK(StartClusterOf(undisturbed, 3, 2,
                           {"--replicas=2", "--etcd=" + (*etcd2)->endpoint(), "--lease_s=1"}));
  std::vector<std::unique_ptr<integration::Subprocess>> reference =
      StartWorkers(2, steps, "bsp", {}, &undisturbed);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(reference[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(undisturbed, r);
    EXPECT_EQ(integration::ReadFloats(absl::StrCat(cluster_.dir(), "/model", r)),
              integration::ReadFloats(absl::StrCat(undisturbed.dir(), "/model", r)))
        << "worker " << r << ": the weights differ from the undisturbed run's";
  }
}

// Shards killed and restarted one after another under one in-process worker, which steps a
// tensor whose 12 partitions lie 4 on each of 3 replicated shards (every weight starts at 1.0,
// every gradient is 1.0, SGD).
class ShardRestartTest : public integration::ExampleJobTest {
 protected:
  void StartJob(int lease_s, double lr, absl::Duration call_timeout) {
    auto etcd = testing::EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    ASSERT_OK(StartCluster(
        3, 1,
        {"--replicas=2", "--etcd=" + etcd_->endpoint(), absl::StrCat("--lease_s=", lease_s)}));
    ClientOptions options = InProcessClientOptions(0, 1);
    options.servers = cluster_.addresses();
    options.partition_bytes = 1024;
    options.call_timeout = call_timeout;
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    TensorSpec spec;
    spec.name = "stepped";
    spec.num_elements = 3072;
    spec.optimizer = {"sgd", {{"lr", lr}}};
    spec.init = Initializer::Constant(1.0);
    absl::StatusOr<TensorId> id = client_->Declare(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    gradient_.assign(spec.num_elements, 1.0f);
    weights_.assign(spec.num_elements, 0.0f);
  }
  absl::Status Step(uint64_t step) {
    return client_->PushPull(id_, absl::MakeConstSpan(gradient_), absl::MakeSpan(weights_), step)
        .Wait();
  }
  // SIGKILLs shard `lost` and waits until shard `taker` has taken its partitions over.
  void Kill(int lost, int taker) {
    cluster_.shard(lost).Signal(SIGKILL);
    ASSERT_EQ(cluster_.shard(lost).Wait(absl::Seconds(10)), 128 + SIGKILL);
    if (taker < 0) return;
    ASSERT_TRUE(AwaitText(cluster_.shard_log(taker), absl::StrCat("shard ", lost, " is gone"),
                          absl::Seconds(30)))
        << testing::ReadFile(cluster_.shard_log(taker));
  }
  // Restarts shard `index` and waits until shard `copier` has copied it the partitions of
  // group `group`.
  void Rejoin(int index, int copier, int group) {
    ASSERT_OK(cluster_.Restart(index));
    ASSERT_TRUE(AwaitText(cluster_.shard_log(copier),
                          absl::StrCat("shard ", index,
                                       " is a full backup of the partitions "
                                       "placed on shard ",
                                       group, " again"),
                          absl::Seconds(30)))
        << testing::ReadFile(cluster_.shard_log(copier));
  }
  std::unique_ptr<testing::EtcdProcess> etcd_;
  std::unique_ptr<Client> client_;
  TensorId id_ = 0;
  std::vector<float> gradient_, weights_;
};

// Shard 1 is lost and shard 2 takes its partitions over; then shard 2 is lost too, before
// shard 1 came back: no copy of shard 1's partitions is left. Shard 2 restarts empty. The group
// record still names it as their server (its earlier run), but its new run must not serve them:
// its copies hold initial values at version 0, which workers would take for the model.
TEST_P(ShardRestartTest, AShardThatTookOverAndRestartedDoesNotServeWhatItLost) {
  StartJob(/*lease_s=*/1, /*lr=*/0.25, /*call_timeout=*/absl::Seconds(8));
  ASSERT_OK(Step(0));
  Kill(1, 2);
  const absl::Status served = Step(1);
  ASSERT_TRUE(served.ok()) << served;
  ASSERT_EQ(weights_[0], 0.5f);
  Kill(2, 0);
  // Shard 0 serves shard 2's partitions now and copies them to the restarted shard 2.
  Rejoin(2, 0, 2);

  std::fill(weights_.begin(), weights_.end(), -1.0f);
  const absl::Status pulled = client_->Pull(id_, absl::MakeSpan(weights_)).Wait();
  EXPECT_FALSE(pulled.ok()) << "shard 1's partitions were served after both their copies were "
                               "lost: "
                            << std::count(weights_.begin(), weights_.end(), 1.0f)
                            << " weights read back at their initial value\n"
                            << testing::ReadFile(cluster_.shard_log(2));
  // Shard 1 comes back empty: it serves its partitions again, and says that their state is lost.
  ASSERT_OK(cluster_.Restart(1));
  const absl::Status after = client_->Pull(id_, absl::MakeSpan(weights_)).Wait();
  EXPECT_EQ(after.code(), absl::StatusCode::kDataLoss) << after;
}

// Shard 1 is lost, shard 2 takes its partitions over, shard 1 rejoins as their backup. Then
// shard 2 dies and restarts at once, well within its lease, so its etcd key may never go away:
// shard 1 must still take its partitions back (and shard 0 shard 2's), from the copies, and the
// job goes on with every step in the weights.
TEST_P(ShardRestartTest, ATakerRestartedWithinItsLeaseStillHandsItsGroupsToTheirBackups) {
  StartJob(/*lease_s=*/3, /*lr=*/0.125, /*call_timeout=*/absl::Seconds(30));
  ASSERT_OK(Step(0));
  Kill(1, 2);
  ASSERT_OK(Step(1));
  Rejoin(1, 2, 1);
  ASSERT_OK(Step(2));
  Kill(2, -1);
  ASSERT_OK(cluster_.Restart(2));
  const absl::Status after = Step(3);
  ASSERT_TRUE(after.ok()) << after << "\n"
                          << testing::ReadFile(cluster_.shard_log(0))
                          << testing::ReadFile(cluster_.shard_log(1))
                          << testing::ReadFile(cluster_.shard_log(2));
  EXPECT_EQ(std::count(weights_.begin(), weights_.end(), 0.5f), static_cast<long>(weights_.size()))
      << "four steps of 0.125 from 1.0; first weight " << weights_[0];
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(cluster_.shard_log(1)), "shard 2 is gone"))
      << testing::ReadFile(cluster_.shard_log(1));
}

INSTANTIATE_TEST_SUITE_P(Transports, ShardRestartTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

INSTANTIATE_TEST_SUITE_P(Transports, ReplicationTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
