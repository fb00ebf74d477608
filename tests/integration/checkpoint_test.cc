// Consistent checkpoints with real processes: shards that checkpoint while the example job
// trains, are killed, and restore; the job goes on from the checkpoint's step and ends with
// exactly the weights of a run that was never interrupted. Damaged or foreign checkpoints are
// refused by ps-server, naming the file.
#include "server/checkpoint.h"

#include <signal.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "server/etcd_client.h"
#include "tests/integration/example_job.h"
#include "tests/testing/await_condition.h"
#include "tests/testing/etcd_process.h"
#include "tests/testing/status_assertions.h"
#include "worker/client.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;
using integration::AwaitText;
using integration::ReadFloats;
using integration::ShardLogs;
using integration::WorkerLog;
using testing::BinaryPath;
using testing::LocalCluster;
using testing::ReadFile;
using testing::Subprocess;
class CheckpointTest : public integration::ExampleJobTest {
 protected:
  // 200 BSP steps of Adam on 2 workers and `shards` shards (with `flags`) uninterrupted, and the
  // same job stopped after step 150 by killing every shard, restored from the newest
  // checkpoint and finished: bitwise equal.
  void ExpectRestoredJobEndsBitwiseLikeAnUninterruptedOne(int shards,
                                                          const std::vector<std::string>& flags);
};

const std::vector<std::string> kAdam = {"--optimizer=adam"};

// Waits (bounded) until `path` exists.
bool AwaitFile(const std::string& path, absl::Duration timeout) {
  return testing::AwaitCondition([&] { return fs::exists(path); }, timeout);
}

void KillShards(LocalCluster& cluster, int num_shards) {
  for (int i = 0; i < num_shards; ++i) {
    cluster.shard(i).Signal(SIGKILL);
    ASSERT_EQ(cluster.shard(i).Wait(absl::Seconds(10)), 128 + SIGKILL);
  }
}

void CheckpointTest::ExpectRestoredJobEndsBitwiseLikeAnUninterruptedOne(
    int shards, const std::vector<std::string>& flags) {
  LocalCluster& cluster = cluster_;
  // The uninterrupted run: 200 BSP steps of Adam, 2 workers, 2 shards.
  LocalCluster uninterrupted;
  ASSERT_OK(StartClusterOf(uninterrupted, shards, 2));
  {
    auto workers = StartWorkers(2, 200, "bsp", kAdam, &uninterrupted);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(uninterrupted, r);
    }
  }

  // The same job with a checkpoint every 20 steps, stopped after step 150 by killing every
  // shard, then restored from the newest checkpoint (step 140).
  const std::string dir = cluster.dir() + "/checkpoints";
  std::vector<std::string> with_checkpoints = {"--checkpoint_every=20", "--checkpoint_dir=" + dir};
  with_checkpoints.insert(with_checkpoints.end(), flags.begin(), flags.end());
  ASSERT_OK(StartClusterOf(cluster, shards, 2, with_checkpoints));
  {
    auto workers = StartWorkers(2, 150, "bsp", kAdam, &cluster);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster, r);
    }
  }
  // Step 140's checkpoint, unless a shard skipped it because the one before was still being
  // written (a slow disk, a loaded machine): then the newest committed one.
  const std::string step140 = server::CheckpointStepDir(dir, 140);
  auto skipped = [&] {
    for (int i = 0; i < shards; ++i) {
      if (absl::StrContains(ReadFile(cluster.shard_log(i)), "no checkpoint of step 140")) {
        return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(testing::AwaitCondition(
      [&] { return fs::exists(step140 + "/MANIFEST") || skipped(); }, absl::Seconds(30)))
      << ReadFile(cluster.shard_log(0)) << ReadFile(cluster.shard_log(1));
  KillShards(cluster, shards);
  int restored_step = 0;
  for (int i = 0; i < shards; ++i) {
    ASSERT_TRUE(cluster.Restart(i, {"--restore=" + dir}).ok()) << ReadFile(cluster.shard_log(i));
    const std::string log = ReadFile(cluster.shard_log(i));
    const size_t at = log.find("restored step ");
    ASSERT_NE(at, std::string::npos) << log;
    restored_step = std::stoi(log.substr(at + 14));
  }
  EXPECT_EQ(restored_step % 20, 0);
  EXPECT_GT(restored_step, 0);
  if (fs::exists(step140 + "/MANIFEST")) {
    EXPECT_EQ(restored_step, 140);
  }
  auto workers = StartWorkers(2, 200, "bsp", kAdam, &cluster);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster, r);
    EXPECT_TRUE(
        absl::StrContains(WorkerLog(cluster, r), absl::StrCat("resumes at step ", restored_step)))
        << WorkerLog(cluster, r);
    EXPECT_FALSE(absl::StrContains(WorkerLog(cluster, r),
                                   absl::StrCat("step ", restored_step - 1, " loss")));
    const std::vector<float> restored = ReadFloats(absl::StrCat(cluster.dir(), "/model", r));
    const std::vector<float> expected = ReadFloats(absl::StrCat(uninterrupted.dir(), "/model", r));
    ASSERT_EQ(restored.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      // Bitwise: the same sums in the same order, the same optimizer state.
      ASSERT_EQ(std::memcmp(&restored[i], &expected[i], sizeof(float)), 0)
          << "weight " << i << ": " << restored[i] << " vs " << expected[i];
    }
  }
}

