// The hetps._hetps extension: the worker client for Python. The `hetps` package (python/hetps/)
// re-exports it and adds the torch integration and the launcher.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "python/src/arrays.h"
#include "python/src/client.h"
#include "python/src/errors.h"
#include "python/src/operation.h"
#include "transport/transport.h"
#include "worker/options.h"

namespace hetps::python {
namespace py = pybind11;
namespace {

absl::Duration Seconds(double seconds) { return absl::Seconds(seconds); }

void BindOptions(py::module_& m) {
  py::class_<ClientOptions>(m, "ClientOptions", R"doc(
How a worker reaches the shards. Every field can be given as a keyword:

    hetps.ClientOptions(servers=["10.0.0.1:7000"], rank=0, world_size=2, transport="ucx")

servers: shard addresses in shard-index order; rank, world_size: this worker's place in the
job; job_id: must equal the shards' --job_id; auth_token_file: the job's token (empty:
$HETPS_AUTH_TOKEN if set); tls_ca_file, tls_cert_file, tls_key_file: TLS; transport: "grpc" or
"ucx"; call_timeout, connect_timeout: seconds; partition_bytes, max_message_bytes: as the C++
ClientOptions; metrics_port, metrics_host: the worker's /metrics page (-1: none).)doc")
      .def(py::init([](py::kwargs kwargs) {
             ClientOptions options;
             py::object self = py::cast(options);
             for (auto [key, value] : kwargs) {
               const std::string name = py::str(key);
               if (!py::hasattr(self, name.c_str()) || name.rfind("_", 0) == 0) {
                 throw py::type_error(absl::StrCat("ClientOptions has no field '", name, "'"));
               }
               self.attr(key) = value;
             }
             return self.cast<ClientOptions>();
           }),
           "Options with the given fields set and the rest at their defaults.")
      .def_readwrite("servers", &ClientOptions::servers)
      .def_readwrite("rank", &ClientOptions::rank)
      .def_readwrite("world_size", &ClientOptions::world_size)
      .def_readwrite("job_id", &ClientOptions::job_id)
      .def_readwrite("admin", &ClientOptions::admin,
                     "An operator's tool (ps-ctl), not a worker: rank and world_size are not "
                     "checked and no worker's run is taken over. For stats() and drop().")
      .def_readwrite("auth_token_file", &ClientOptions::auth_token_file)
      .def_readwrite("tls_ca_file", &ClientOptions::tls_ca_file)
      .def_readwrite("tls_cert_file", &ClientOptions::tls_cert_file)
      .def_readwrite("tls_key_file", &ClientOptions::tls_key_file)
      .def_readwrite("transport", &ClientOptions::transport)
      .def_readwrite("ucx_net_devices", &ClientOptions::ucx_net_devices)
      .def_readwrite("ucx_busy_poll", &ClientOptions::ucx_busy_poll)
      .def_property(
          "call_timeout",
          [](const ClientOptions& o) { return absl::ToDoubleSeconds(o.call_timeout); },
          [](ClientOptions& o, double s) { o.call_timeout = Seconds(s); },
          "Seconds every message to a shard may take")
      .def_property(
          "connect_timeout",
          [](const ClientOptions& o) { return absl::ToDoubleSeconds(o.connect_timeout); },
          [](ClientOptions& o, double s) { o.connect_timeout = Seconds(s); },
          "Seconds Client() keeps trying to reach the shards")
      .def_readwrite("partition_bytes", &ClientOptions::partition_bytes)
      .def_readwrite("max_message_bytes", &ClientOptions::max_message_bytes)
      .def_readwrite("metrics_port", &ClientOptions::metrics_port,
                     "Port of the worker's /metrics page (Prometheus); 0: any free one "
                     "(Client.metrics_address); -1: none")
      .def_readwrite("metrics_host", &ClientOptions::metrics_host,
                     "Address the /metrics page listens on")
      .def("__repr__", [](const ClientOptions& o) {
        return absl::StrCat("ClientOptions(servers=[", absl::StrJoin(o.servers, ", "),
                            "], rank=", o.rank, ", world_size=", o.world_size,
                            ", transport=", o.transport, ", job_id=", o.job_id, ")");
      });
}

void BindInitializer(py::module_& m) {
  py::class_<Initializer>(m, "Initializer",
                          "How the shards fill a tensor declared without initial values.")
      .def_static("zeros", &Initializer::Zeros)
      .def_static("constant", &Initializer::Constant, py::arg("value"))
      .def_static("uniform", &Initializer::Uniform, py::arg("low"), py::arg("high"),
                  py::arg("seed") = 0)
      .def_static("normal", &Initializer::Normal, py::arg("mean"), py::arg("stddev"),
                  py::arg("seed") = 0);
}

void BindStats(py::module_& m) {
  py::class_<ShardStats>(m, "ShardStats", "One shard's figures (Client.stats()).")
      .def_readonly("shard_index", &ShardStats::shard_index)
      .def_readonly("num_tensors", &ShardStats::num_tensors)
      .def_readonly("num_partitions", &ShardStats::num_partitions)
      .def_readonly("parameter_bytes", &ShardStats::parameter_bytes)
      .def_readonly("optimizer_state_bytes", &ShardStats::optimizer_state_bytes)
      .def_readonly("data_requests", &ShardStats::data_requests)
      .def_readonly("push_items", &ShardStats::push_items)
      .def_readonly("pull_items", &ShardStats::pull_items)
      .def_readonly("payload_bytes_received", &ShardStats::payload_bytes_received)
      .def_readonly("payload_bytes_sent", &ShardStats::payload_bytes_sent)
      .def_readonly("failed_requests", &ShardStats::failed_requests)
      .def_readonly("pushes_refused", &ShardStats::pushes_refused)
      .def_readonly("tensors_dropped", &ShardStats::tensors_dropped)
      .def_readonly("requests_waiting", &ShardStats::requests_waiting)
      .def_readonly("checkpoints_waiting", &ShardStats::checkpoints_waiting)
      .def_readonly("last_checkpoint", &ShardStats::last_checkpoint)
      .def_readonly("backup_partitions", &ShardStats::backup_partitions)
      .def_readonly("replication_resends", &ShardStats::replication_resends)
      .def_readonly("min_version", &ShardStats::min_version)
      .def_readonly("max_version", &ShardStats::max_version)
      .def("__repr__", [](const ShardStats& s) {
        return absl::StrCat("ShardStats(shard_index=", s.shard_index,
                            ", num_tensors=", s.num_tensors, ", min_version=", s.min_version,
                            ", max_version=", s.max_version, ")");
      });
  py::class_<DropResult>(m, "DropResult", "What Client.drop() removed.")
      .def_readonly("tensors", &DropResult::tensors,
                    "Tensors some shard held (the most any one held).")
      .def_readonly("released_bytes", &DropResult::released_bytes,
                    "Tensor memory given back, summed over the shards.")
      .def("__repr__", [](const DropResult& r) {
        return absl::StrCat("DropResult(tensors=", r.tensors, ", released_bytes=", r.released_bytes,
                            ")");
      });
  py::class_<TensorPartition>(m, "TensorPartition", "Where one partition of a tensor lies.")
      .def_readonly("begin", &TensorPartition::begin)
      .def_readonly("size", &TensorPartition::size)
      .def_readonly("shard", &TensorPartition::shard);
}

void BindOperation(py::module_& m) {
  py::class_<OperationHandle>(m, "Operation", R"doc(
The handle of an asynchronous push, pull or push-pull. The arrays passed to the call stay alive
until the operation ends, even if this handle is dropped; while the handle lives, until wait()
or add_done_callback() finds it ended, or the handle is dropped.)doc")
      .def("wait", &OperationHandle::Wait,
           "Blocks (without the GIL) until the operation ends; raises hetps.Error if it failed.")
      .def_property_readonly("_waiters", &OperationHandle::waiters,
                             "Threads that called wait() on it (for tests).")
      .def("done", &OperationHandle::Done, "Whether the operation has ended.")
      .def(
          "add_done_callback",
          [](py::object self, py::object callback) {
            self.cast<OperationHandle&>().AddDoneCallback(self, std::move(callback));
          },
          py::arg("callback"),
          "Calls callback(operation) once it has ended (on a thread waiting for it in wait(), "
          "else on hetps's callback thread; at once if it has ended already). Exceptions it "
          "raises are reported, not propagated.")
      .def("exception", &OperationHandle::Exception,
           "None if the ended operation succeeded, else its hetps.Error (not raised).");
}

}  // namespace

PYBIND11_MODULE(_hetps, m) {
  m.doc() = "hetps worker client (see the hetps package)";
  RegisterErrorType(m);
  BindOptions(m);
  BindInitializer(m);
  BindStats(m);
  BindOperation(m);
  BindClient(m);
  m.def("available_transports", &transport::AvailableTransports,
        "The transports this build has, e.g. 'grpc, ucx'.");
  m.def(
      "_stop_callbacks", [] { CallbackRunner::Get().Stop(); },
      "Ends the callback thread (registered with atexit).");
  m.def(
      "_callbacks_posted", [] { return CallbackRunner::Get().posted(); },
      "Ended operations handed to the callback thread so far (for tests).");
}

}  // namespace hetps::python
