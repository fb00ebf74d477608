// ps-device-bench: does staging hide the copies? In one run, with shards embedded in this process,
// it measures (median of --reps):
//   copy     the PCIe floor: --bytes device-to-host and --bytes host-to-device through pinned
//            memory at once, on the copy engine's two streams
//   network  a push+pull of --bytes from and into pinned host memory (the plain client)
//   device   the same push+pull from and into device memory through hetps::DeviceClient
// and reports device / max(copy, network): 1.0 means the copies hide entirely behind the
// network (or the reverse); the target is at most 1.2. --memory=host runs the same pipeline on
// host memory (memcpy copy queues), for machines without a GPU.
//
//   ps-device-bench --bytes=268435456 --transport=ucx
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/command_line.h"
#include "common/status_macros.h"
#include "server/server.h"
#include "worker/client.h"
#include "worker/device/copy_engine.h"
#include "worker/device_client.h"

ABSL_FLAG(std::string, memory, "cuda", "cuda, or host (the same pipeline without a GPU)");
ABSL_FLAG(int, cuda_device, 0, "The GPU to use");
ABSL_FLAG(uint64_t, bytes, 256 << 20, "Bytes pushed and pulled per round trip");
ABSL_FLAG(int, reps, 5, "Round trips per figure (the median is reported)");
ABSL_FLAG(int, shards, 2, "Shards embedded in this process");
#ifdef HETPS_HAVE_UCX
ABSL_FLAG(std::string, transport, "ucx", "ucx or grpc");
#else
ABSL_FLAG(std::string, transport, "grpc", "grpc (this build has no UCX)");
#endif
ABSL_FLAG(uint64_t, partition_bytes, hetps::ClientOptions().partition_bytes,
          "Partition size in bytes");
ABSL_FLAG(uint64_t, staging_mb, 256, "Pinned staging memory of the device client, MiB");
ABSL_FLAG(double, target, 1.2, "The ratio device / max(copy, network) to meet");

namespace {

using hetps::internal::CopyDirection;
using hetps::internal::CopyEngine;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ps-device-bench: %s\n", status.ToString().c_str());
  return 2;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Both directions at once through the engine's two queues; returns milliseconds.
absl::StatusOr<double> CopyBothWays(CopyEngine& engine, void* device_out, void* pinned_out,
                                    void* pinned_in, void* device_in, size_t bytes) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<hetps::internal::StreamPoint> now, engine.Mark(nullptr));
  absl::Notification to_host, to_device;
  const absl::Time start = absl::Now();
  HETPS_RETURN_IF_ERROR(engine.Copy(CopyDirection::kToHost, *now, pinned_out, device_out, bytes));
  HETPS_RETURN_IF_ERROR(engine.Copy(CopyDirection::kToDevice, *now, device_in, pinned_in, bytes));
  HETPS_RETURN_IF_ERROR(engine.Notify(CopyDirection::kToHost, [&] { to_host.Notify(); }));
  HETPS_RETURN_IF_ERROR(engine.Notify(CopyDirection::kToDevice, [&] { to_device.Notify(); }));
  if (!to_host.WaitForNotificationWithTimeout(absl::Seconds(60)) ||
      !to_device.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError("the copies did not finish in 60 s");
  }
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

