// CopyEngine: what the staging pipeline needs from a device. Two ordered copy queues (device to
// host, host to device), pinned host memory, and the points where the job's stream and the
// copies meet. Implemented with CUDA (cuda_copy_engine.cc) and on host memory
// (host_copy_engine.cc), so the pipeline's logic runs and is tested without a GPU.
#ifndef HETPS_WORKER_DEVICE_COPY_ENGINE_H_
#define HETPS_WORKER_DEVICE_COPY_ENGINE_H_

#include <cstddef>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/device_client.h"

namespace hetps::internal {

// A point in the job's stream: copies queued "after" it start once the job's work queued before
// it is done. Released when no copy needs it any more.
class StreamPoint {
 public:
  virtual ~StreamPoint() = default;
};

// Where the job's stream waits for the parameter server: from the point where it began (held
// there until Release() when it was made to hold) to the point where it ended. Release() may be
// called from any thread; calls after the first do nothing.
class StreamWait {
 public:
  virtual ~StreamWait() = default;
  virtual void Release() = 0;
};

enum class CopyDirection { kToHost, kToDevice };

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;

  // Page-locked host memory, and memory of the engine's device (benchmarks, tests); both are
  // freed with the engine.
  virtual absl::StatusOr<void*> AllocatePinned(size_t bytes) = 0;
  virtual absl::StatusOr<void*> AllocateDevice(size_t bytes) = 0;

  // Marks where `stream` is now. Never null on success.
  virtual absl::StatusOr<std::shared_ptr<StreamPoint>> Mark(GpuStream stream) = 0;
  // Queues a copy on the queue of `direction`, to start after `after`.
  virtual absl::Status Copy(CopyDirection direction, const StreamPoint& after, void* destination,
                            const void* source, size_t bytes) = 0;
  // Runs `done` once every copy queued so far in `direction` has completed, on an engine thread;
  // `done` must not block.
  virtual absl::Status Notify(CopyDirection direction, absl::AnyInvocable<void()> done) = 0;
  // Begins a wait on `stream`: with `hold`, the work queued on `stream` from now on waits for
  // Release(). EndStreamWait marks where the wait ends (after a broadcast that waits by itself,
  // say); the time between the two is what TakeStreamWaitTime adds up.
  virtual absl::StatusOr<std::unique_ptr<StreamWait>> BeginStreamWait(GpuStream stream,
                                                                      bool hold) = 0;
  virtual absl::Status EndStreamWait(StreamWait& wait, GpuStream stream) = 0;
  // Runs `done` (on an engine thread; it must not block) once `stream` reaches this point.
  virtual absl::Status NotifyOnStream(GpuStream stream, absl::AnyInvocable<void()> done) = 0;
  // The time streams spent in waits they have passed, since the last call.
  virtual absl::Duration TakeStreamWaitTime() = 0;
};

// Host memory; copies are memcpy on one thread per direction.
std::unique_ptr<CopyEngine> NewHostCopyEngine();

// CUDA: FailedPrecondition when built without CUDA or when no device can be used.
absl::StatusOr<std::unique_ptr<CopyEngine>> NewCudaCopyEngine(int device);

}  // namespace hetps::internal

#endif  // HETPS_WORKER_DEVICE_COPY_ENGINE_H_
