#include "python/src/arrays.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace hetps::python {
namespace py = pybind11;

ConstTensorView HostArray::AsConst() const {
  switch (dtype) {
    case DType::kBf16:
      return ConstTensorView::Bf16({static_cast<const uint16_t*>(data), elements});
    case DType::kFp16:
      return ConstTensorView::Fp16({static_cast<const uint16_t*>(data), elements});
    case DType::kFp32:
      break;
  }
  return absl::Span<const float>(static_cast<const float*>(data), elements);
}

TensorView HostArray::AsWritable() const {
  switch (dtype) {
    case DType::kBf16:
      return TensorView::Bf16({static_cast<uint16_t*>(data), elements});
    case DType::kFp16:
      return TensorView::Fp16({static_cast<uint16_t*>(data), elements});
    case DType::kFp32:
      break;
  }
  return absl::Span<float>(static_cast<float*>(data), elements);
}

absl::StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kFp32;
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype is fp32, bf16 or fp16 (or torch's names), not '", name, "'"));
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp32:
      break;
  }
  return "fp32";
}

bool IsTorchTensor(py::handle object) {
  return py::hasattr(object, "data_ptr") && py::hasattr(object, "is_contiguous") &&
         py::hasattr(object, "numel");
}

absl::Status CheckTorchLayout(py::handle tensor, bool writable) {
  if (!tensor.attr("is_contiguous")().cast<bool>()) {
    return absl::InvalidArgumentError(
        "a tensor that is not contiguous: pass tensor.contiguous() (a copy), or a contiguous "
        "tensor to write into");
  }
  if (writable && tensor.attr("requires_grad").cast<bool>()) {
    return absl::InvalidArgumentError(
        "a tensor that requires grad cannot be written behind autograd's back: pass "
        "tensor.data");
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<HostArray> TorchArray(py::handle tensor, bool writable) {
  const std::string device = py::str(tensor.attr("device").attr("type"));
  if (device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", device, " tensor: this module moves CPU tensors only (copy it with .cpu())"));
  }
  std::string dtype = py::str(tensor.attr("dtype"));
  if (dtype.rfind("torch.", 0) == 0) dtype = dtype.substr(6);
  absl::StatusOr<DType> parsed = ParseDType(dtype);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of torch.", dtype, ": hetps takes float32, bfloat16 or float16"));
  }
  if (absl::Status layout = CheckTorchLayout(tensor, writable); !layout.ok()) return layout;
  HostArray array;
  array.data = reinterpret_cast<void*>(tensor.attr("data_ptr")().cast<uintptr_t>());
  array.elements = tensor.attr("numel")().cast<size_t>();
  array.dtype = *parsed;
  array.owner = py::reinterpret_borrow<py::object>(tensor);
  return array;
}

absl::StatusOr<HostArray> BufferArray(py::handle object, bool writable) {
  if (!PyObject_CheckBuffer(object.ptr())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", std::string(py::str(py::type::of(object).attr("__name__"))),
        ": hetps takes torch tensors and numpy arrays (or anything with the buffer protocol)"));
  }
  py::buffer_info info;
  try {
    info = py::reinterpret_borrow<py::buffer>(object).request(writable);
  } catch (const py::error_already_set& error) {
    return absl::InvalidArgumentError(absl::StrCat(
        writable ? "cannot write into this array: " : "cannot read this array: ", error.what()));
  }
  HostArray array;
  if (info.format == py::format_descriptor<float>::format() && info.itemsize == 4) {
    array.dtype = DType::kFp32;
  } else if (info.format == "e" && info.itemsize == 2) {
    array.dtype = DType::kFp16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("an array of format '", info.format,
                                                   "': hetps takes float32 or float16 arrays"));
  }
  // C order without gaps: each stride is the product of the later dimensions.
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) {
      return absl::InvalidArgumentError(
          "an array that is not C-contiguous: pass numpy.ascontiguousarray(array)");
    }
    expected *= info.shape[d];
  }
  array.data = info.ptr;
  array.elements = static_cast<size_t>(info.size);
  array.owner = py::reinterpret_borrow<py::object>(object);
  return array;
}

}  // namespace

absl::StatusOr<HostArray> HostArrayOf(py::handle object, bool writable) {
  if (IsTorchTensor(object)) return TorchArray(object, writable);
  return BufferArray(object, writable);
}

}  // namespace hetps::python
