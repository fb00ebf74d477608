// The copy engine on a CUDA device: one non-blocking stream per direction (PCIe is full duplex,
// so staging out and back overlap), completions through host functions that only post onward,
// and the job's stream held with a stream memory operation (cuStreamWaitValue32 on a word of
// mapped pinned memory) so it waits on the GPU, never blocking a host thread.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/device/copy_engine.h"
#include "worker/device/scoped_device.h"

namespace hetps::internal {
namespace {

// Stream waits in flight at once (each holds one word of mapped memory until its stream passes).
constexpr uint32_t kWaitSlots = 4096;

#define HETPS_CUDA_RETURN_IF_ERROR(call) HETPS_RETURN_IF_ERROR(CudaStatus((call), #call))

void CUDART_CB RunHostTask(void* task) {
  std::unique_ptr<absl::AnyInvocable<void()>> owned(static_cast<absl::AnyInvocable<void()>*>(task));
  (*owned)();
}

absl::Status LaunchHostTask(cudaStream_t stream, absl::AnyInvocable<void()> done) {
  auto* task = new absl::AnyInvocable<void()>(std::move(done));
  cudaError_t error = cudaLaunchHostFunc(stream, RunHostTask, task);
  if (error != cudaSuccess) delete task;
  return CudaStatus(error, "cudaLaunchHostFunc");
}

class CudaPoint final : public StreamPoint {
 public:
  explicit CudaPoint(cudaEvent_t event) : event(event) {}
  ~CudaPoint() override { cudaEventDestroy(event); }
  const cudaEvent_t event;
};

class CudaWait final : public StreamWait {
 public:
  CudaWait(volatile uint32_t* word, uint32_t value, cudaEvent_t begin)
      : word_(word), value_(value), begin(begin) {}
  void Release() override {
    // Only once: once the stream passed, the word may already serve a later wait.
    if (word_ != nullptr && !released_.exchange(true)) {
      __atomic_store_n(word_, value_, __ATOMIC_RELEASE);
    }
  }

 private:
  volatile uint32_t* const word_;  // null when the stream is not held
  const uint32_t value_;
  std::atomic<bool> released_{false};

 public:
  const cudaEvent_t begin;
  int slot = -1;
};

class CudaCopyEngine final : public CopyEngine {
 public:
  ~CudaCopyEngine() override {
    ScopedDevice scoped(device_);
    for (cudaStream_t stream : {to_host_, to_device_}) {
      if (stream != nullptr) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
      }
    }
    absl::MutexLock lock(&mu_);
    for (const Passed& passed : passed_) {
      // The waits are released; a stream that has not yet read its word must before it is freed.
      cudaEventSynchronize(passed.end != nullptr ? passed.end : passed.begin);
      cudaEventDestroy(passed.begin);
      if (passed.end != nullptr) cudaEventDestroy(passed.end);
    }
    for (const auto& [memory, pinned] : allocations_)
      pinned ? cudaFreeHost(memory) : cudaFree(memory);
    if (words_ != nullptr) cudaFreeHost(const_cast<uint32_t*>(words_));
  }

