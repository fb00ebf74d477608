// hetps.Client: the C++ client (worker/client.h) for Python. Calls that wait release the GIL;
// push, pull and push_pull return an Operation at once and keep the arrays passed to them
// alive until it ends.
#ifndef HETPS_PYTHON_SRC_CLIENT_H_
#define HETPS_PYTHON_SRC_CLIENT_H_

#include <pybind11/pybind11.h>

namespace hetps::python {

void BindClient(pybind11::module_& module);

}  // namespace hetps::python

#endif  // HETPS_PYTHON_SRC_CLIENT_H_
