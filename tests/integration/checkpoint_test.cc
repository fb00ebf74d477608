// Consistent checkpoints with real processes: shards that checkpoint while the example job
// trains, are killed, and restore; the job goes on from the checkpoint's step and ends with
// exactly the weights of a run that was never interrupted. Damaged or foreign checkpoints are
// refused by ps-server, naming the file.
#include "server/checkpoint.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/example_job.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;
using integration::ReadFloats;
using integration::WorkerLog;
using testing::BinaryPath;
using testing::LocalCluster;
using testing::ReadFile;
using testing::Subprocess;
using CheckpointTest = integration::ExampleJobTest;

const std::vector<std::string> kAdam = {"--optimizer=adam"};

// Waits (bounded) until `path` exists.
bool AwaitFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!fs::exists(path)) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void KillShards(LocalCluster& cluster, int num_shards) {
  for (int i = 0; i < num_shards; ++i) {
    cluster.shard(i).Signal(SIGKILL);
    ASSERT_EQ(cluster.shard(i).Wait(absl::Seconds(10)), 128 + SIGKILL);
  }
}

TEST_P(CheckpointTest, RestoredJobEndsBitwiseLikeAnUninterruptedOne) {
  // The uninterrupted run: 200 BSP steps of Adam, 2 workers, 2 shards.
  LocalCluster uninterrupted;
  ASSERT_TRUE(StartClusterOf(uninterrupted, 2, 2).ok());
  {
    auto workers = StartWorkers(2, 200, "bsp", kAdam, &uninterrupted);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(uninterrupted, r);
    }
  }

  // The same job with a checkpoint every 20 steps, stopped after step 150 by killing every
  // shard, then restored from the newest checkpoint (step 140).
  const std::string dir = cluster_.dir() + "/checkpoints";
  ASSERT_TRUE(StartCluster(2, 2, {"--checkpoint_every=20", "--checkpoint_dir=" + dir}).ok());
  {
    auto workers = StartWorkers(2, 150, "bsp", kAdam);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
    }
  }
  const std::string step140 = server::CheckpointStepDir(dir, 140);
  ASSERT_TRUE(AwaitFile(step140 + "/MANIFEST", absl::Seconds(30)))
      << ReadFile(cluster_.shard_log(0)) << ReadFile(cluster_.shard_log(1));
  KillShards(cluster_, 2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster_.Restart(i, {"--restore=" + dir}).ok()) << ReadFile(cluster_.shard_log(i));
    EXPECT_TRUE(absl::StrContains(ReadFile(cluster_.shard_log(i)), "restored step 140"))
        << ReadFile(cluster_.shard_log(i));
  }
  auto workers = StartWorkers(2, 200, "bsp", kAdam);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
    EXPECT_TRUE(absl::StrContains(WorkerLog(cluster_, r), "resumes at step 140"))
        << WorkerLog(cluster_, r);
    EXPECT_FALSE(absl::StrContains(WorkerLog(cluster_, r), "step 139 loss"));
    const std::vector<float> restored = ReadFloats(absl::StrCat(cluster_.dir(), "/model", r));
    const std::vector<float> expected = ReadFloats(absl::StrCat(uninterrupted.dir(), "/model", r));
    ASSERT_EQ(restored.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      // Bitwise: the same sums in the same order, the same optimizer state.
      ASSERT_EQ(std::memcmp(&restored[i], &expected[i], sizeof(float)), 0)
          << "weight " << i << ": " << restored[i] << " vs " << expected[i];
    }
  }
}

// ps-server --restore refuses what it must not resume from, each with its own message.
TEST_P(CheckpointTest, DamagedOrForeignCheckpointsAreRefusedNamingTheFile) {
  const std::string dir = cluster_.dir() + "/checkpoints";
  ASSERT_TRUE(StartCluster(2, 2, {"--checkpoint_every=10", "--checkpoint_dir=" + dir}).ok());
  {
    auto workers = StartWorkers(2, 20, "bsp", kAdam);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
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

INSTANTIATE_TEST_SUITE_P(Transports, CheckpointTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
