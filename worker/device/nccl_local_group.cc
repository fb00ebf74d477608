// The local group on NCCL: one communicator per rank, collectives on the job's stream.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "worker/device/scoped_device.h"
#include "worker/local_group.h"

namespace hetps {
namespace {

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: %s", what, ncclGetErrorString(result)));
}

#define HETPS_NCCL_RETURN_IF_ERROR(call) HETPS_RETURN_IF_ERROR(NcclStatus((call), #call))

// Collectives after the group is set up finish their own set-up (connections) at first use.
constexpr absl::Duration kCallTimeout = absl::Seconds(60);

// The communicator is non-blocking, so no call waits without a deadline: set-up and calls may
// answer ncclInProgress, and this polls until they are done.
absl::Status AwaitReady(ncclComm_t comm, absl::Time deadline, const char* what) {
  absl::Duration backoff = absl::Microseconds(20);
  while (true) {
    ncclResult_t state = ncclSuccess;
    HETPS_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError"));
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (hetps::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat("%s did not finish in time", what));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(5));
  }
}

class NcclLocalGroup final : public LocalGroup {
 public:
  NcclLocalGroup(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclLocalGroup() override { ncclCommDestroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status ReduceToRoot(float* values, size_t count, GpuStream stream) override {
    internal::ScopedDevice scoped(device_);
    return Issued(ncclReduce(values, values, count, ncclFloat32, ncclSum, 0, comm_,
                             internal::AsCudaStream(stream)),
                  "ncclReduce");
  }
  absl::Status Broadcast(float* values, size_t count, GpuStream stream) override {
    internal::ScopedDevice scoped(device_);
    return Issued(
        ncclBroadcast(values, values, count, ncclFloat32, 0, comm_, internal::AsCudaStream(stream)),
        "ncclBroadcast");
  }
  absl::Status BeginBatch() override { return NcclStatus(ncclGroupStart(), "ncclGroupStart"); }
  absl::Status EndBatch() override {
    internal::ScopedDevice scoped(device_);
    return Issued(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  const ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;

  // A call that answered ncclInProgress is being issued: wait (bounded) until it is queued.
  absl::Status Issued(ncclResult_t result, const char* what) {
    if (result != ncclInProgress) return NcclStatus(result, what);
    return AwaitReady(comm_, hetps::Now() + kCallTimeout, what);
  }
};

}  // namespace

absl::StatusOr<LocalGroupId> LocalGroup::NewId() {
  ncclUniqueId unique;
  HETPS_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&unique));
  LocalGroupId id;
  static_assert(sizeof(unique) == sizeof(id), "NCCL's unique id changed size");
  std::memcpy(id.data(), &unique, sizeof(unique));
  return id;
}

absl::StatusOr<std::shared_ptr<LocalGroup>> LocalGroup::Create(const LocalGroupId& id, int rank,
                                                               int size, int cuda_device,
                                                               absl::Duration timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("local rank %d is out of range for a group of %d", rank, size));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError("a local group needs a CUDA device; none can be used");
  }
  if (cuda_device < 0 || cuda_device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA device %d does not exist (%d found)", cuda_device, count));
  }
  if (std::all_of(id.begin(), id.end(), [](char c) { return c == 0; })) {
    // NCCL would take it and fail with "internal error".
    return absl::InvalidArgumentError(
        "the local group id is all zeros: make one with LocalGroup::NewId() on rank 0 and hand "
        "it to the others (LocalGroup::IdThroughFile)");
  }
  internal::ScopedDevice scoped(cuda_device);
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), sizeof(unique));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, unique, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    return NcclStatus(started, "ncclCommInitRankConfig");
  }
  absl::Status ready = AwaitReady(comm, hetps::Now() + timeout, "joining the local group");
  if (!ready.ok()) {
    ncclCommAbort(comm);
    return absl::Status(ready.code(),
                        absl::StrFormat("local rank %d of %d: %s", rank, size, ready.message()));
  }
  return std::make_shared<NcclLocalGroup>(comm, rank, size, cuda_device);
}

}  // namespace hetps