TEST_P(CheckpointTest, RestoredJobEndsBitwiseLikeAnUninterruptedOne) {
  ExpectRestoredJobEndsBitwiseLikeAnUninterruptedOne(2, {});
}

// Replicated: each shard restores its part, and its backup catches up with the restored state
// (a snapshot of every partition) while the job goes on.
TEST_P(CheckpointTest, ReplicatedRestoredJobEndsBitwiseLikeAnUninterruptedOneAndItsBackupsCatchUp) {
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_NO_FATAL_FAILURE(ExpectRestoredJobEndsBitwiseLikeAnUninterruptedOne(
      3, {"--replicas=2", "--etcd=" + (*etcd)->endpoint(), "--lease_s=1"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::StrContains(
        ReadFile(cluster_.shard_log(i)),
        absl::StrCat("shard ", (i + 1) % 3, " is a full backup of the partitions placed on shard ",
                     i, " again")))
        << ReadFile(cluster_.shard_log(i));
  }
}

// ps-server --restore refuses what it must not resume from, each with its own message.
TEST_P(CheckpointTest, DamagedOrForeignCheckpointsAreRefusedNamingTheFile) {
  const std::string dir = cluster_.dir() + "/checkpoints";
  // One checkpoint, of step 20 (a second one could be skipped while the first is written).
  ASSERT_OK(StartCluster(2, 2, {"--checkpoint_every=20", "--checkpoint_dir=" + dir}));
  {
    auto workers = StartWorkers(2, 20, "bsp", kAdam);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0)
          << WorkerLog(cluster_, r) << ShardLogs(cluster_);
    }
  }
  const std::string good = server::CheckpointStepDir(dir, 20);
  ASSERT_TRUE(AwaitFile(good + "/MANIFEST", absl::Seconds(30)));
  KillShards(cluster_, 2);

  // A copy of step 20's checkpoint, changed by `damage`.
  int copies = 0;
  auto damaged = [&](auto damage) {
    const std::string copy = server::CheckpointStepDir(absl::StrCat(dir, "-copy", ++copies), 20);
    fs::create_directories(copy);
    fs::copy(good, copy, fs::copy_options::recursive);
    damage(copy);
    return copy;
  };
  // Starts shard `shard` of `num_shards` from `restore`; returns its exit code and log.
  auto restore = [&](const std::string& from, int shard, int num_shards,
                     const std::string& job = "hetps") {
    const std::string log = absl::StrCat(cluster_.dir(), "/restore", ++copies, ".log");
    Subprocess server(
        {BinaryPath("server/ps-server"), "--port=0", "--num_workers=2",
         absl::StrCat("--shard_index=", shard), absl::StrCat("--num_shards=", num_shards),
         "--job_id=" + job, "--restore=" + from, "--lifetime_s=1", TransportFlag()},
        log, Environment());
    const int code = server.Wait(absl::Seconds(30)).value_or(-1);
    return std::make_pair(code, ReadFile(log));
  };
  const std::string part = server::CheckpointPartName(1, 2);

  const std::string flipped = damaged([&](const std::string& copy) {
    std::fstream file(copy + "/" + part, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-7, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x10);
    file.seekp(-7, std::ios::end);
    file.put(byte);
  });
  auto [code, log] = restore(flipped, 1, 2);
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(absl::StrContains(log, part + ": CRC-32C")) << log;

  const std::string truncated = damaged([&](const std::string& copy) {
    fs::resize_file(copy + "/" + part, fs::file_size(copy + "/" + part) - 100);
  });
  std::tie(code, log) = restore(truncated, 1, 2);
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(absl::StrContains(log, part + ": ")) << log;
  EXPECT_TRUE(absl::StrContains(log, "the manifest says")) << log;
  EXPECT_TRUE(absl::StrContains(log, "truncated")) << log;

  const std::string uncommitted =
      damaged([&](const std::string& copy) { fs::remove(copy + "/MANIFEST"); });
  std::tie(code, log) = restore(uncommitted, 0, 2);
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(absl::StrContains(log, "MANIFEST: missing")) << log;

  std::tie(code, log) = restore(good, 0, 3);
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(absl::StrContains(log, "a checkpoint of 2 shards; this shard is one of 3")) << log;

  std::tie(code, log) = restore(good, 0, 2, "another-job");
  EXPECT_EQ(code, 1) << log;
  EXPECT_TRUE(absl::StrContains(log, "a checkpoint of job 'hetps'")) << log;

  // The intact checkpoint restores: the newest committed step under the directory.
  std::tie(code, log) = restore(dir, 1, 2);
  EXPECT_EQ(code, 0) << log;
  EXPECT_TRUE(absl::StrContains(log, "restored step 20")) << log;
}

