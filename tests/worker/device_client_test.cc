// The device client's staging pipeline on host memory (the same code a GPU runs, with memcpy
// copy queues), against shards started in this process.
#include "worker/device_client.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "worker/device/copy_engine.h"
#include "worker/device/staging_pipeline.h"
#include "worker/local_group.h"

namespace hetps {
namespace {

using testing::TestCluster;

TensorSpec Spec(const std::string& name, uint64_t n) {
  TensorSpec spec;
  spec.name = name;
  spec.num_elements = n;
  spec.optimizer = {"sgd", {{"lr", 0.1}, {"momentum", 0.9}}};
  spec.init = Initializer::Uniform(-1, 1, 7);
  return spec;
}

float Gradient(int step, size_t tensor, size_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + step + 3.0 * tensor));
}

// Staging slots of the test clusters' partition size (1 KiB).
DeviceClientOptions HostOptions(size_t slots) {
  DeviceClientOptions options;
  options.memory = MemoryKind::kHost;
  options.staging_bytes = slots * 1024;
  return options;
}

std::unique_ptr<DeviceClient> NewDeviceClient(Client* client, const DeviceClientOptions& options) {
  auto device = DeviceClient::Create(client, options);
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? *std::move(device) : nullptr;
}

class DeviceClientTest : public ::testing::TestWithParam<std::string> {};

// Odd sizes (a partial partition, one element, many partitions, tensors sharing a slot), one
// tensor with 16-bit wire types, few slots so chunks queue for them: the weights equal, bit for
// bit, those of the host client doing the same steps on a twin set of tensors.
TEST_P(DeviceClientTest, StagedPushPullEqualsTheHostClientBitForBit) {
  auto cluster = TestCluster::Start(GetParam(), 2, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_TRUE(client.ok()) << client.status();
  std::unique_ptr<DeviceClient> device = NewDeviceClient(client->get(), HostOptions(3));
  ASSERT_NE(device, nullptr);

  const std::vector<uint64_t> sizes = {1, 17, 255, 256, 257, 1000, 4099, 3 * 256 + 5};
  std::vector<TensorId> staged, direct;
  std::vector<std::vector<float>> gradients, staged_weights, direct_weights;
  for (size_t t = 0; t < sizes.size(); ++t) {
    TensorSpec staged_spec = Spec(absl::StrCat("staged", t), sizes[t]);
    if (t == 5) {  // 16-bit on the wire: the client converts to and from the staging slots
      staged_spec.push_dtype = DType::kBf16;
      staged_spec.pull_dtype = DType::kFp16;
    }
    TensorSpec direct_spec = staged_spec;
    direct_spec.name = absl::StrCat("direct", t);
    auto a = (*client)->Declare(staged_spec);
    auto b = (*client)->Declare(direct_spec);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    staged.push_back(*a);
    direct.push_back(*b);
    gradients.emplace_back(sizes[t]);
    staged_weights.emplace_back(sizes[t], NAN);
    direct_weights.emplace_back(sizes[t], NAN);
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<DeviceItem> items;
    std::vector<PushItem> pushes;
    std::vector<PullItem> pulls;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) gradients[t][i] = Gradient(step, t, i);
      items.push_back({staged[t], gradients[t].data(), staged_weights[t].data(), sizes[t],
                       static_cast<int>(t % 3)});
      pushes.push_back({direct[t], gradients[t], {}});
      pulls.push_back({direct[t], absl::MakeSpan(direct_weights[t]), {}});
    }
    ASSERT_OK(device->PushPull(items, step, nullptr).Wait());
    ASSERT_OK((*client)->PushPull(pushes, pulls, step).Wait());
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        ASSERT_EQ(staged_weights[t][i], direct_weights[t][i])
            << "tensor " << t << " [" << i << "] step " << step;
      }
    }
  }
  // Push and pull on their own.
  std::vector<DeviceItem> items;
  for (size_t t = 0; t < sizes.size(); ++t) {
    items.push_back({staged[t], gradients[t].data(), staged_weights[t].data(), sizes[t], 0});
  }
  ASSERT_OK(device->Push(items, 3, nullptr).Wait());
  std::vector<float> before = staged_weights[6];
  ASSERT_OK(device->Pull(items, 4, nullptr).Wait());
  EXPECT_NE(staged_weights[6], before);  // version 4 is after the push of step 3
}

