// End to end with real processes on 127.0.0.1: ps-server shards and the example training job
// (worker/examples/linear_regression) as separate worker processes. Every test runs once per
// transport: gRPC, UCX (shared memory between the local processes) and UCX forced onto TCP with
// UCX_TLS, as UCX's own tests do.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/partitioning.h"
#include "gtest/gtest.h"
#include "optimizer/registry.h"
#include "tests/integration/example_job.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "worker/client.h"
#include "worker/examples/linreg_model.h"

namespace hetps {
namespace {

using integration::ExpectModelsMatchTheReference;
using integration::FinalLoss;
using integration::kDim;
using integration::kLearningRate;
using integration::kSamples;
using integration::MaxRelativeDifference;
using integration::ReadFloats;
using integration::SingleProcessReference;
using integration::WorkerArgs;
using integration::WorkerLog;
using integration::WorkerLogs;
using testing::BinaryPath;
using testing::LocalCluster;
using testing::ReadFile;
using testing::Subprocess;
using TrainingTest = integration::ExampleJobTest;

TEST_P(TrainingTest, BspOverTwoShardsAndThreeWorkersEqualsSingleProcessTraining) {
  ASSERT_OK(StartCluster(2, 3));
  const int steps = 60;
  std::vector<std::unique_ptr<Subprocess>> workers = StartWorkers(3, steps, "bsp");
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectModelsMatchTheReference(cluster_, 3, steps));
  for (int r = 0; r < 3; ++r) {
    EXPECT_LT(FinalLoss(WorkerLog(cluster_, r)), 1e-3) << WorkerLog(cluster_, r);
    // The bytes went the way the parameter says: the log names the lanes UCX chose.
    const std::string log = WorkerLog(cluster_, r);
    if (GetParam() != "grpc") {
      const std::string want = GetParam() == "ucx" ? "/memory" : "tcp/lo";
      EXPECT_TRUE(absl::StrContains(log, "ucx: connected to") && absl::StrContains(log, want))
          << "no " << want << " lane in\n"
          << log;
      EXPECT_FALSE(absl::StrContains(log, "tcp/eth")) << log;
    }
  }
}

// Workers that busy-poll send and receive their messages on the thread that waits for them
// (the shards sleep when idle as usual): the same training, the same result.
TEST(BusyPollingTrainingTest, BspWorkersThatDriveUcxThemselvesEqualSingleProcessTraining) {
#ifndef HETPS_HAVE_UCX
  GTEST_SKIP() << "this build has no UCX";
#endif
  LocalCluster cluster;
  ASSERT_OK(cluster.Start(2, 2, {"--transport=ucx"}, {"HETPS_LOG_LEVEL=info"}));
  const int steps = 40;
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args =
        WorkerArgs(cluster, r, 2, steps, "bsp", absl::StrCat(cluster.dir(), "/model", r));
    args.push_back("--transport=ucx");
    args.push_back("--ucx_busy_poll");
    workers.push_back(
        std::make_unique<Subprocess>(args, absl::StrCat(cluster.dir(), "/worker", r, ".log"),
                                     std::vector<std::string>{"HETPS_LOG_LEVEL=info"}));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster, r);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectModelsMatchTheReference(cluster, 2, steps));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::StrContains(WorkerLog(cluster, r), "/memory")) << WorkerLog(cluster, r);
  }
}

// The device example (worker/examples/mlp_training) on the CPU: its tensors go through the
// device client's staging pipeline on host memory, with partitions small enough that every step
// moves many chunks.
TEST_P(TrainingTest, MlpExampleTrainsThroughTheDeviceClientOnTheCpu) {
  ASSERT_OK(StartCluster(2, 2));
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinaryPath("worker/examples/mlp_training"),
                                 "--servers=" + cluster_.servers_flag(), absl::StrCat("--rank=", r),
                                 "--world_size=2", "--steps=150", "--device=cpu",
                                 "--partition_bytes=1024", "--staging_mb=1", TransportFlag()},
        absl::StrCat(cluster_.dir(), "/worker", r, ".log"), Environment()));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
    const std::string log = WorkerLog(cluster_, r);
    const std::string first = absl::StrCat("worker ", r, " step 0 loss ");
    const size_t at = log.find(first);
    ASSERT_NE(at, std::string::npos) << log;
    const float first_loss = std::stof(log.substr(at + first.size()));
    EXPECT_LT(FinalLoss(log), 0.5f * first_loss) << log;
    EXPECT_TRUE(absl::StrContains(log, "training on the CPU")) << log;
    EXPECT_TRUE(absl::StrContains(log, "step 149 loss")) << log;
    EXPECT_TRUE(absl::StrContains(log, "waited_on_ps_ms")) << log;
  }
}

