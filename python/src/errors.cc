#include "python/src/errors.h"

#include <string>

namespace hetps::python {
namespace py = pybind11;
namespace {

PyObject* error_type = nullptr;  // owned by the module

}  // namespace

void RegisterErrorType(py::module_& module) {
  static py::exception<std::runtime_error> type(module, "Error", PyExc_RuntimeError);
  type.doc() =
      "A failed hetps call. `code` is the status code's name (e.g. 'UNAVAILABLE', "
      "'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED'), `message` says what went wrong.";
  error_type = type.ptr();
}

py::object ErrorFor(const absl::Status& status) {
  const std::string code = absl::StatusCodeToString(status.code());
  const std::string message(status.message());
  py::object error = py::reinterpret_borrow<py::object>(error_type)(code + ": " + message);
  error.attr("code") = code;
  error.attr("message") = message;
  return error;
}

void RaiseIfError(const absl::Status& status) {
  if (status.ok()) return;
  py::object error = ErrorFor(status);
  PyErr_SetObject(error_type, error.ptr());
  throw py::error_already_set();
}

}  // namespace hetps::python
