// Helpers for the CUDA files of the device path (built only with CUDA).
#ifndef HETPS_WORKER_DEVICE_SCOPED_DEVICE_H_
#define HETPS_WORKER_DEVICE_SCOPED_DEVICE_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "worker/device_client.h"

namespace hetps::internal {

inline absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s: %s", what, cudaGetErrorString(error)));
}

inline cudaStream_t AsCudaStream(GpuStream stream) {
  return reinterpret_cast<cudaStream_t>(stream);
}

// Makes `device` current for a scope and then puts the caller's device back: calls come from
// the job's threads, which may drive several GPUs.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      cudaSetDevice(device);
    } else {
      previous_ = -1;
    }
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace hetps::internal

#endif  // HETPS_WORKER_DEVICE_SCOPED_DEVICE_H_
