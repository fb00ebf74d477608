#include "python/src/device_arrays.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "python/src/arrays.h"

namespace hetps::python {
namespace py = pybind11;
namespace {

constexpr char kInterface[] = "__cuda_array_interface__";

absl::StatusOr<DeviceArray> TorchDeviceArray(py::handle tensor, bool writable) {
  std::string dtype = py::str(tensor.attr("dtype"));
  if (dtype != "torch.float32") {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", dtype, " CUDA tensor: GPU memory moves as float32 only (pass tensor.float())"));
  }
  if (absl::Status layout = CheckTorchLayout(tensor, writable); !layout.ok()) return layout;
  DeviceArray array;
  array.data = reinterpret_cast<float*>(tensor.attr("data_ptr")().cast<uintptr_t>());
  array.elements = tensor.attr("numel")().cast<size_t>();
  py::object device = tensor.attr("device");
  array.device = device.attr("index").is_none() ? -1 : device.attr("index").cast<int>();
  // torch orders its work on the device's current stream; so does the transfer.
  py::object stream = py::module_::import("torch").attr("cuda").attr("current_stream")(device);
  array.stream = stream.attr("cuda_stream").cast<uintptr_t>();
  array.owner = py::reinterpret_borrow<py::object>(tensor);
  return array;
}

// The __cuda_array_interface__ protocol (version 2 and 3): typestr, shape, strides, data,
// optional mask and stream.
absl::StatusOr<DeviceArray> InterfaceArray(py::handle object, bool writable) {
  py::object interface = object.attr(kInterface);
  if (!py::isinstance<py::dict>(interface)) {
    return absl::InvalidArgumentError("__cuda_array_interface__ is not a dict");
  }
  py::dict fields = interface.cast<py::dict>();
  for (const char* required : {"typestr", "shape", "data"}) {
    if (!fields.contains(required)) {
      return absl::InvalidArgumentError(
          absl::StrCat("__cuda_array_interface__ lacks '", required, "'"));
    }
  }
  const std::string typestr = py::str(fields["typestr"]);
  if (typestr != "<f4" && typestr != "=f4") {
    return absl::InvalidArgumentError(absl::StrCat("a GPU array of type '", typestr,
                                                   "': GPU memory moves as float32 ('<f4') only"));
  }
  if (fields.contains("mask") && !fields["mask"].is_none()) {
    return absl::InvalidArgumentError("a masked GPU array: hetps moves whole arrays only");
  }
  const py::tuple shape = fields["shape"].cast<py::tuple>();
  size_t elements = 1;
  for (py::handle extent : shape) elements *= extent.cast<size_t>();
  if (fields.contains("strides") && !fields["strides"].is_none()) {
    const py::tuple strides = fields["strides"].cast<py::tuple>();
    // C order without gaps: each stride is the product of the later extents.
    size_t expected = sizeof(float);
    for (size_t d = shape.size(); d-- > 0;) {
      const size_t extent = shape[d].cast<size_t>();
      if (extent > 1 && strides[d].cast<size_t>() != expected) {
        return absl::InvalidArgumentError("a GPU array that is not C-contiguous");
      }
      expected *= extent;
    }
  }
  const py::tuple data = fields["data"].cast<py::tuple>();
  if (data.size() != 2) {
    return absl::InvalidArgumentError("__cuda_array_interface__'s data is not (pointer, readonly)");
  }
  if (writable && data[1].cast<bool>()) {
    return absl::InvalidArgumentError("cannot write into a read-only GPU array");
  }
  DeviceArray array;
  array.data = reinterpret_cast<float*>(data[0].cast<uintptr_t>());
  array.elements = elements;
  if (array.data == nullptr && elements > 0) {
    return absl::InvalidArgumentError("a GPU array whose pointer is null");
  }
  if (fields.contains("stream") && !fields["stream"].is_none()) {
    const uintptr_t stream = fields["stream"].cast<uintptr_t>();
    if (stream == 0) {  // the protocol forbids 0: it could mean either default stream
      return absl::InvalidArgumentError("__cuda_array_interface__'s stream is 0 (disallowed)");
    }
    array.stream = stream;  // 1 and 2 are CUDA's cudaStreamLegacy and cudaStreamPerThread
  }
  array.owner = py::reinterpret_borrow<py::object>(object);
  return array;
}

}  // namespace

bool IsDeviceArray(py::handle object) {
  if (IsTorchTensor(object)) return IsCudaTensor(object);
  // On the object: the protocol lets an instance carry it (not only its type).
  static const py::str* interface = new py::str(kInterface);  // never destroyed
  return py::hasattr(object, *interface);
}

absl::StatusOr<DeviceArray> DeviceArrayOf(py::handle object, bool writable) {
  try {
    if (IsTorchTensor(object)) return TorchDeviceArray(object, writable);
    return InterfaceArray(object, writable);
  } catch (const py::error_already_set& error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read this GPU array: ", error.what()));
  } catch (const py::cast_error& error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read this GPU array: ", error.what()));
  }
}

}  // namespace hetps::python