TEST_P(TrainingTest, AspOverTwoShardsAndThreeWorkersConverges) {
  ASSERT_OK(StartCluster(2, 3));
  std::vector<std::unique_ptr<Subprocess>> workers = StartWorkers(3, 60, "asp");
  // ASP does not say how the workers' steps interleave: on a loaded machine one worker may run
  // all its steps before another starts, and ends with only its own 60 updates applied. The
  // worker that ends last has seen every update: it converges; every one makes progress.
  float best = 1e9f;
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
    const std::string log = WorkerLog(cluster_, r);
    const std::string first = absl::StrCat("rank ", r, " step 0 loss ");
    const size_t at = log.find(first);
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_LT(FinalLoss(log), 0.5f * std::stof(log.substr(at + first.size()))) << log;
    best = std::min(best, FinalLoss(log));
  }
  EXPECT_LT(best, 1e-3);
}

TEST_P(TrainingTest, AdamWithWeightDecayOverTwoShardsEqualsSingleProcessTraining) {
  ASSERT_OK(StartCluster(2, 2));
  const int steps = 40;
  std::vector<std::unique_ptr<Subprocess>> workers =
      StartWorkers(2, steps, "bsp", {"--optimizer=adam", "--lr=0.05", "--weight_decay=0.01"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
  }
  const std::vector<float> reference =
      SingleProcessReference(2, steps, "adam", {{"lr", 0.05}, {"weight_decay", 0.01}});
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> model = ReadFloats(absl::StrCat(cluster_.dir(), "/model", r));
    ASSERT_EQ(model.size(), reference.size());
    EXPECT_LE(MaxRelativeDifference(model, reference), 1e-5) << "worker " << r;
  }
}

// bf16 gradients carry 8 significant bits: training still converges, to within
// kBf16Tolerance (relative, per weight) of the fp32 run. The figure is documented in the
// README's section on wire types.
TEST_P(TrainingTest, Bf16GradientsConvergeCloseToTheFp32Run) {
  constexpr float kBf16Tolerance = 0.005f;
  ASSERT_OK(StartCluster(2, 2));
  const int steps = 60;
  std::vector<std::unique_ptr<Subprocess>> workers =
      StartWorkers(2, steps, "bsp", {"--optimizer=adam", "--lr=0.05", "--push_dtype=bf16"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(workers[r]->Wait(absl::Seconds(120)), 0) << WorkerLog(cluster_, r);
  }
  const std::vector<float> fp32 = SingleProcessReference(2, steps, "adam", {{"lr", 0.05}});
  const examples::LinregProblem problem{kDim, kSamples};
  const std::vector<float> truth = examples::TrueModel(problem);
  const std::vector<float> model = ReadFloats(absl::StrCat(cluster_.dir(), "/model", 0));
  ASSERT_EQ(model.size(), fp32.size());
  const float difference = MaxRelativeDifference(model, fp32);
  std::printf("bf16 gradients: max relative difference to the fp32 run %.5f\n", difference);
  EXPECT_LE(difference, kBf16Tolerance);
  EXPECT_GT(difference, 0.0f);  // the wire really carried bf16
  // And both approach the true model.
  EXPECT_LE(MaxRelativeDifference(model, truth), 0.1f);
}

TEST_P(TrainingTest, SumOnlyShardsReturnExactlyTheSum) {
  ASSERT_OK(StartCluster(2, 2));
  std::unique_ptr<Client> clients[2];
  for (uint32_t r = 0; r < 2; ++r) {
    ClientOptions options = InProcessClientOptions(r, 2);
    options.partition_bytes = 1 << 16;
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    clients[r] = *std::move(client);
  }
  TensorSpec spec;
  spec.name = "gradients";
  spec.num_elements = 1 << 20;
  spec.optimizer = {"sum", {}};
  TensorId id = 0;
  for (auto& client : clients) {
    auto declared = client->Declare(spec);
    ASSERT_TRUE(declared.ok()) << declared.status();
    id = *declared;
  }
  std::vector<float> g0(spec.num_elements), g1(spec.num_elements), out0(g0.size()), out1(g0.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < g0.size(); ++i) {
    g0[i] = normal(rng);
    g1[i] = normal(rng);
  }
  Operation a = clients[0]->PushPull(id, g0, absl::MakeSpan(out0), 0);
  Operation b = clients[1]->PushPull(id, g1, absl::MakeSpan(out1), 0);
  ASSERT_OK(a.Wait());
  ASSERT_OK(b.Wait());
  for (size_t i = 0; i < g0.size(); ++i) {
    ASSERT_EQ(out0[i], g0[i] + g1[i]) << i;
    ASSERT_EQ(out1[i], g0[i] + g1[i]) << i;
  }
}

TEST_P(TrainingTest, HundredMegabyteTensorRoundTripsExactly) {
  ASSERT_OK(StartCluster(2, 1));
  ClientOptions options = InProcessClientOptions();
  options.call_timeout = absl::Seconds(120);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const size_t n = 25 * 1000 * 1000;  // 100 MB of fp32
  std::vector<float> values(n);
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (float& v : values) {
    // Arbitrary finite bit patterns, subnormals and negative zero included.
    uint32_t word = bits(rng) & 0xbfffffffu;
    std::memcpy(&v, &word, sizeof(v));
  }
  TensorSpec spec;
  spec.name = "huge";
  spec.num_elements = n;
  spec.optimizer = {"sgd", {{"lr", 1.0}}};
  auto id = (*client)->Declare(spec, values);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> back(n);
  ASSERT_OK((*client)->Pull(*id, absl::MakeSpan(back)).Wait());
  ASSERT_EQ(0, std::memcmp(back.data(), values.data(), n * sizeof(float)));

  // And through a push: with lr 1, w' = w - g for every element, exactly.
  std::vector<float> gradient(n);
  for (size_t i = 0; i < n; ++i) gradient[i] = static_cast<float>(i % 1000) * 0.5f;
  ASSERT_OK((*client)->PushPull(*id, gradient, absl::MakeSpan(back), 0).Wait());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], values[i] - gradient[i]) << i;
}

