// The copy engine on host memory: each direction is a TaskThread that runs memcpy in order, so
// copies overlap the network as they would on a GPU's copy engines.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/aligned_buffer.h"
#include "common/status_macros.h"
#include "common/task_thread.h"
#include "worker/device/copy_engine.h"

namespace hetps::internal {
namespace {

class HostPoint final : public StreamPoint {};

class HostWait final : public StreamWait {
 public:
  void Release() override {}
};

class HostCopyEngine final : public CopyEngine {
 public:
  ~HostCopyEngine() override {
    // Copies still queued run before the memory goes away.
    to_host_.Stop();
    to_device_.Stop();
  }

  absl::StatusOr<void*> AllocatePinned(size_t bytes) override {
    HETPS_ASSIGN_OR_RETURN(AlignedBuffer buffer,
                           AlignedBuffer::Allocate((bytes + sizeof(float) - 1) / sizeof(float)));
    absl::MutexLock lock(&mu_);
    buffers_.push_back(std::move(buffer));
    return buffers_.back().data();
  }
  absl::StatusOr<void*> AllocateDevice(size_t bytes) override { return AllocatePinned(bytes); }
  absl::StatusOr<std::shared_ptr<StreamPoint>> Mark(GpuStream) override {
    return std::make_shared<HostPoint>();
  }
  absl::Status Copy(CopyDirection direction, const StreamPoint&, void* destination,
                    const void* source, size_t bytes) override {
    return Queue(direction, [=] { std::memcpy(destination, source, bytes); });
  }
  absl::Status Notify(CopyDirection direction, absl::AnyInvocable<void()> done) override {
    return Queue(direction, std::move(done));
  }
  // Host memory has no stream: callers wait in Operation::Wait(), which the client measures.
  absl::StatusOr<std::unique_ptr<StreamWait>> BeginStreamWait(GpuStream, bool) override {
    return std::make_unique<HostWait>();
  }
  absl::Status EndStreamWait(StreamWait&, GpuStream) override { return absl::OkStatus(); }
  absl::Status NotifyOnStream(GpuStream, absl::AnyInvocable<void()> done) override {
    done();
    return absl::OkStatus();
  }
  absl::Duration TakeStreamWaitTime() override { return absl::ZeroDuration(); }

 private:
  absl::Status Queue(CopyDirection direction, absl::AnyInvocable<void()> task) {
    TaskThread& thread = direction == CopyDirection::kToHost ? to_host_ : to_device_;
    if (!thread.Post(std::move(task))) return absl::CancelledError("the copy engine is stopped");
    return absl::OkStatus();
  }

  absl::Mutex mu_;
  std::vector<AlignedBuffer> buffers_ ABSL_GUARDED_BY(mu_);
  TaskThread to_host_{"copy-to-host"};
  TaskThread to_device_{"copy-to-device"};
};

}  // namespace

std::unique_ptr<CopyEngine> NewHostCopyEngine() { return std::make_unique<HostCopyEngine>(); }

}  // namespace hetps::internal