INSTANTIATE_TEST_SUITE_P(Transports, DeviceClientTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({"inproc"})),
                         [](const auto& info) { return testing::TestName(info.param); });

// Forwards to a real client and notes the first tensor of every push it sends, in order.
class RecordingClient final : public Client {
 public:
  explicit RecordingClient(Client* inner) : inner_(inner) {}
  std::vector<TensorId> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

  const ClientOptions& options() const override { return inner_->options(); }
  absl::StatusOr<std::vector<TensorPartition>> Partitions(TensorId tensor) override {
    return inner_->Partitions(tensor);
  }
  absl::StatusOr<TensorState> ReadBackupState(TensorId tensor) override {
    return inner_->ReadBackupState(tensor);
  }
  absl::StatusOr<TensorState> ReadState(TensorId tensor) override {
    return inner_->ReadState(tensor);
  }
  absl::Status WriteState(TensorId tensor, const TensorState& state) override {
    return inner_->WriteState(tensor, state);
  }
  absl::StatusOr<TensorId> Declare(const TensorSpec& spec,
                                   absl::Span<const float> initial_values) override {
    return inner_->Declare(spec, initial_values);
  }
  Operation Push(absl::Span<const PushItem> gradients, uint64_t step, DoneCallback done) override {
    Note(gradients);
    return inner_->Push(gradients, step, std::move(done));
  }
  Operation Pull(absl::Span<const PullItem> weights, uint64_t min_version,
                 DoneCallback done) override {
    return inner_->Pull(weights, min_version, std::move(done));
  }
  Operation PushPull(absl::Span<const PushItem> gradients, absl::Span<const PullItem> weights,
                     uint64_t step, DoneCallback done) override {
    Note(gradients);
    return inner_->PushPull(gradients, weights, step, std::move(done));
  }
  absl::Status SetHyperparameters(TensorId tensor, uint64_t from_step,
                                  const std::map<std::string, double>& changes) override {
    return inner_->SetHyperparameters(tensor, from_step, changes);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  uint64_t ResumeStep() const override { return inner_->ResumeStep(); }
  absl::Status Checkpoint(uint64_t step) override { return inner_->Checkpoint(step); }
  absl::StatusOr<DropResult> Drop(absl::Span<const std::string> names) override {
    return inner_->Drop(names);
  }
  absl::StatusOr<DropResult> DropAll() override { return inner_->DropAll(); }
  absl::Status StopShard(uint32_t shard) override { return inner_->StopShard(shard); }
  absl::StatusOr<std::vector<ShardStats>> Stats() override { return inner_->Stats(); }
  std::string metrics_address() const override { return inner_->metrics_address(); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  void Note(absl::Span<const PushItem> gradients) {
    absl::MutexLock lock(&mu_);
    sent_.push_back(gradients.front().tensor);
  }

  Client* const inner_;
  absl::Mutex mu_;
  std::vector<TensorId> sent_ ABSL_GUARDED_BY(mu_);
};

// Two slots: one push-pull chunk at a time. Worker 1 holds the first chunk back (BSP), so what
// queues behind it is sent in priority order, a later call's high priority first.
TEST(DeviceClientPriorityTest, HigherPriorityPartitionsAreSentFirstAcrossCalls) {
  auto cluster = TestCluster::Start("inproc", 1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto worker0 = (*cluster)->NewClient(0);
  auto worker1 = (*cluster)->NewClient(1);
  ASSERT_TRUE(worker0.ok() && worker1.ok());
  RecordingClient recording(worker0->get());
  std::unique_ptr<DeviceClient> device = NewDeviceClient(&recording, HostOptions(2));
  ASSERT_NE(device, nullptr);
  const uint64_t n = 256;  // one partition, one chunk each
  std::vector<TensorId> ids;
  for (const char* name : {"first", "low", "mid", "urgent"}) {
    for (auto* client : {worker0->get(), worker1->get()}) {
      auto id = client->Declare(Spec(name, n));
      ASSERT_TRUE(id.ok()) << id.status();
      if (client == worker0->get()) ids.push_back(*id);
    }
  }
  std::vector<std::vector<float>> grads(4, std::vector<float>(n, 1.0f)), weights = grads;
  auto item = [&](int t, int priority) {
    return DeviceItem{ids[t], grads[t].data(), weights[t].data(), n, priority};
  };
  const DeviceItem call1[] = {item(0, 9), item(1, 0), item(2, 1)};
  Operation op1 = device->PushPull(call1, 0, nullptr);
  // Wait until the first chunk is sent and held at the shard; the others queue for slots.
  for (int i = 0; i < 1000 && recording.sent().empty(); ++i) absl::SleepFor(absl::Milliseconds(2));
  const DeviceItem call2[] = {item(3, 5)};
  Operation op2 = device->PushPull(call2, 0, nullptr);
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(recording.sent().size(), 1u);
  std::vector<PushItem> pushes;
  std::vector<PullItem> pulls;
  std::vector<std::vector<float>> other_weights = grads;
  for (int t = 0; t < 4; ++t) {
    pushes.push_back({ids[t], grads[t], {}});
    pulls.push_back({ids[t], absl::MakeSpan(other_weights[t]), {}});
  }
  ASSERT_OK((*worker1)->PushPull(pushes, pulls, 0).Wait());
  ASSERT_OK(op1.Wait());
  ASSERT_OK(op2.Wait());
  EXPECT_EQ(recording.sent(), (std::vector<TensorId>{ids[0], ids[3], ids[2], ids[1]}));
  for (int t = 0; t < 4; ++t) EXPECT_EQ(weights[t], other_weights[t]) << t;
}

// Closing with work queued: what waits for a slot ends with Cancelled at once, what is on the
// wire finishes, and the client underneath keeps working.
TEST(DeviceClientCloseTest, ClosingEndsQueuedChunksAndWaitsForThoseInFlight) {
  auto cluster = TestCluster::Start("inproc", 1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto worker0 = (*cluster)->NewClient(0);
  auto worker1 = (*cluster)->NewClient(1);
  ASSERT_TRUE(worker0.ok() && worker1.ok());
  std::unique_ptr<DeviceClient> device = NewDeviceClient(worker0->get(), HostOptions(2));
  ASSERT_NE(device, nullptr);
  const uint64_t n = 256;
  std::vector<TensorId> ids;
  for (const char* name : {"a", "b", "c"}) {
    auto id = (*worker0)->Declare(Spec(name, n));
    ASSERT_TRUE(id.ok() && (*worker1)->Declare(Spec(name, n)).ok());
    ids.push_back(*id);
  }
  std::vector<std::vector<float>> grads(3, std::vector<float>(n, 1.0f)), weights = grads;
  std::vector<DeviceItem> items;
  for (int t = 0; t < 3; ++t) items.push_back({ids[t], grads[t].data(), weights[t].data(), n, 0});
  Operation op = device->PushPull(items, 0, nullptr);  // "a" goes out and waits for worker 1
  absl::SleepFor(absl::Milliseconds(50));
  std::thread closing([&] { device.reset(); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(op.done());  // "a" is still on the wire
  std::vector<float> other(n);
  ASSERT_OK((*worker1)->PushPull(ids[0], grads[0], absl::MakeSpan(other), 0).Wait());
  closing.join();
  EXPECT_EQ(op.Wait().code(), absl::StatusCode::kCancelled) << op.Wait();
  EXPECT_EQ(weights[0], other);  // the chunk in flight landed
  // "b" and "c" were never sent: the plain client can still push step 0 for them.
  for (int t = 1; t < 3; ++t) {
    for (auto* client : {worker0->get(), worker1->get()}) {
      client->Push(ids[t], grads[t], 0);
    }
    ASSERT_OK((*worker0)->Pull(ids[t], absl::MakeSpan(weights[t]), 1).Wait());
  }
}

// The pipeline says when a push's gradients are all staged (the device client then lets the job's
// stream go on) long before the push's messages are answered: here they never are.
TEST(StagingPipelineTest, APushIsStagedLongBeforeItIsAnswered) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions options = (*cluster)->ClientOptionsFor(0);
  options.call_timeout = absl::Milliseconds(600);
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto id = (*client)->Declare(Spec("w", 1000));  // 4 partitions, 4 chunks over 2 slots
  ASSERT_TRUE(id.ok()) << id.status();
  std::unique_ptr<internal::CopyEngine> engine = internal::NewHostCopyEngine();
  auto pipeline =
      internal::StagingPipeline::Create(client->get(), engine.get(), 1024, 2, absl::Seconds(10));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  (*cluster)->inproc()->SetFaults({.drop_every_nth_request = 1});
  std::vector<float> gradient(1000, 1.0f);
  const DeviceItem items[] = {{*id, gradient.data(), nullptr, 1000, 0}};
  absl::Notification staged, finished;
  absl::Time staged_at, finished_at;
  absl::Status result;
  auto after = engine->Mark(nullptr);
  ASSERT_OK(after);
  ASSERT_OK((*pipeline)->Start(
      internal::StagedMethod::kPush, items, 0, *after,
      [&](const absl::Status& status) {
        result = status;
        finished_at = absl::Now();
        finished.Notify();
      },
      [&] {
        staged_at = absl::Now();
        staged.Notify();
      }));
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(staged.HasBeenNotified());
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded) << result;
  // Two slots: the last chunks are staged only after the first ones' messages time out, so
  // staging ends a deadline before the push does.
  EXPECT_GE(finished_at - staged_at, absl::Milliseconds(400));
}

TEST(DeviceClientWaitTest, TimeSpentWaitingForTheShardsIsReported) {
  auto cluster = TestCluster::Start("inproc", 1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions with_metrics = (*cluster)->ClientOptionsFor(0);
  with_metrics.metrics_port = 0;
  with_metrics.metrics_host = "127.0.0.1";
  auto worker0 = Client::Create(with_metrics);
  auto worker1 = (*cluster)->NewClient(1);
  ASSERT_TRUE(worker0.ok() && worker1.ok());
  std::unique_ptr<DeviceClient> device = NewDeviceClient(worker0->get(), HostOptions(4));
  ASSERT_NE(device, nullptr);
  std::vector<float> g(100, 1.0f), w(100), other(100);
  auto id = (*worker0)->Declare(Spec("w", 100));
  ASSERT_TRUE(id.ok() && (*worker1)->Declare(Spec("w", 100)).ok());
  const DeviceItem items[] = {{*id, g.data(), w.data(), 100, 0}};
  Operation op = device->PushPull(items, 0, nullptr);
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(200));  // the step's other worker is slow
    EXPECT_OK((*worker1)->PushPull(*id, g, absl::MakeSpan(other), 0).Wait());
  });
  ASSERT_OK(op.Wait());
  late.join();
  const absl::Duration waited = device->TakeStreamWaitTime();
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_LT(waited, absl::Seconds(10));
  // The worker's /metrics page has it too (taking it does not take it from there).
  std::map<std::string, double> page = testing::ScrapeSamples((*worker0)->metrics_address());
  EXPECT_GE(page["hetps_client_ps_wait_seconds_total"], 0.15);
  EXPECT_LT(page["hetps_client_ps_wait_seconds_total"], 10);
  EXPECT_EQ(device->TakeStreamWaitTime(), absl::ZeroDuration());  // taken
  ASSERT_OK(op.Wait());                                           // already done: no wait counted
  EXPECT_EQ(device->TakeStreamWaitTime(), absl::ZeroDuration());
}

TEST(DeviceClientErrorTest, BadCallsGetSpecificErrorsAndTheClientCarriesOn) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_OK(client);
  EXPECT_EQ(DeviceClient::Create(client->get(), HostOptions(1)).status().code(),
            absl::StatusCode::kInvalidArgument);  // one slot cannot overlap anything
  EXPECT_EQ(DeviceClient::Create(nullptr, HostOptions(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::unique_ptr<DeviceClient> device = NewDeviceClient(client->get(), HostOptions(4));
  ASSERT_NE(device, nullptr);
  auto id = (*client)->Declare(Spec("w", 300));
  ASSERT_OK(id);
  std::vector<float> g(300, 1.0f), w(300);
  const DeviceItem unknown[] = {{*id + 1, g.data(), w.data(), 300, 0}};
  EXPECT_EQ(device->PushPull(unknown, 0, nullptr).Wait().code(), absl::StatusCode::kNotFound);
  const DeviceItem wrong_size[] = {{*id, g.data(), w.data(), 299, 0}};
  EXPECT_EQ(device->PushPull(wrong_size, 0, nullptr).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  const DeviceItem no_weights[] = {{*id, g.data(), nullptr, 300, 0}};
  EXPECT_EQ(device->Pull(no_weights, 0, nullptr).Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->PushPull({}, 0, nullptr).Wait().code(), absl::StatusCode::kInvalidArgument);
  const DeviceItem good[] = {{*id, g.data(), w.data(), 300, 0}};
  ASSERT_OK(device->PushPull(good, 0, nullptr).Wait());
  std::vector<float> check(300);
  ASSERT_OK((*client)->Pull(*id, absl::MakeSpan(check), 1).Wait());
  EXPECT_EQ(w, check);
}

TEST(DeviceClientErrorTest, CudaMemoryWithoutADeviceIsAClearError) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_OK(client);
  DeviceClientOptions options = HostOptions(4);
  options.memory = MemoryKind::kCuda;
  auto device = DeviceClient::Create(client->get(), options);
  if (device.ok()) GTEST_SKIP() << "a CUDA device is present: tests/gpu covers it";
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition) << device.status();
  EXPECT_TRUE(absl::StrContains(device.status().message(), "CUDA")) << device.status();
}

TEST(LocalGroupTest, IdFileThatNeverAppearsEndsAtTheDeadline) {
  const testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/never-written.nccl-id";
  const absl::Time start = absl::Now();
  auto id = LocalGroup::IdThroughFile(path, 1, start + absl::Milliseconds(200));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded) << id.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(LocalGroupTest, IdFileCarriesRankZerosIdToTheOthers) {
  // A directory of this test's own: another run beside it must not read or replace its file.
  const testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/group.nccl-id";
  auto written = LocalGroup::IdThroughFile(path, 0, absl::Now() + absl::Seconds(5));
  if (!written.ok()) {
    // Builds without NCCL say so; with NCCL, making an id needs no GPU.
    EXPECT_EQ(written.status().code(), absl::StatusCode::kFailedPrecondition) << written.status();
    GTEST_SKIP() << written.status();
  }
  auto read = LocalGroup::IdThroughFile(path, 1, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *written);
}

TEST(LocalGroupTest, JoiningWithoutAGpuIsAClearError) {
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_OK(client);
  // A local group needs NCCL and a GPU; without them joining one is a clear error. A real id
  // where the build has NCCL, so that on a GPU machine the group forms (and the test skips).
  auto id = LocalGroup::NewId();
  auto group = LocalGroup::Create(id.ok() ? *id : LocalGroupId{}, 0, 1, 0);
  if (group.ok()) GTEST_SKIP() << "a GPU is present: tests/gpu covers local groups";
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition) << group.status();
}

}  // namespace
}  // namespace hetps