// Polls the shards until every partition has reached `version`. Fails at once when a worker
// ends first (a worker whose step timed out waiting for another that started late, say), and
// after 60 s; either way with every worker's and shard's log.
::testing::AssertionResult TrainingReaches(const LocalCluster& cluster,
                                           std::vector<std::unique_ptr<Subprocess>>& workers,
                                           uint64_t version) {
  const int world_size = static_cast<int>(workers.size());
  auto logs = [&] { return WorkerLogs(cluster, world_size) + integration::ShardLogs(cluster); };
  ClientOptions options;
  options.servers = cluster.addresses();
  // An operator's client: one with a worker's rank would take that worker's place.
  options.admin = true;
  auto observer = Client::Create(options);
  if (!observer.ok()) return ::testing::AssertionFailure() << observer.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    for (int r = 0; r < world_size; ++r) {
      if (!workers[r]->running()) {
        return ::testing::AssertionFailure()
               << "worker " << r << " ended before version " << version << ":\n"
               << logs();
      }
    }
    auto stats = (*observer)->Stats();
    if (!stats.ok()) return ::testing::AssertionFailure() << stats.status();
    bool reached = true;
    for (const ShardStats& shard : *stats) {
      reached = reached && shard.num_partitions > 0 && shard.min_version >= version;
    }
    if (reached) return ::testing::AssertionSuccess();
    absl::SleepFor(absl::Milliseconds(20));
  }
  return ::testing::AssertionFailure() << "version " << version << " not reached in 60 s\n"
                                       << logs();
}

// Short enough that a lost peer ends the job soon, long enough that the first BSP step, which
// waits for every worker, outlasts the gap between the workers' starts on a loaded machine.
constexpr char kShortCallTimeout[] = "--call_timeout_s=5";

// The worker must end, soon, with the example's error exit code and a deadline error.
void ExpectDeadlineFailure(Subprocess& worker, const LocalCluster& cluster, int rank) {
  const absl::Time start = absl::Now();
  std::optional<int> code = worker.Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value()) << "the worker hangs";
  const std::string log = WorkerLog(cluster, rank);
  EXPECT_EQ(*code, 2) << log;
  EXPECT_NE(log.find("DEADLINE_EXCEEDED"), std::string::npos) << log;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_P(TrainingTest, KilledWorkerMakesTheOthersFailWithADeadlineError) {
  ASSERT_OK(StartCluster(2, 3));
  std::vector<std::unique_ptr<Subprocess>> workers =
      StartWorkers(3, 100000, "bsp", {kShortCallTimeout});
  ASSERT_TRUE(TrainingReaches(cluster_, workers, 3));
  workers[2]->Signal(SIGKILL);
  for (int r = 0; r < 2; ++r) ExpectDeadlineFailure(*workers[r], cluster_, r);
  // The shards are still alive and serving.
  EXPECT_TRUE(cluster_.shard(0).running()) << integration::ShardLogs(cluster_);
  EXPECT_TRUE(cluster_.shard(1).running()) << integration::ShardLogs(cluster_);
}

