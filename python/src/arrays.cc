#include "python/src/arrays.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

namespace {

// Every call looks at its arrays' attributes: by names made into Python strings once (a lookup
// by C string makes a new string each time), and what it learns about their types and dtypes
// is remembered. All of it only with the GIL held.
struct Names {
  py::str data_ptr{"data_ptr"};
  py::str is_contiguous{"is_contiguous"};
  py::str numel{"numel"};
  py::str requires_grad{"requires_grad"};
  py::str is_cpu{"is_cpu"};
  py::str is_cuda{"is_cuda"};
  py::str dtype{"dtype"};
};

const Names& AttributeNames() {
  static const Names* names = new Names();  // never destroyed: it would outlive the interpreter
  return *names;
}

// What was learned about Python objects that a program has few of and keeps (types, torch's
// dtype objects), by address: each one remembered holds a reference, so that its address is
// never another object's. Past kMost objects, the rest are not remembered.
template <typename Value>
class Remembered {
 public:
  static constexpr size_t kMost = 16;

  const Value* Find(py::handle object) const {
    for (const auto& [known, value] : seen_) {
      if (known == object.ptr()) return &value;
    }
    return nullptr;
  }
  void Add(py::handle object, Value value) {
    if (seen_.size() >= kMost) return;
    object.inc_ref();
    seen_.emplace_back(object.ptr(), std::move(value));
  }

 private:
  std::vector<std::pair<PyObject*, Value>> seen_;
};

}  // namespace

bool IsTorchTensor(py::handle object) {
  static auto* tensor_types = new Remembered<bool>();  // never destroyed, as the names
  const py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())));
  if (const bool* known = tensor_types->Find(type)) return *known;
  const Names& names = AttributeNames();
  const bool tensor = py::hasattr(type, names.data_ptr) && py::hasattr(type, names.is_contiguous) &&
                      py::hasattr(type, names.numel);
  tensor_types->Add(type, tensor);
  return tensor;
}

bool IsCudaTensor(py::handle tensor) { return tensor.attr(AttributeNames().is_cuda).cast<bool>(); }

absl::Status CheckTorchLayout(py::handle tensor, bool writable) {
  const Names& names = AttributeNames();
  if (!tensor.attr(names.is_contiguous)().cast<bool>()) {
    return absl::InvalidArgumentError(
        "a tensor that is not contiguous: pass tensor.contiguous() (a copy), or a contiguous "
        "tensor to write into");
  }
  if (writable && tensor.attr(names.requires_grad).cast<bool>()) {
    return absl::InvalidArgumentError(
        "a tensor that requires grad cannot be written behind autograd's back: pass "
        "tensor.data");
  }
  return absl::OkStatus();
}

namespace {

// The DType of a torch dtype object (torch.float32, ...: singletons), its name parsed once.
absl::StatusOr<DType> TorchDType(py::handle dtype) {
  static auto* dtypes = new Remembered<DType>();  // never destroyed, as the names
  if (const DType* known = dtypes->Find(dtype)) return *known;
  std::string name = py::str(dtype);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  absl::StatusOr<DType> parsed = ParseDType(name);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of torch.", name, ": hetps takes float32, bfloat16 or float16"));
  }
  dtypes->Add(dtype, *parsed);
  return parsed;
}

absl::StatusOr<HostArray> TorchArray(py::handle tensor, bool writable) {
  const Names& names = AttributeNames();
  const auto device_type = [&] { return std::string(py::str(tensor.attr("device").attr("type"))); };
  // is_cpu (newer torch versions) is quicker to read than device.type.
  const py::object is_cpu = py::getattr(tensor, names.is_cpu, py::none());
  if (is_cpu.is_none() ? device_type() != "cpu" : !is_cpu.cast<bool>()) {
    const std::string device = device_type();
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", device, " tensor: this module moves CPU tensors only (copy it with .cpu())"));
  }
  absl::StatusOr<DType> parsed = TorchDType(tensor.attr(names.dtype));
  if (!parsed.ok()) return parsed.status();
  if (absl::Status layout = CheckTorchLayout(tensor, writable); !layout.ok()) return layout;
  HostArray array;
  array.data = reinterpret_cast<void*>(tensor.attr(names.data_ptr)().cast<uintptr_t>());
  array.elements = tensor.attr(names.numel)().cast<size_t>();
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
