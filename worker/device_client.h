// The device path of the worker client: gradients that start in GPU memory and weights that must
// end there, moved through pinned host staging so the GPU never waits for whole tensors.
//
//   hetps::DeviceClientOptions options;                      // MemoryKind::kCuda by default
//   auto device = hetps::DeviceClient::Create(client.get(), options);
//   for (uint64_t step = 0; step < steps; ++step) {
//     Backward(stream);                                       // writes the gradients
//     hetps::DeviceItem items[] = {{w1, grad_w1, w1_dev, n1, /*priority=*/1}, ...};
//     (*device)->PushPull(items, step, stream);               // returns at once
//     Forward(stream);                                        // waits, on the GPU, for new weights
//     log("waited on the PS", (*device)->TakeStreamWaitTime());
//   }
//
// A push copies each partition to a pinned staging slot on a copy stream and sends it as soon as
// that copy is done, while the next one copies; a pull copies each partition back as soon as it
// arrives, while the next one is on the wire. The copies start after the work queued on `stream`
// before the call, and work queued on `stream` after the call waits (on the GPU, without blocking
// the host) until the weights are in place (after a Push: until its gradients are staged, so the
// job may overwrite them while they travel): an event recorded on `stream` right after the call
// completes then, for other streams or threads to wait on. Partitions of tensors with a higher
// priority go first, across calls too. A push holds `stream` until every partition has been
// copied out, and staging has room for staging_bytes at a time: a larger push waits there for
// the first partitions' answers.
//
// A held stream holds up what the device orders after it: a null `stream` is CUDA's legacy
// default stream, so while it waits so do cudaMemcpy, cudaMemset and legacy-stream work from
// every thread of the process; calls that synchronise the device (cudaFree, pinned allocations,
// cudaDeviceSynchronize) wait for every held stream. Workers that share a GPU inside one process
// each need a stream of their own (cudaStreamNonBlocking), or one waits behind the other's step.
//
// With a LocalGroup (worker/local_group.h) several GPUs of one machine act as one worker: their
// gradients are summed into the root's with NCCL, only the root talks to the shards, and the new
// weights are broadcast to the others.
//
// With MemoryKind::kHost the same pipeline runs on host memory (builds without CUDA; tests), and
// the stream is ignored: callers wait with Operation::Wait().
//
// Thread safety: a DeviceClient may be used from several threads at once.
#ifndef HETPS_WORKER_DEVICE_CLIENT_H_
#define HETPS_WORKER_DEVICE_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/client.h"

// CUDA's stream type (cudaStream_t is CUstream_st*), declared so this header needs no CUDA.
struct CUstream_st;

namespace hetps {

using GpuStream = CUstream_st*;

class LocalGroup;

enum class MemoryKind {
  kCuda,  // CUDA device memory (a build with CUDA and a GPU)
  kHost,  // host memory: the same pipeline without a GPU
};

struct DeviceClientOptions {
  MemoryKind memory = MemoryKind::kCuda;
  // The device that holds the tensors; -1: the creating thread's current device.
  int cuda_device = -1;
  // Pinned host memory for staging, allocated once and cut into slots of the client's
  // partition_bytes. At least two slots; more let more partitions be in flight at once.
  size_t staging_bytes = 256 << 20;
  // Several local GPUs acting as one worker (NCCL); null for one GPU.
  std::shared_ptr<LocalGroup> local_group;
};

// One tensor of a device push or pull: fp32 values in the memory of DeviceClientOptions::memory.
struct DeviceItem {
  TensorId tensor = 0;
  // Push: the tensor's gradients. With a local group of several GPUs the root's gradients are
  // replaced by the local sum (reduced in place).
  float* gradient = nullptr;
  // Pull: receives the tensor's weights.
  float* weights = nullptr;
  uint64_t num_elements = 0;
  // Higher first: give the tensors the next forward pass needs first the highest priority.
  int priority = 0;
};

class DeviceClient {
 public:
  // `client` talks to the shards and must outlive the DeviceClient; it is null on the non-root
  // ranks of a local group (they never talk to the shards). InvalidArgument for bad options,
  // FailedPrecondition without a usable device (or a build without CUDA), ResourceExhausted
  // when the staging memory cannot be pinned.
  static absl::StatusOr<std::unique_ptr<DeviceClient>> Create(Client* client,
                                                              const DeviceClientOptions& options);
  virtual ~DeviceClient() = default;

  // As Client::PushPull, from and into device memory, ordered on `stream` (see above). Every
  // rank of a local group calls it with the same tensors in the same order.
  virtual Operation PushPull(absl::Span<const DeviceItem> items, uint64_t step, GpuStream stream,
                             DoneCallback done = nullptr) = 0;
  virtual Operation Push(absl::Span<const DeviceItem> items, uint64_t step, GpuStream stream,
                         DoneCallback done = nullptr) = 0;
  virtual Operation Pull(absl::Span<const DeviceItem> items, uint64_t min_version, GpuStream stream,
                         DoneCallback done = nullptr) = 0;

  // How long the job waited for this client since the last call: CUDA, the time streams sat at
  // the point where they wait for new weights (measured on the GPU, for the waits the streams
  // have passed); host memory, the time threads spent in Operation::Wait() of its operations.
  // A figure near the step time says the parameter server is what the GPU waits for.
  virtual absl::Duration TakeStreamWaitTime() = 0;
};

}  // namespace hetps

#endif  // HETPS_WORKER_DEVICE_CLIENT_H_