TEST_P(TrainingTest, KilledShardMakesTheWorkersFailWithADeadlineError) {
  ASSERT_OK(StartCluster(2, 2));
  std::vector<std::unique_ptr<Subprocess>> workers =
      StartWorkers(2, 100000, "bsp", {kShortCallTimeout});
  ASSERT_TRUE(TrainingReaches(cluster_, workers, 3));
  cluster_.shard(1).Signal(SIGKILL);
  for (int r = 0; r < 2; ++r) ExpectDeadlineFailure(*workers[r], cluster_, r);
}

// A worker killed while it pushes 64 MiB tensors (messages in flight, large payloads half
// received): the shard keeps serving the others.
TEST_P(TrainingTest, WorkerKilledMidTransferLeavesTheShardServing) {
  ASSERT_OK(StartCluster(1, 2));
  Subprocess pusher(
      {BinaryPath("bench/ps-bench"), "--servers=" + cluster_.servers_flag(), TransportFlag(),
       "--op=push", "--sync=asp", "--optimizer=sgd", "-b", "64M", "-e", "64M", "--warmup=0",
       "--iterations=100000", "--rank=0", "--world_size=2"},
      cluster_.dir() + "/pusher.log", Environment());
  ClientOptions options = InProcessClientOptions(/*rank=*/1, /*world_size=*/2);
  options.call_timeout = absl::Seconds(30);
  auto observer = Client::Create(options);
  ASSERT_TRUE(observer.ok()) << observer.status();
  // The pusher meets the other worker once, after its declaration.
  ASSERT_TRUE((*observer)->Barrier().ok()) << ReadFile(cluster_.dir() + "/pusher.log");
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  uint64_t pushed = 0;
  while (pushed < 3 && absl::Now() < give_up && pusher.running()) {
    auto stats = (*observer)->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    pushed = (*stats)[0].push_items;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(pushed, 3u) << ReadFile(cluster_.dir() + "/pusher.log");
  pusher.Signal(SIGKILL);
  ASSERT_TRUE(pusher.Wait(absl::Seconds(10)).has_value());

  // Another worker declares, pushes and pulls as usual.
  TensorSpec spec;
  spec.name = "after";
  spec.num_elements = 1 << 20;
  spec.sync = SyncMode::kAsp;
  spec.optimizer = {"sgd", {{"lr", 1.0}}};
  std::vector<float> initial(spec.num_elements, 3.0f), gradient(spec.num_elements, 1.0f),
      back(spec.num_elements);
  auto id = (*observer)->Declare(spec, initial);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_OK((*observer)->PushPull(*id, gradient, absl::MakeSpan(back), 0).Wait());
  EXPECT_EQ(back.front(), 2.0f);
  EXPECT_EQ(back.back(), 2.0f);
  EXPECT_TRUE(cluster_.shard(0).running()) << ReadFile(cluster_.shard_log(0));
}

// A shard killed and started again, empty, on its port while a client is connected: once the
// client reaches the new process, every call that touches the lost partitions fails with
// DATA_LOSS naming the shard and the tensors (never the declared values at version 0 again), and
// so does declaring again, from this worker or a new run of one; the other shard still serves.
TEST_P(TrainingTest, ShardRestartedWithoutItsStateAnswersDataLoss) {
  ASSERT_OK(StartCluster(2, 1));
  ClientOptions options = InProcessClientOptions();
  options.partition_bytes = 4096;  // "w" spans both shards
  options.call_timeout = absl::Seconds(2);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TensorSpec spec;
  spec.name = "w";
  spec.num_elements = 10000;
  spec.optimizer = {"sgd", {{"lr", 0.5}}};
  std::vector<float> initial(spec.num_elements), back(spec.num_elements);
  for (size_t i = 0; i < initial.size(); ++i) initial[i] = static_cast<float>(i);
  // A tensor of one partition, on shard 0 only.
  TensorSpec small = spec;
  small.num_elements = 16;
  for (int i = 0;
       small.name == spec.name || ShardOfPartition(TensorKeyFromName(small.name), 0, 2) != 0; ++i) {
    small.name = absl::StrCat("small", i);
  }
  std::vector<float> small_back(small.num_elements);
  absl::StatusOr<TensorId> id = (*client)->Declare(spec, initial);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<TensorId> small_id = (*client)->Declare(small, {});
  ASSERT_TRUE(small_id.ok()) << small_id.status();
  std::vector<float> gradient(spec.num_elements, 1.0f);
  ASSERT_OK((*client)->PushPull(*id, gradient, absl::MakeSpan(back), 0).Wait());
  ASSERT_OK((*client)
                ->PushPull(*small_id, absl::MakeConstSpan(gradient).first(small.num_elements),
                           absl::MakeSpan(small_back), 0)
                .Wait());

  cluster_.shard(1).Signal(SIGKILL);
  ASSERT_EQ(cluster_.shard(1).Wait(absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(cluster_.Restart(1).ok()) << ReadFile(cluster_.shard_log(1));

  // Until the client reaches the new process its calls fail with connection errors; then with
  // DATA_LOSS, for good.
  absl::Status pulled;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  do {
    const absl::Time attempt = absl::Now();
    pulled = (*client)->Pull(*id, absl::MakeSpan(back), 1).Wait();
    ASSERT_LT(absl::Now() - attempt, absl::Seconds(10)) << "Pull hangs";
    if (pulled.code() == absl::StatusCode::kDataLoss) break;
    ASSERT_TRUE(pulled.code() == absl::StatusCode::kUnavailable ||
                pulled.code() == absl::StatusCode::kDeadlineExceeded)
        << pulled;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < give_up);
  ASSERT_EQ(pulled.code(), absl::StatusCode::kDataLoss) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "shard 1")) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "restarted without its state")) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "'w'")) << pulled;
  EXPECT_EQ((*client)->PushPull(*id, gradient, absl::MakeSpan(back), 1).Wait().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ((*client)->Declare(spec, initial).status().code(), absl::StatusCode::kDataLoss);
  // The tensor on shard 0 alone is intact.
  ASSERT_OK((*client)->Pull(*small_id, absl::MakeSpan(small_back), 1).Wait());
  EXPECT_EQ(small_back[0], -0.5f);

  // A new run of the worker meets the restarted shard afresh: its declaration finds shard 1
  // empty while shard 0 has applied a step, and marks the tensor lost there...
  client->reset();
  auto rerun = Client::Create(options);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  absl::Status declared = (*rerun)->Declare(spec, initial).status();
  EXPECT_EQ(declared.code(), absl::StatusCode::kDataLoss) << declared;
  EXPECT_TRUE(absl::StrContains(declared.message(), "shard 1 (")) << declared;
  EXPECT_TRUE(absl::StrContains(declared.message(), "had applied")) << declared;
  rerun->reset();
  // ...so that every later worker is told so by the shard itself.
  auto another = Client::Create(options);
  ASSERT_TRUE(another.ok()) << another.status();
  declared = (*another)->Declare(spec, initial).status();
  EXPECT_EQ(declared.code(), absl::StatusCode::kDataLoss) << declared;
  EXPECT_TRUE(absl::StrContains(declared.message(), "lost its state on shard 1")) << declared;
}

TEST_P(TrainingTest, ShardRefusesABusyPort) {
  ASSERT_OK(StartCluster(1, 1));
  const std::string port = cluster_.addresses()[0].substr(cluster_.addresses()[0].rfind(':') + 1);
  Subprocess second({BinaryPath("server/ps-server"), "--port=" + port, TransportFlag()},
                    cluster_.dir() + "/second.txt");
  EXPECT_EQ(second.Wait(absl::Seconds(30)), 1) << ReadFile(cluster_.dir() + "/second.txt");
}

TEST_P(TrainingTest, ShardStopsOnSigterm) {
  ASSERT_OK(StartCluster(1, 1));
  cluster_.shard(0).Signal(SIGTERM);
  EXPECT_EQ(cluster_.shard(0).Wait(absl::Seconds(10)), 0) << ReadFile(cluster_.shard_log(0));
}

INSTANTIATE_TEST_SUITE_P(Transports, TrainingTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps
