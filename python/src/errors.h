// hetps.Error: how a failed absl::Status reaches Python. A RuntimeError whose `code` is the
// status code's name (e.g. "UNAVAILABLE", "INVALID_ARGUMENT") and `message` its message.
#ifndef HETPS_PYTHON_SRC_ERRORS_H_
#define HETPS_PYTHON_SRC_ERRORS_H_

#include <pybind11/pybind11.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hetps::python {

// Creates hetps.Error in `module`. Call once, when the module loads.
void RegisterErrorType(pybind11::module_& module);

// The exception object for `status` (not raised). REQUIRES: !status.ok(), the GIL is held.
pybind11::object ErrorFor(const absl::Status& status);

// Raises hetps.Error unless `status` is OK.
void RaiseIfError(const absl::Status& status);

template <typename T>
T ValueOrRaise(absl::StatusOr<T> value) {
  RaiseIfError(value.status());
  return *std::move(value);
}

}  // namespace hetps::python

#endif  // HETPS_PYTHON_SRC_ERRORS_H_
