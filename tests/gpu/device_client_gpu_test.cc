// The device client on a real GPU: staged push/pull from and into device memory, the job's
// stream held on the GPU until the weights are in place, the waited-on-PS figure, and NCCL local
// groups over every GPU of the machine. Each test skips, saying why, when no GPU can be used;
// tests/gpu/run.sh runs them on a GPU machine.
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/test_cluster.h"
#include "tests/testing/transports.h"
#include "worker/device_client.h"
#include "worker/local_group.h"

namespace hetps {
namespace {

using testing::TestCluster;

int UsableGpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    if (UsableGpus() == 0) GTEST_SKIP() << "no CUDA device can be used on this machine"; \
  } while (0)

// Builds without NCCL have no local groups: NewId says so.
#define SKIP_WITHOUT_NCCL()                                     \
  do {                                                          \
    if (absl::Status made = LocalGroup::NewId().status();       \
        made.code() == absl::StatusCode::kFailedPrecondition) { \
      GTEST_SKIP() << made;                                     \
    }                                                           \
  } while (0)

// Device memory that frees itself.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t elements) : elements_(elements) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, elements) * sizeof(float)), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  float* data() { return data_; }
  // On `stream` (the legacy default stream when null: it waits behind every stream the device
  // client holds, other threads' included).
  void Upload(const std::vector<float>& values, cudaStream_t stream = nullptr) {
    ASSERT_EQ(cudaMemcpyAsync(data_, values.data(), elements_ * sizeof(float),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  std::vector<float> Download(cudaStream_t stream = nullptr) {
    std::vector<float> values(elements_);
    EXPECT_EQ(cudaMemcpyAsync(values.data(), data_, elements_ * sizeof(float),
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return values;
  }

 private:
  size_t elements_;
  float* data_ = nullptr;
};

TensorSpec Spec(const std::string& name, uint64_t n, const std::string& rule = "sgd") {
  TensorSpec spec;
  spec.name = name;
  spec.num_elements = n;
  spec.optimizer = {rule, rule == "sum"
                              ? std::map<std::string, double>{}
                              : std::map<std::string, double>{{"lr", 0.1}, {"momentum", 0.9}}};
  if (rule != "sum") spec.init = Initializer::Uniform(-1, 1, 3);
  return spec;
}

DeviceClientOptions CudaOptions() {
  DeviceClientOptions options;
  options.memory = MemoryKind::kCuda;
  options.cuda_device = 0;
  options.staging_bytes = 8 * 1024;  // 8 slots of the test clusters' 1 KiB partitions
  return options;
}

class GpuDeviceClientTest : public ::testing::TestWithParam<std::string> {};

// Odd sizes from device memory: the weights equal, bit for bit, the host client's on twin
// tensors after the same steps (the shards are the reference: same rule, same sums).
TEST_P(GpuDeviceClientTest, OddSizedRoundTripsMatchTheHostClientExactly) {
  SKIP_WITHOUT_GPU();
  auto cluster = TestCluster::Start(GetParam(), 2, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_TRUE(client.ok()) << client.status();
  auto device = DeviceClient::Create(client->get(), CudaOptions());
  ASSERT_TRUE(device.ok()) << device.status();
  const std::vector<uint64_t> sizes = {1, 3, 255, 257, 1000, 4099, 12345};
  std::vector<TensorId> staged, direct;
  std::vector<std::unique_ptr<DeviceBuffer>> gradients, weights;
  std::vector<std::vector<float>> host_gradients, host_weights;
  for (size_t t = 0; t < sizes.size(); ++t) {
    auto a = (*client)->Declare(Spec(absl::StrCat("staged", t), sizes[t]));
    auto b = (*client)->Declare(Spec(absl::StrCat("direct", t), sizes[t]));
    ASSERT_TRUE(a.ok() && b.ok());
    staged.push_back(*a);
    direct.push_back(*b);
    gradients.push_back(std::make_unique<DeviceBuffer>(sizes[t]));
    weights.push_back(std::make_unique<DeviceBuffer>(sizes[t]));
    host_gradients.emplace_back(sizes[t]);
    host_weights.emplace_back(sizes[t]);
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int step = 0; step < 3; ++step) {
    std::vector<DeviceItem> items;
    std::vector<PushItem> pushes;
    std::vector<PullItem> pulls;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        host_gradients[t][i] = static_cast<float>(std::cos(0.1 * i + step + t));
      }
      gradients[t]->Upload(host_gradients[t]);
      items.push_back(
          {staged[t], gradients[t]->data(), weights[t]->data(), sizes[t], static_cast<int>(t)});
      pushes.push_back({direct[t], host_gradients[t], {}});
      pulls.push_back({direct[t], absl::MakeSpan(host_weights[t]), {}});
    }
    ASSERT_OK((*device)->PushPull(items, step, reinterpret_cast<GpuStream>(stream)).Wait());
    ASSERT_OK((*client)->PushPull(pushes, pulls, step).Wait());
    for (size_t t = 0; t < sizes.size(); ++t) {
      ASSERT_EQ(weights[t]->Download(), host_weights[t]) << "tensor " << t << " step " << step;
    }
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Transports, GpuDeviceClientTest,
                         ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

// The host never waits: work queued on the stream after the push-pull sees the new weights, and
// the time the stream sat waiting for a slow second worker is reported.
TEST(GpuStreamTest, TheStreamWaitsOnTheGpuAndTheWaitIsMeasured) {
  SKIP_WITHOUT_GPU();
  auto cluster = TestCluster::Start("grpc", 1, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto worker0 = (*cluster)->NewClient(0);
  auto worker1 = (*cluster)->NewClient(1);
  ASSERT_TRUE(worker0.ok() && worker1.ok());
  const uint64_t n = 5000;
  auto id = (*worker0)->Declare(Spec("w", n, "sum"));
  ASSERT_TRUE(id.ok() && (*worker1)->Declare(Spec("w", n, "sum")).ok());
  auto device = DeviceClient::Create(worker0->get(), CudaOptions());
  ASSERT_TRUE(device.ok()) << device.status();
  DeviceBuffer gradient(n), weights(n);
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f), seen(n, 0.0f), other(n);
  gradient.Upload(ones);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(float)), cudaSuccess);
  const DeviceItem items[] = {{*id, gradient.data(), weights.data(), n, 0}};
  Operation op = (*device)->PushPull(items, 0, reinterpret_cast<GpuStream>(stream));
  ASSERT_EQ(
      cudaMemcpyAsync(pinned, weights.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream),
      cudaSuccess);
  absl::SleepFor(absl::Milliseconds(300));                // the other worker is late
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);  // held on the GPU
  ASSERT_OK((*worker1)->PushPull(*id, twos, absl::MakeSpan(other), 0).Wait());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pinned[i], 3.0f) << i;  // the sum of both workers
  ASSERT_OK(op.Wait());
  const absl::Duration waited = (*device)->TakeStreamWaitTime();
  EXPECT_GE(waited, absl::Milliseconds(250));
  EXPECT_LT(waited, absl::Seconds(20));
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

// A push holds the stream only until its gradients are staged: the job may go on (and overwrite
// them) while the push's messages are still unanswered (here: never answered). The tensor's 8
// partitions each get one of the 8 staging slots at once; with more, the rest would be staged
// only once the first ones' slots free, at their messages' deadline.
TEST(GpuStreamTest, APushLetsTheStreamGoOnOnceItsGradientsAreStaged) {
  SKIP_WITHOUT_GPU();
  auto cluster = TestCluster::Start("inproc", 1, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions client_options = (*cluster)->ClientOptionsFor(0);
  client_options.call_timeout = absl::Seconds(3);
  auto client = Client::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  const uint64_t n = 2000;  // 8 partitions of 256 elements (1 KiB) at most
  auto id = (*client)->Declare(Spec("w", n));
  ASSERT_OK(id);
  auto partitions = (*client)->Partitions(*id);
  ASSERT_OK(partitions);
  ASSERT_LE(partitions->size() * client_options.partition_bytes, CudaOptions().staging_bytes);
  auto device = DeviceClient::Create(client->get(), CudaOptions());
  ASSERT_TRUE(device.ok()) << device.status();
  DeviceBuffer gradient(n);
  gradient.Upload(std::vector<float>(n, 1.0f));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  (*cluster)->inproc()->SetFaults({.drop_every_nth_request = 1});
  const DeviceItem items[] = {{*id, gradient.data(), nullptr, n, 0}};
  const absl::Time start = absl::Now();
  Operation op = (*device)->Push(items, 0, reinterpret_cast<GpuStream>(stream));
  ASSERT_EQ(cudaMemsetAsync(gradient.data(), 0, n * sizeof(float), stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // well before the push's deadline
  EXPECT_FALSE(op.done());
  EXPECT_EQ(op.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  cudaStreamDestroy(stream);
}

// BSP training where each step's gradient depends on the weights: from device memory it follows
// the host-memory run exactly.
TEST(GpuTrainingTest, BspTrainingFromDeviceMemoryEqualsTheHostMemoryRun) {
  SKIP_WITHOUT_GPU();
  const uint64_t n = 3000;
  const int steps = 8;
  auto train = [&](bool on_device) -> std::vector<std::vector<float>> {
    auto cluster = TestCluster::Start("grpc", 2, 2);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    if (!cluster.ok()) return {};
    std::vector<std::vector<float>> results(2);
    std::vector<std::thread> workers;
    absl::Barrier ready(2);
    for (uint32_t rank = 0; rank < 2; ++rank) {
      workers.emplace_back([&, rank] {
        // Each worker has its own stream, and both allocate before either holds one: a held
        // stream holds up the legacy default stream and what synchronises the device
        // (cudaFree, pinned allocations), in every thread.
        std::unique_ptr<Client> client;
        std::unique_ptr<DeviceClient> device;
        std::unique_ptr<DeviceBuffer> gradient, weights;
        cudaStream_t stream = nullptr;
        TensorId id = 0;
        std::vector<float> w(n), g(n);
        bool set_up = false;
        [&] {
          ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
          auto created_client = (*cluster)->NewClient(rank);
          ASSERT_TRUE(created_client.ok()) << created_client.status();
          client = *std::move(created_client);
          auto declared = client->Declare(Spec("model", n));
          ASSERT_TRUE(declared.ok()) << declared.status();
          id = *declared;
          ASSERT_OK(client->Pull(id, absl::MakeSpan(w), 0).Wait());
          gradient = std::make_unique<DeviceBuffer>(n);
          weights = std::make_unique<DeviceBuffer>(n);
          ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
          if (on_device) {
            auto created = DeviceClient::Create(client.get(), CudaOptions());
            ASSERT_TRUE(created.ok()) << created.status();
            device = *std::move(created);
          }
          set_up = true;
        }();
        ready.Block();
        if (!set_up) return;
        for (int step = 0; step < steps; ++step) {
          // Pull each element towards a target that differs per worker.
          for (size_t i = 0; i < n; ++i) g[i] = w[i] - static_cast<float>((i + rank) % 7);
          if (on_device) {
            gradient->Upload(g, stream);
            const DeviceItem items[] = {{id, gradient->data(), weights->data(), n, 0}};
            ASSERT_OK(device->PushPull(items, step, reinterpret_cast<GpuStream>(stream)).Wait());
            w = weights->Download(stream);
          } else {
            ASSERT_OK(client->PushPull(id, g, absl::MakeSpan(w), step).Wait());
          }
        }
        results[rank] = w;
        device.reset();
        cudaStreamDestroy(stream);
      });
    }
    for (auto& worker : workers) worker.join();
    return results;
  };
  const auto device = train(true);
  const auto host = train(false);
  ASSERT_EQ(device.size(), 2u);
  ASSERT_EQ(host.size(), 2u);
  EXPECT_EQ(device[0], host[0]);
  EXPECT_EQ(device[1], host[1]);
  EXPECT_EQ(device[0], device[1]);
}

// Every GPU of the machine in one local group (one thread each; one GPU is a group of one, and
// still goes through NCCL): the root pushes the local sum, every GPU gets the new weights.
TEST(GpuLocalGroupTest, EveryLocalGpuGetsTheWeightsOfTheLocalSum) {
  SKIP_WITHOUT_GPU();
  const int gpus = UsableGpus();
  auto cluster = TestCluster::Start("grpc", 2, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient(0);
  ASSERT_OK(client);
  const uint64_t n = 2500;
  TensorSpec spec = Spec("shared", n, "sgd");
  spec.optimizer = {"sgd", {{"lr", 0.5}}};
  spec.init = Initializer::Zeros();
  auto id = (*client)->Declare(spec);
  ASSERT_OK(id);
  SKIP_WITHOUT_NCCL();
  auto group_id = LocalGroup::NewId();
  ASSERT_TRUE(group_id.ok()) << group_id.status();
  std::vector<std::vector<float>> results(gpus);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < gpus; ++rank) {
    ranks.emplace_back([&, rank] {
      ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
      auto group = LocalGroup::Create(*group_id, rank, gpus, rank);
      ASSERT_TRUE(group.ok()) << group.status();
      DeviceClientOptions options = CudaOptions();
      options.cuda_device = rank;
      options.local_group = *group;
      auto device = DeviceClient::Create(rank == 0 ? client->get() : nullptr, options);
      ASSERT_TRUE(device.ok()) << device.status();
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((rank + 1) * (i % 5));
      DeviceBuffer gradient(n), weights(n);
      gradient.Upload(g);
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
      const DeviceItem items[] = {{*id, gradient.data(), weights.data(), n, 0}};
      Operation op = (*device)->PushPull(items, 0, reinterpret_cast<GpuStream>(stream));
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_OK(op.Wait());
      results[rank] = weights.Download();
      cudaStreamDestroy(stream);
    });
  }
  for (auto& rank : ranks) rank.join();
  const float ranks_sum = static_cast<float>(gpus * (gpus + 1) / 2);
  for (int rank = 0; rank < gpus; ++rank) {
    ASSERT_EQ(results[rank].size(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(results[rank][i], -0.5f * ranks_sum * static_cast<float>(i % 5))
          << "rank " << rank << " element " << i;
    }
  }
}

// An id that LocalGroup::NewId() did not make is refused with a message that says where ids come
// from (NCCL itself answers "internal error").
TEST(GpuLocalGroupTest, AnIdNeverMadeIsAClearError) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_NCCL();
  auto group = LocalGroup::Create(LocalGroupId{}, 0, 1, 0, absl::Seconds(10));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << group.status();
  EXPECT_NE(group.status().message().find("NewId"), std::string::npos) << group.status();
}

}  // namespace
}  // namespace hetps