TensorSpec SgdSpec(const std::string& name, uint64_t elements) {
  TensorSpec spec;
  spec.name = name;
  spec.num_elements = elements;
  spec.optimizer = {"sgd", {{"lr", 0.5}}};
  return spec;
}

// Runs steps [from, to) of one worker pushing ones: each step subtracts 0.5 from every weight.
void Steps(Client& client, TensorId id, uint64_t elements, uint64_t from, uint64_t to) {
  std::vector<float> gradient(elements, 1.0f), weights(elements);
  for (uint64_t step = from; step < to; ++step) {
    ASSERT_TRUE(client.PushPull(id, gradient, absl::MakeSpan(weights), step).Wait().ok()) << step;
  }
}

// Checkpoints on a worker's demand and on SIGTERM, with no periodic ones; the shard that
// holds no partition has no part and restores the step alone.
TEST_P(CheckpointTest, CheckpointsOnDemandAndOnSigtermRestoreTheirStep) {
  const std::string dir = cluster_.dir() + "/checkpoints";
  ASSERT_OK(StartCluster(3, 1, {"--checkpoint_dir=" + dir}));
  ClientOptions options = InProcessClientOptions();
  options.partition_bytes = 4096;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  // Two partitions of "w" on three shards: one shard holds none.
  const TensorSpec spec = SgdSpec("w", 2048);
  uint32_t empty = 0;
  while (empty == ShardOfPartition(TensorKeyFromName("w"), 0, 3) ||
         empty == ShardOfPartition(TensorKeyFromName("w"), 1, 3)) {
    ++empty;
  }
  absl::StatusOr<TensorId> id = (*client)->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Steps(**client, *id, spec.num_elements, 0, 5);

  // Between steps: committed when the call returns.
  absl::Status committed = (*client)->Checkpoint(5);
  ASSERT_TRUE(committed.ok()) << committed;
  EXPECT_TRUE(fs::exists(server::CheckpointStepDir(dir, 5) + "/MANIFEST"));
  EXPECT_FALSE(
      fs::exists(server::CheckpointStepDir(dir, 5) + "/" + server::CheckpointPartName(empty, 3)));
  absl::Status late = (*client)->Checkpoint(3);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  // A step ahead: taken when the partitions reach it, while the job goes on.
  absl::Status ahead;
  std::thread waiting([&] { ahead = (*client)->Checkpoint(7); });
  // Once both shards that hold "w" have the request, the job goes on past step 7.
  auto both_wait = [&] {
    absl::StatusOr<std::vector<ShardStats>> stats = (*client)->Stats();
    if (!stats.ok()) return false;
    int waiting_shards = 0;
    for (const ShardStats& shard : *stats) waiting_shards += shard.checkpoints_waiting > 0;
    return waiting_shards == 2;
  };
  ASSERT_TRUE(testing::AwaitCondition(both_wait, absl::Seconds(20), absl::Milliseconds(5)))
      << "the checkpoint request did not reach the shards";
  Steps(**client, *id, spec.num_elements, 5, 9);
  waiting.join();
  EXPECT_TRUE(ahead.ok()) << ahead.ToString();
  EXPECT_TRUE(fs::exists(server::CheckpointStepDir(dir, 7) + "/MANIFEST"));
  absl::StatusOr<std::vector<ShardStats>> stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const ShardStats& shard : *stats) {
    EXPECT_EQ(shard.checkpoints_waiting, 0u);
    if (shard.shard_index != empty) {
      EXPECT_EQ(shard.last_checkpoint, 7u);
    }
  }

  // SIGTERM between steps: every shard writes its part of the current step, 9.
  client->reset();
  for (int i = 0; i < 3; ++i) cluster_.shard(i).Signal(SIGTERM);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(cluster_.shard(i).Wait(absl::Seconds(30)), 0) << ReadFile(cluster_.shard_log(i));
  }
  ASSERT_TRUE(fs::exists(server::CheckpointStepDir(dir, 9) + "/MANIFEST"))
      << ReadFile(cluster_.shard_log(0));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster_.Restart(i, {"--restore=" + dir}).ok()) << ReadFile(cluster_.shard_log(i));
  }
  options = InProcessClientOptions();
  options.partition_bytes = 4096;
  client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->ResumeStep(), 9u);
  id = (*client)->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> weights(spec.num_elements);
  ASSERT_OK((*client)->Pull(*id, absl::MakeSpan(weights), 9).Wait());
  EXPECT_EQ(weights.front(), -4.5f);
  EXPECT_EQ(weights.back(), -4.5f);

  // From step 7's directory instead: that step.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cluster_.Restart(i, {"--restore=" + server::CheckpointStepDir(dir, 7)}).ok())
        << ReadFile(cluster_.shard_log(i));
  }
  client->reset();
  client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->ResumeStep(), 7u);
}

