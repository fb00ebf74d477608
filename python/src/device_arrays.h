// GPU memory passed from Python: a torch CUDA tensor, or anything with the
// __cuda_array_interface__ protocol (CuPy, Numba, ...). The client moves it through its device
// client (worker/device_client.h), ordered on the array's stream.
#ifndef HETPS_PYTHON_SRC_DEVICE_ARRAYS_H_
#define HETPS_PYTHON_SRC_DEVICE_ARRAYS_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "worker/device_client.h"

namespace hetps::python {

struct DeviceArray {
  float* data = nullptr;
  size_t elements = 0;
  int device = -1;  // the CUDA device; -1: unknown (the current one)
  // The stream the array's producer wrote it on (the call is ordered after it); nullopt: none
  // named (the legacy default stream is used).
  std::optional<uintptr_t> stream;
  pybind11::object owner;  // keeps the memory alive while an operation uses it
};

// Whether `object` lives in GPU memory (a CUDA torch tensor or a __cuda_array_interface__).
// REQUIRES: the GIL is held.
bool IsDeviceArray(pybind11::handle object);

// The GPU memory of `object`: contiguous float32 (the device path moves fp32 only).
// `writable`: a pull writes into it (a read-only array, or a torch tensor that requires grad,
// is refused). InvalidArgument names what is wrong. REQUIRES: the GIL is held.
absl::StatusOr<DeviceArray> DeviceArrayOf(pybind11::handle object, bool writable);

}  // namespace hetps::python

#endif  // HETPS_PYTHON_SRC_DEVICE_ARRAYS_H_
