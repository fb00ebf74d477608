// The memory of a Python object (a torch tensor, a numpy array, anything with the buffer
// protocol) as the client reads or writes it, without a copy.
#ifndef HETPS_PYTHON_SRC_ARRAYS_H_
#define HETPS_PYTHON_SRC_ARRAYS_H_

#include <pybind11/pybind11.h>

#include <cstddef>

#include "absl/status/statusor.h"
#include "worker/client.h"

namespace hetps::python {

struct HostArray {
  void* data = nullptr;
  size_t elements = 0;
  DType dtype = DType::kFp32;
  pybind11::object owner;  // keeps the memory alive while an operation uses it

  ConstTensorView AsConst() const;
  TensorView AsWritable() const;
};

// CPU memory of `object`: contiguous, fp32, bf16 (torch only: numpy has no bfloat16) or fp16.
// `writable`: the operation writes into it (a pull): a read-only buffer, or a torch tensor
// that requires grad (autograd would not see the write; pass tensor.data), is refused.
// InvalidArgument names what is wrong: a CUDA tensor, another dtype, a non-contiguous layout.
// REQUIRES: the GIL is held.
absl::StatusOr<HostArray> HostArrayOf(pybind11::handle object, bool writable);

// Whether `object` looks like a torch tensor (without importing torch): its type has data_ptr,
// is_contiguous and numel. REQUIRES: the GIL.
bool IsTorchTensor(pybind11::handle object);
// Whether the torch tensor `tensor` is in CUDA memory. REQUIRES: the GIL.
bool IsCudaTensor(pybind11::handle tensor);
// InvalidArgument for a torch tensor that is not contiguous, or that requires grad when
// `writable` (a pull target). REQUIRES: the GIL is held.
absl::Status CheckTorchLayout(pybind11::handle tensor, bool writable);

// "fp32", "bf16" or "fp16" (also torch's and numpy's names: float32, bfloat16, float16, half).
absl::StatusOr<DType> ParseDType(const std::string& name);
const char* DTypeName(DType dtype);

}  // namespace hetps::python

#endif  // HETPS_PYTHON_SRC_ARRAYS_H_