int Run() {
  const bool on_gpu = absl::GetFlag(FLAGS_memory) == "cuda";
  if (!on_gpu && absl::GetFlag(FLAGS_memory) != "host") {
    return Fail(absl::InvalidArgumentError("--memory is cuda or host"));
  }
  const size_t bytes = absl::GetFlag(FLAGS_bytes) / 64 * 64;
  const size_t elements = bytes / sizeof(float);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  if (elements == 0) return Fail(absl::InvalidArgumentError("--bytes must be at least 64"));

  std::unique_ptr<CopyEngine> engine;
  if (on_gpu) {
    absl::StatusOr<std::unique_ptr<CopyEngine>> cuda =
        hetps::internal::NewCudaCopyEngine(absl::GetFlag(FLAGS_cuda_device));
    if (!cuda.ok()) return Fail(cuda.status());
    engine = *std::move(cuda);
  } else {
    engine = hetps::internal::NewHostCopyEngine();
  }
  absl::StatusOr<void*> device_gradient = engine->AllocateDevice(bytes);
  absl::StatusOr<void*> device_weights = engine->AllocateDevice(bytes);
  absl::StatusOr<void*> pinned_gradient = engine->AllocatePinned(bytes);
  absl::StatusOr<void*> pinned_weights = engine->AllocatePinned(bytes);
  for (const auto* memory :
       {&device_gradient, &device_weights, &pinned_gradient, &pinned_weights}) {
    if (!memory->ok()) return Fail(memory->status());
  }
  float* host_gradient = static_cast<float*>(*pinned_gradient);
  for (size_t i = 0; i < elements; ++i) host_gradient[i] = static_cast<float>(i % 1000) * 1e-3f;

  // Shards in this process, one worker.
  std::vector<std::unique_ptr<hetps::server::ShardServer>> shards;
  hetps::ClientOptions options;
  const int num_shards = std::max(1, absl::GetFlag(FLAGS_shards));
  for (int i = 0; i < num_shards; ++i) {
    hetps::server::ServerOptions server;
    server.shard_index = static_cast<uint32_t>(i);
    server.num_shards = static_cast<uint32_t>(num_shards);
    server.num_workers = 1;
    server.listen_address = "127.0.0.1:0";
    server.transport = absl::GetFlag(FLAGS_transport);
    server.threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2 / num_shards);
    absl::StatusOr<std::unique_ptr<hetps::server::ShardServer>> shard =
        hetps::server::ShardServer::Start(server);
    if (!shard.ok()) return Fail(shard.status());
    options.servers.push_back((*shard)->address());
    shards.push_back(*std::move(shard));
  }
  options.transport = absl::GetFlag(FLAGS_transport);
  options.partition_bytes = absl::GetFlag(FLAGS_partition_bytes);
  options.max_message_bytes = std::max<size_t>(64 << 20, options.partition_bytes + (1 << 20));
  absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
  if (!client.ok()) return Fail(client.status());
  hetps::DeviceClientOptions device_options;
  device_options.memory = on_gpu ? hetps::MemoryKind::kCuda : hetps::MemoryKind::kHost;
  device_options.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  device_options.staging_bytes = absl::GetFlag(FLAGS_staging_mb) << 20;
  absl::StatusOr<std::unique_ptr<hetps::DeviceClient>> device =
      hetps::DeviceClient::Create(client->get(), device_options);
  if (!device.ok()) return Fail(device.status());

  hetps::TensorSpec spec;
  spec.name = "bench.tensor";
  spec.num_elements = elements;
  spec.optimizer = {"sum", {}};
  absl::StatusOr<hetps::TensorId> id = (*client)->Declare(spec);
  if (!id.ok()) return Fail(id.status());
  // The device gradient gets the same values, through the copy queue.
  {
    absl::StatusOr<double> filled = CopyBothWays(*engine, *device_weights, *pinned_weights,
                                                 host_gradient, *device_gradient, bytes);
    if (!filled.ok()) return Fail(filled.status());
  }

  std::vector<double> copy_ms, network_ms, device_ms;
  uint64_t step = 0;
  const hetps::DeviceItem items[] = {{*id, static_cast<float*>(*device_gradient),
                                      static_cast<float*>(*device_weights), elements, 0}};
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
    absl::StatusOr<double> copy = CopyBothWays(*engine, *device_gradient, *pinned_weights,
                                               host_gradient, *device_weights, bytes);
    if (!copy.ok()) return Fail(copy.status());

    absl::Time start = absl::Now();
    absl::Status pushed =
        (*client)
            ->PushPull(*id, absl::MakeConstSpan(host_gradient, elements),
                       absl::MakeSpan(static_cast<float*>(*pinned_weights), elements), step++)
            .Wait();
    if (!pushed.ok()) return Fail(pushed);
    const double network = absl::ToDoubleMilliseconds(absl::Now() - start);

    start = absl::Now();
    absl::Status staged = (*device)->PushPull(items, step++, nullptr).Wait();
    if (!staged.ok()) return Fail(staged);
    const double staged_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (rep == 0) continue;
    copy_ms.push_back(*copy);
    network_ms.push_back(network);
    device_ms.push_back(staged_ms);
  }
  const double copy = Median(copy_ms), network = Median(network_ms), staged = Median(device_ms);
  const double ratio = staged / std::max(copy, network);
  const double mib = static_cast<double>(bytes) / (1 << 20);
  std::printf(
      "ps-device-bench: %s memory, %.0f MiB push+pull, %s, %d shards, partitions of %llu "
      "bytes, median of %d\n",
      on_gpu ? "CUDA" : "host", mib, options.transport.c_str(), num_shards,
      static_cast<unsigned long long>(options.partition_bytes), reps);
  std::printf("%-8s %10s %10s\n", "figure", "ms", "GiB/s");
  std::printf("%-8s %10.2f %10.2f\n", "copy", copy, 2 * mib / 1024 / (copy / 1e3));
  std::printf("%-8s %10.2f %10.2f\n", "network", network, 2 * mib / 1024 / (network / 1e3));
  std::printf("%-8s %10.2f %10.2f\n", "device", staged, 2 * mib / 1024 / (staged / 1e3));
  std::printf("ratio device/max(copy,network) %.3f (target <= %.2f): %s\n", ratio,
              absl::GetFlag(FLAGS_target), ratio <= absl::GetFlag(FLAGS_target) ? "met" : "missed");
  device->reset();
  (*client)->Shutdown();
  for (auto& shard : shards) shard->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hetps::ParseCommandLine(argc, argv, __FILE__,
                          "Measures whether the device client's staging hides the PCIe copies.");
  return Run();
}