// A checkpoint asked of shards that keep none is refused, and the job carries on.
TEST_P(CheckpointTest, ShardsWithoutACheckpointDirRefuseACheckpoint) {
  ASSERT_OK(StartCluster(1, 1));
  auto client = Client::Create(InProcessClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  const TensorSpec spec = SgdSpec("w", 64);
  absl::StatusOr<TensorId> id = (*client)->Declare(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  Steps(**client, *id, spec.num_elements, 0, 2);
  absl::Status refused = (*client)->Checkpoint(2);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--checkpoint_dir")) << refused;
  Steps(**client, *id, spec.num_elements, 2, 3);
}

// Replicated, shard 1 killed early: shard 2 serves its partitions from then on and writes its
// part of every later checkpoint, so checkpoints still commit. The one of the last step, restored
// into a fresh cluster, holds exactly the weights the workers ended with.
TEST_P(CheckpointTest, CheckpointsStillCommitAfterATakeoverAndRestoreBitwise) {
  auto etcd = testing::EtcdProcess::Start();
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string dir = cluster_.dir() + "/checkpoints";
  const int steps = 60;
  // One checkpoint, of the last step (an earlier one still being written cannot skip it).
  ASSERT_OK(StartCluster(3, 2,
                         {"--replicas=2", "--etcd=" + (*etcd)->endpoint(), "--lease_s=1",
                          absl::StrCat("--checkpoint_every=", steps), "--checkpoint_dir=" + dir}));
  auto workers = StartWorkers(2, steps, "bsp");
  ASSERT_TRUE(
      AwaitText(absl::StrCat(cluster_.dir(), "/worker0.log"), "rank 0 step 10 ", absl::Seconds(60)))
      << WorkerLog(cluster_, 0);
  cluster_.shard(1).Signal(SIGKILL);
  ASSERT_EQ(cluster_.shard(1).Wait(absl::Seconds(10)), 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    // Both workers' logs: where one waits for the other's step, the other's says why.
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0)
        << integration::WorkerLogs(cluster_, 2) << ShardLogs(cluster_);
  }
  const std::string last = server::CheckpointStepDir(dir, steps);
  ASSERT_TRUE(AwaitFile(last + "/MANIFEST", absl::Seconds(30))) << ShardLogs(cluster_);
  // Shard 2 wrote shard 1's part (its writer logs after the part is durable: maybe after the
  // manifest, which the other part's writer may have committed).
  EXPECT_TRUE(
      AwaitText(cluster_.shard_log(2),
                absl::StrCat("shard 1: its part of the checkpoint of step ", steps, " is durable"),
                absl::Seconds(30)))
      << ReadFile(cluster_.shard_log(2));
  const std::vector<float> model = ReadFloats(absl::StrCat(cluster_.dir(), "/model0"));
  ASSERT_EQ(model.size(), static_cast<size_t>(integration::kDim + 1));
  cluster_.shard(0).Signal(SIGKILL);
  cluster_.shard(2).Signal(SIGKILL);

  // A new run of the job from that checkpoint, replicated again with the same etcd, whose
  // records still say that shard 2 serves shard 1's partitions (the last run's takeover, while
  // that run's leases may not have ended yet). Each shard must serve its own part again: shard
  // 2's copies of shard 1's partitions hold nothing of the checkpoint.
  LocalCluster restored;
  ASSERT_OK(StartClusterOf(
      restored, 3, 2,
      {"--restore=" + dir, "--replicas=2", "--etcd=" + (*etcd)->endpoint(), "--lease_s=1"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        absl::StrContains(ReadFile(restored.shard_log(i)), absl::StrCat("restored step ", steps)))
        << ReadFile(restored.shard_log(i));
  }
  // Both workers take one more step with zero gradients (SGD: the weights stay bitwise what
  // they were), through whichever shards serve now.
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::vector<TensorId>> ids(2);
  const std::vector<std::pair<std::string, int>> tensors = {{"linreg.weight", integration::kDim},
                                                            {"linreg.bias", 1}};
  for (int r = 0; r < 2; ++r) {
    ClientOptions options = InProcessClientOptions(r, 2);
    options.servers = restored.addresses();
    options.partition_bytes = 1024;  // as the workers cut them
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    for (const auto& [name, elements] : tensors) {
      TensorSpec spec;
      spec.name = name;
      spec.num_elements = static_cast<uint64_t>(elements);
      spec.optimizer = {"sgd", {{"lr", integration::kLearningRate}}};
      absl::StatusOr<TensorId> id = (*client)->Declare(spec);
      ASSERT_TRUE(id.ok()) << id.status();
      ids[r].push_back(*id);
    }
    clients.push_back(*std::move(client));
  }
  std::vector<std::vector<float>> pulled(2, std::vector<float>(model.size()));
  const std::vector<float> zeros(model.size(), 0.0f);  // outlives the operations
  std::vector<Operation> operations;
  for (int r = 0; r < 2; ++r) {
    size_t offset = 0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const size_t n = static_cast<size_t>(tensors[t].second);
      operations.push_back(clients[r]->PushPull(
          ids[r][t], absl::MakeConstSpan(zeros).subspan(offset, n),
          absl::MakeSpan(pulled[r]).subspan(offset, n), static_cast<uint64_t>(steps)));
      offset += n;
    }
  }
  for (const Operation& operation : operations) {
    const absl::Status status = operation.Wait();
    ASSERT_TRUE(status.ok()) << status << "\n" << ShardLogs(restored);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(std::memcmp(pulled[r].data(), model.data(), model.size() * sizeof(float)), 0)
        << "worker " << r << ": the step after the restore did not start from the checkpoint\n"
        << ReadFile(restored.shard_log(1)) << ReadFile(restored.shard_log(2));
  }
  // And shard 1 has a backup again: it serves its partitions, and shard 2 has caught up with
  // them (named with its lease), so that they survive the next loss and go on in checkpoints.
  auto etcd_client = server::EtcdClient::Connect((*etcd)->endpoint());
  ASSERT_TRUE(etcd_client.ok()) << etcd_client.status();
  std::vector<std::string> fields;  // epoch server backup backup_lease ...
  absl::Status read = absl::OkStatus();
  auto backed_up = [&] {
    absl::StatusOr<std::optional<server::EtcdClient::Value>> value =
        (*etcd_client)->Get("/hetps/hetps/groups/1");
    read = value.status();
    if (!value.ok() || !value->has_value()) return false;
    fields = absl::StrSplit((*value)->value, ' ');
    return fields.size() >= 4 && fields[1] == "1" && fields[2] == "2" && fields[3] != "0";
  };
  EXPECT_TRUE(testing::AwaitCondition(backed_up, absl::Seconds(30)))
      << "group 1's record: " << absl::StrJoin(fields, " ") << " (last read: " << read << ")\n"
      << ReadFile(restored.shard_log(1)) << ReadFile(restored.shard_log(2));
}

INSTANTIATE_TEST_SUITE_P(Transports, CheckpointTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