  absl::Status Init(int device) {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("no CUDA device can be used (%s)",
                          error != cudaSuccess ? cudaGetErrorString(error) : "none found"));
    }
    if (device < 0) HETPS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    if (device >= count) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CUDA device %d does not exist (%d found)", device, count));
    }
    device_ = device;
    ScopedDevice scoped(device_);
    HETPS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking));
    HETPS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking));
    cudaDriverEntryPointQueryResult found;
    void* function = nullptr;
    error = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &function, 12000,
                                             cudaEnableDefault, &found);
    if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || function == nullptr) {
      return absl::FailedPreconditionError(
          "the CUDA driver does not offer cuStreamWaitValue32 (stream memory operations)");
    }
    wait_value_ = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(function);
    void* words = nullptr;
    HETPS_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&words, kWaitSlots * sizeof(uint32_t),
                                             cudaHostAllocMapped | cudaHostAllocPortable));
    words_ = static_cast<volatile uint32_t*>(words);
    for (uint32_t i = 0; i < kWaitSlots; ++i) words_[i] = 0;
    void* device_words = nullptr;
    HETPS_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device_words, words, 0));
    device_words_ = reinterpret_cast<CUdeviceptr>(device_words);
    values_.assign(kWaitSlots, 0);
    for (uint32_t i = kWaitSlots; i-- > 0;) free_slots_.push_back(static_cast<int>(i));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> AllocatePinned(size_t bytes) override {
    return Allocate(bytes, /*pinned=*/true);
  }
  absl::StatusOr<void*> AllocateDevice(size_t bytes) override {
    return Allocate(bytes, /*pinned=*/false);
  }

  absl::StatusOr<std::shared_ptr<StreamPoint>> Mark(GpuStream stream) override {
    ScopedDevice scoped(device_);
    cudaEvent_t event;
    HETPS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    auto point = std::make_shared<CudaPoint>(event);
    HETPS_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, AsCudaStream(stream)));
    return point;
  }

  absl::Status Copy(CopyDirection direction, const StreamPoint& after, void* destination,
                    const void* source, size_t bytes) override {
    ScopedDevice scoped(device_);
    cudaStream_t stream = StreamOf(direction);
    HETPS_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(stream, static_cast<const CudaPoint&>(after).event, 0));
    return CudaStatus(cudaMemcpyAsync(destination, source, bytes,
                                      direction == CopyDirection::kToHost ? cudaMemcpyDeviceToHost
                                                                          : cudaMemcpyHostToDevice,
                                      stream),
                      "cudaMemcpyAsync");
  }

  absl::Status Notify(CopyDirection direction, absl::AnyInvocable<void()> done) override {
    ScopedDevice scoped(device_);
    return LaunchHostTask(StreamOf(direction), std::move(done));
  }

  absl::Status NotifyOnStream(GpuStream stream, absl::AnyInvocable<void()> done) override {
    ScopedDevice scoped(device_);
    return LaunchHostTask(AsCudaStream(stream), std::move(done));
  }

  absl::StatusOr<std::unique_ptr<StreamWait>> BeginStreamWait(GpuStream stream,
                                                              bool hold) override {
    ScopedDevice scoped(device_);
    cudaEvent_t begin;
    HETPS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&begin));
    int slot = -1;
    uint32_t value = 0;
    if (hold) {
      absl::MutexLock lock(&mu_);
      ReclaimPassed();
      if (free_slots_.empty()) {
        cudaEventDestroy(begin);
        return absl::ResourceExhaustedError(absl::StrFormat(
            "%d stream waits are pending; the job's streams have not passed them", kWaitSlots));
      }
      slot = free_slots_.back();
      free_slots_.pop_back();
      value = ++values_[slot];
    }
    auto wait = std::make_unique<CudaWait>(hold ? words_ + slot : nullptr, value, begin);
    wait->slot = slot;
    absl::Status status =
        CudaStatus(cudaEventRecord(begin, AsCudaStream(stream)), "cudaEventRecord");
    if (status.ok() && hold) {
      const CUresult result =
          wait_value_(AsCudaStream(stream), device_words_ + slot * sizeof(uint32_t), value,
                      CU_STREAM_WAIT_VALUE_GEQ);
      if (result != CUDA_SUCCESS) {
        status = absl::InternalError(
            absl::StrFormat("cuStreamWaitValue32 failed (CUresult %d)", static_cast<int>(result)));
      }
    }
    if (!status.ok()) {
      wait->Release();
      Retire(begin, nullptr, slot);
      return status;
    }
    return wait;
  }

  absl::Status EndStreamWait(StreamWait& wait, GpuStream stream) override {
    ScopedDevice scoped(device_);
    auto& cuda_wait = static_cast<CudaWait&>(wait);
    cudaEvent_t end;
    HETPS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end));
    absl::Status status = CudaStatus(cudaEventRecord(end, AsCudaStream(stream)), "cudaEventRecord");
    Retire(cuda_wait.begin, status.ok() ? end : nullptr, cuda_wait.slot);
    if (!status.ok()) cudaEventDestroy(end);
    return status;
  }

  absl::Duration TakeStreamWaitTime() override {
    absl::MutexLock lock(&mu_);
    ReclaimPassed();
    return std::exchange(waited_, absl::ZeroDuration());
  }

 private:
  // A wait whose stream may not have passed it yet; `end` null when it was never ended.
  struct Passed {
    cudaEvent_t begin;
    cudaEvent_t end;
    int slot;
  };

  absl::StatusOr<void*> Allocate(size_t bytes, bool pinned) {
    ScopedDevice scoped(device_);
    void* memory = nullptr;
    const cudaError_t error =
        pinned ? cudaHostAlloc(&memory, bytes, cudaHostAllocPortable) : cudaMalloc(&memory, bytes);
    if (error != cudaSuccess) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot allocate %d bytes of %s memory: %s", bytes,
                          pinned ? "pinned host" : "device", cudaGetErrorString(error)));
    }
    absl::MutexLock lock(&mu_);
    allocations_.push_back({memory, pinned});
    return memory;
  }

  cudaStream_t StreamOf(CopyDirection direction) const {
    return direction == CopyDirection::kToHost ? to_host_ : to_device_;
  }

  void Retire(cudaEvent_t begin, cudaEvent_t end, int slot) {
    absl::MutexLock lock(&mu_);
    passed_.push_back({begin, end, slot});
  }

  // Adds up the waits the streams have passed and frees their slots.
  void ReclaimPassed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ScopedDevice scoped(device_);
    std::vector<Passed> pending;
    for (const Passed& passed : passed_) {
      const cudaEvent_t last = passed.end != nullptr ? passed.end : passed.begin;
      if (cudaEventQuery(last) == cudaErrorNotReady) {
        pending.push_back(passed);
        continue;
      }
      float milliseconds = 0;
      if (passed.end != nullptr &&
          cudaEventElapsedTime(&milliseconds, passed.begin, passed.end) == cudaSuccess) {
        waited_ += absl::Microseconds(static_cast<int64_t>(milliseconds * 1000.0f));
      }
      cudaEventDestroy(passed.begin);
      if (passed.end != nullptr) cudaEventDestroy(passed.end);
      if (passed.slot >= 0) free_slots_.push_back(passed.slot);
    }
    passed_ = std::move(pending);
  }

  int device_ = 0;
  cudaStream_t to_host_ = nullptr;
  cudaStream_t to_device_ = nullptr;
  PFN_cuStreamWaitValue32_v11070 wait_value_ = nullptr;
  volatile uint32_t* words_ = nullptr;  // mapped pinned memory the held streams poll
  CUdeviceptr device_words_ = 0;

  absl::Mutex mu_;
  std::vector<std::pair<void*, bool>> allocations_ ABSL_GUARDED_BY(mu_);  // (memory, pinned)
  std::vector<uint32_t> values_ ABSL_GUARDED_BY(mu_);  // the last value given out per slot
  std::vector<int> free_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<Passed> passed_ ABSL_GUARDED_BY(mu_);
  absl::Duration waited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<CopyEngine>> NewCudaCopyEngine(int device) {
  auto engine = std::make_unique<CudaCopyEngine>();
  HETPS_RETURN_IF_ERROR(engine->Init(device));
  return engine;
}

}  // namespace hetps::internal
