#include "python/src/client.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "python/src/arrays.h"
#include "python/src/device_arrays.h"
#include "python/src/errors.h"
#include "python/src/operation.h"
#include "worker/client.h"
#include "worker/device_client.h"

namespace hetps::python {
namespace py = pybind11;
namespace {

// Owns the C++ client; every call checks that it is still open.
class PyClient {
 public:
  explicit PyClient(const ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<Client>> client;
    {
      py::gil_scoped_release release;
      client = Client::Create(options);
    }
    client_ = ValueOrRaise(std::move(client));
  }
  ~PyClient() { Close(); }

  Client& client() {
    if (client_ == nullptr) {
      RaiseIfError(absl::FailedPreconditionError("the client was shut down"));
    }
    return *client_;
  }

  void Declared(TensorId id, uint64_t num_elements) {
    absl::MutexLock lock(&mu_);
    num_elements_[id] = num_elements;
  }
  // Raises what the client would report through the operation, at the call: NOT_FOUND for a
  // tensor this client did not declare, INVALID_ARGUMENT for an array of another size.
  void CheckSize(TensorId id, size_t elements) {
    uint64_t expected = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = num_elements_.find(id);
      if (it == num_elements_.end()) {
        RaiseIfError(
            absl::NotFoundError(absl::StrCat("tensor ", id, " was not declared by this client")));
      }
      expected = it->second;
    }
    if (elements != expected) {
      RaiseIfError(absl::InvalidArgumentError(absl::StrCat(
          "tensor ", id, ": ", expected, " elements expected, ", elements, " were given")));
    }
  }

  // The device client for GPU arrays on `cuda_device` (-1: the current device), made on first
  // use: FAILED_PRECONDITION in a build without CUDA or without a usable GPU.
  DeviceClient& Device(int cuda_device) {
    Client& shards = client();
    absl::Status status;
    DeviceClient* device = nullptr;
    {
      // Without the GIL before the lock: a thread waiting for the lock must not hold it.
      py::gil_scoped_release release;
      absl::MutexLock lock(&device_mu_);
      if (device_ == nullptr) {
        DeviceClientOptions options;
        options.cuda_device = cuda_device;
        absl::StatusOr<std::unique_ptr<DeviceClient>> made = DeviceClient::Create(&shards, options);
        if (made.ok()) {
          device_ = std::move(*made);
          device_cuda_ = cuda_device;
        } else {
          status = made.status();
        }
      } else if (cuda_device != device_cuda_ && cuda_device != -1 && device_cuda_ != -1) {
        status = absl::InvalidArgumentError(absl::StrCat("this client moves the memory of GPU ",
                                                         device_cuda_, ", not of GPU ", cuda_device,
                                                         ": use one client per GPU"));
      }
      device = device_.get();
    }
    RaiseIfError(status);
    return *device;
  }

  // Ends outstanding operations with CANCELLED and closes the connections. Idempotent.
  void Close() {
    if (client_ == nullptr) return;
    std::unique_ptr<DeviceClient> device;
    {
      absl::MutexLock lock(&device_mu_);
      device = std::move(device_);
    }
    std::unique_ptr<Client> client = std::move(client_);
    py::gil_scoped_release release;
    client->Shutdown();
    device.reset();  // before the client it sends through
    client.reset();
  }

 private:
  std::unique_ptr<Client> client_;
  absl::Mutex mu_;
  absl::flat_hash_map<TensorId, uint64_t> num_elements_ ABSL_GUARDED_BY(mu_);
  // Held (without the GIL) while the device client is made: one per client.
  absl::Mutex device_mu_;
  std::unique_ptr<DeviceClient> device_ ABSL_GUARDED_BY(device_mu_);
  int device_cuda_ ABSL_GUARDED_BY(device_mu_) = -1;
};

// The items of a call: `tensors` is one id (and `arrays` one array) or a sequence of ids (and
// as many arrays).
std::vector<std::pair<TensorId, py::handle>> Items(py::handle tensors, py::handle arrays,
                                                   const char* what) {
  std::vector<std::pair<TensorId, py::handle>> items;
  if (py::isinstance<py::int_>(tensors)) {
    items.emplace_back(tensors.cast<TensorId>(), arrays);
    return items;
  }
  const py::sequence ids = py::reinterpret_borrow<py::sequence>(tensors);
  if (!py::isinstance<py::sequence>(arrays) || py::len(arrays) != py::len(ids)) {
    RaiseIfError(absl::InvalidArgumentError(
        absl::StrCat("with a list of tensors, ", what, " must be a list of as many arrays")));
  }
  const py::sequence values = py::reinterpret_borrow<py::sequence>(arrays);
  for (size_t i = 0; i < py::len(ids); ++i) {
    items.emplace_back(ids[i].cast<TensorId>(), values[i]);
  }
  return items;
}

enum class Method { kPush, kPull, kPushPull };

// What one call moves: host arrays through the client, or GPU arrays through the device client
// (all of one kind), kept alive by the operation's state.
struct CallItems {
  bool on_device = false;
  std::vector<PushItem> pushes;
  std::vector<PullItem> pulls;
  std::vector<DeviceItem> device;  // push-pull: gradient and weights of one tensor in one item
  bool device_seen = false;        // cuda_device and stream are those of the first GPU array
  int cuda_device = -1;
  std::optional<uintptr_t> stream;
};

// Host arrays or device arrays, never both in one call.
bool OnDevice(const std::vector<std::pair<TensorId, py::handle>>& arrays, bool& first,
              bool on_device) {
  for (const auto& [id, array] : arrays) {
    const bool device = IsDeviceArray(array);
    if (first) {
      on_device = device;
      first = false;
    } else if (device != on_device) {
      RaiseIfError(absl::InvalidArgumentError(
          "one call moves host arrays or GPU arrays, not both: split it in two"));
    }
  }
  return on_device;
}

void AddDeviceArray(CallItems& call, const DeviceArray& array) {
  if (!call.device_seen) {
    call.device_seen = true;
    call.cuda_device = array.device;
    call.stream = array.stream;
  } else if (array.device != call.cuda_device || array.stream != call.stream) {
    RaiseIfError(absl::InvalidArgumentError(
        "the GPU arrays of one call must be on one device and one stream"));
  }
}

CallItems CollectItems(PyClient& client, Method method, py::handle tensors, py::handle gradients,
                       py::handle outs, OperationState& state) {
  std::vector<std::pair<TensorId, py::handle>> pushed, pulled;
  if (method != Method::kPull) pushed = Items(tensors, gradients, "gradients");
  if (method != Method::kPush) pulled = Items(tensors, outs, "out");
  CallItems call;
  bool first = true;
  call.on_device = OnDevice(pushed, first, false);
  call.on_device = OnDevice(pulled, first, call.on_device);
  const size_t count = std::max(pushed.size(), pulled.size());
  if (call.on_device) call.device.resize(count);
  for (size_t i = 0; i < pushed.size(); ++i) {
    const auto& [id, array] = pushed[i];
    if (call.on_device) {
      DeviceArray device = ValueOrRaise(DeviceArrayOf(array, /*writable=*/false));
      client.CheckSize(id, device.elements);
      AddDeviceArray(call, device);
      call.device[i] = DeviceItem{id, device.data, nullptr, device.elements, 0};
      state.keep_alive.push_back(std::move(device.owner));
      continue;
    }
    HostArray host = ValueOrRaise(HostArrayOf(array, /*writable=*/false));
    client.CheckSize(id, host.elements);
    call.pushes.push_back(PushItem{id, host.AsConst(), {}});
    state.keep_alive.push_back(std::move(host.owner));
  }
  for (size_t i = 0; i < pulled.size(); ++i) {
    const auto& [id, array] = pulled[i];
    if (call.on_device) {
      DeviceArray device = ValueOrRaise(DeviceArrayOf(array, /*writable=*/true));
      client.CheckSize(id, device.elements);
      AddDeviceArray(call, device);
      call.device[i].tensor = id;
      call.device[i].weights = device.data;
      call.device[i].num_elements = device.elements;
      state.keep_alive.push_back(std::move(device.owner));
      continue;
    }
    HostArray host = ValueOrRaise(HostArrayOf(array, /*writable=*/true));
    client.CheckSize(id, host.elements);
    call.pulls.push_back(PullItem{id, host.AsWritable(), {}});
    state.keep_alive.push_back(std::move(host.owner));
  }
  return call;
}

// Starts a push, pull or push-pull (`step`: the pull's min_version) and returns its handle.
py::object StartCall(PyClient& self, Method method, py::handle tensors, py::handle gradients,
                     py::handle outs, uint64_t step, py::object callback) {
  Client& client = self.client();
  auto state = std::make_shared<OperationState>();
  CallItems call = CollectItems(self, method, tensors, gradients, outs, *state);
  DeviceClient* device = call.on_device ? &self.Device(call.cuda_device) : nullptr;
  // No stream named: CUDA's legacy default stream (0), which every other stream waits for.
  const GpuStream stream = reinterpret_cast<GpuStream>(call.stream.value_or(0));
  Operation operation(nullptr);
  // Counted as a handle from here until the handle below exists: an operation that ends before
  // (its caller descheduled before it took the GIL back) is then finished by that handle, as any
  // ended one, not handed to the callback thread (seen once in a loaded test run).
  state->AddHandle();
  {
    py::gil_scoped_release release;
    DoneCallback done = PostTo(state);
    if (device != nullptr) {
      switch (method) {
        case Method::kPush:
          operation = device->Push(call.device, step, stream, std::move(done));
          break;
        case Method::kPull:
          operation = device->Pull(call.device, step, stream, std::move(done));
          break;
        case Method::kPushPull:
          operation = device->PushPull(call.device, step, stream, std::move(done));
          break;
      }
    } else {
      switch (method) {
        case Method::kPush:
          operation = client.Push(call.pushes, step, std::move(done));
          break;
        case Method::kPull:
          operation = client.Pull(call.pulls, step, std::move(done));
          break;
        case Method::kPushPull:
          operation = client.PushPull(call.pushes, call.pulls, step, std::move(done));
          break;
      }
    }
  }
  py::object handle = py::cast(OperationHandle(operation, state));
  state->DropHandle();  // never the last: the handle above holds the state
  // It may have ended already: AddDoneCallback then calls it at once.
  if (!callback.is_none()) handle.cast<OperationHandle&>().AddDoneCallback(handle, callback);
  return handle;
}

// A vector's values as a numpy array that owns them (no copy).
py::array_t<float> ToArray(std::vector<float> values) {
  auto* owned = new std::vector<float>(std::move(values));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>({owned->size()}, {sizeof(float)}, owned->data(), free_when_done);
}

std::vector<float> FromArray(py::handle array, const char* what) {
  HostArray host = ValueOrRaise(HostArrayOf(array, /*writable=*/false));
  if (host.dtype != DType::kFp32) {
    RaiseIfError(absl::InvalidArgumentError(absl::StrCat(what, " must be float32")));
  }
  const float* data = static_cast<const float*>(host.data);
  return std::vector<float>(data, data + host.elements);
}

SyncMode ParseSync(const std::string& sync) {
  if (sync == "bsp") return SyncMode::kBsp;
  if (sync == "asp") return SyncMode::kAsp;
  RaiseIfError(
      absl::InvalidArgumentError(absl::StrCat("sync is 'bsp' or 'asp', not '", sync, "'")));
  return SyncMode::kBsp;
}

TensorId Declare(PyClient& self, const std::string& name, py::object num_elements,
                 py::object initial_values, const std::string& optimizer,
                 const std::map<std::string, double>& params, const std::string& sync,
                 std::optional<Initializer> init, const std::string& push_dtype,
                 const std::string& pull_dtype) {
  TensorSpec spec;
  spec.name = name;
  spec.sync = ParseSync(sync);
  spec.optimizer = {optimizer, params};
  if (init.has_value()) spec.init = *init;
  spec.push_dtype = ValueOrRaise(ParseDType(push_dtype));
  spec.pull_dtype = ValueOrRaise(ParseDType(pull_dtype));
  HostArray values;
  if (!initial_values.is_none()) {
    values = ValueOrRaise(HostArrayOf(initial_values, /*writable=*/false));
    if (values.dtype != DType::kFp32) {
      RaiseIfError(absl::InvalidArgumentError(absl::StrCat(
          "initial_values of tensor '", name, "' must be float32, not ", DTypeName(values.dtype))));
    }
  }
  if (num_elements.is_none()) {
    if (initial_values.is_none()) {
      RaiseIfError(absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': give num_elements, initial_values, or both")));
    }
    spec.num_elements = values.elements;
  } else {
    spec.num_elements = num_elements.cast<uint64_t>();
  }
  Client& client = self.client();
  absl::StatusOr<TensorId> id;
  {
    py::gil_scoped_release release;
    id = client.Declare(
        spec, absl::Span<const float>(static_cast<const float*>(values.data), values.elements));
  }
  const TensorId declared = ValueOrRaise(std::move(id));
  self.Declared(declared, spec.num_elements);
  return declared;
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<PyClient>(m, "Client", R"doc(
A worker's connections to the shards of a job (the C++ hetps::Client).

    client = hetps.Client(hetps.ClientOptions(servers=[...], rank=0, world_size=2))
    w = client.declare("w", initial_values=numpy.zeros(1000, numpy.float32), optimizer="adam")
    client.push_pull(w, gradient, weights, step).wait()

Arrays are torch CPU tensors or numpy arrays, contiguous, of float32, bfloat16 (torch) or
float16; they are used in place, never copied, and kept alive until their operation ends.
GPU arrays (torch CUDA tensors, or anything with __cuda_array_interface__: contiguous float32)
go through the device client of a build with CUDA: staged through pinned memory, ordered after
the work queued on the array's stream (torch: the current stream), and later work on that
stream waits, on the GPU, for the pulled weights. One call moves host or GPU arrays, not both.
A client may be used from several threads. Use it as a context manager, or call shutdown().)doc")
      .def(py::init<const ClientOptions&>(), py::arg("options"),
           "Connects to every shard (waiting up to options.connect_timeout); raises hetps.Error "
           "(UNAVAILABLE, DEADLINE_EXCEEDED, FAILED_PRECONDITION, UNAUTHENTICATED...).")
      .def("declare", &Declare, py::arg("name"), py::arg("num_elements") = py::none(),
           py::kw_only(), py::arg("initial_values") = py::none(), py::arg("optimizer") = "sgd",
           py::arg("params") = std::map<std::string, double>(), py::arg("sync") = "bsp",
           py::arg("init") = std::nullopt, py::arg("push_dtype") = "fp32",
           py::arg("pull_dtype") = "fp32", R"doc(
Declares a tensor on the shards and returns its id. Every worker declares the same tensors;
the first declaration's initial_values (float32) are kept. optimizer: "sgd", "adam", "adamw",
"adagrad", "rmsprop" or "sum", with params in torch.optim's names (lr, momentum, beta1, beta2,
eps, weight_decay, nesterov, amsgrad... booleans as 0 or 1); sync: "bsp" or "asp";
push_dtype / pull_dtype: how values travel ("fp32", "bf16", "fp16").)doc")
      .def_property_readonly(
          "options", [](PyClient& self) { return self.client().options(); },
          "The options the client was created with (a copy).")
      .def_property_readonly(
          "metrics_address", [](PyClient& self) { return self.client().metrics_address(); },
          "Where the worker's /metrics page is served (\"host:port\", with "
          "ClientOptions.metrics_port); empty when it is not.")
      .def_property_readonly(
          "resume_step", [](PyClient& self) { return self.client().ResumeStep(); },
          "The step to go on from: the step of the checkpoint the shards restored (ps-server "
          "--restore), 0 for shards that started empty.")
      .def(
          "partitions",
          [](PyClient& self, TensorId tensor) {
            return ValueOrRaise(self.client().Partitions(tensor));
          },
          py::arg("tensor"), "How a declared tensor is cut into partitions.")
      .def(
          "push",
          [](PyClient& self, py::object tensors, py::object gradients, uint64_t step,
             py::object callback) {
            return StartCall(self, Method::kPush, tensors, gradients, py::none(), step, callback);
          },
          py::arg("tensors"), py::arg("gradients"), py::arg("step"),
          py::arg("callback") = py::none(),
          "Pushes the gradients of `step` (one tensor id and array, or lists of both). Returns "
          "an Operation.")
      .def(
          "pull",
          [](PyClient& self, py::object tensors, py::object out, uint64_t min_version,
             py::object callback) {
            return StartCall(self, Method::kPull, tensors, py::none(), out, min_version, callback);
          },
          py::arg("tensors"), py::arg("out"), py::arg("min_version") = 0,
          py::arg("callback") = py::none(),
          "Pulls weights of at least `min_version` into `out` (written in place). Returns an "
          "Operation.")
      .def(
          "push_pull",
          [](PyClient& self, py::object tensors, py::object gradients, py::object out,
             uint64_t step, py::object callback) {
            return StartCall(self, Method::kPushPull, tensors, gradients, out, step, callback);
          },
          py::arg("tensors"), py::arg("gradients"), py::arg("out"), py::arg("step"),
          py::arg("callback") = py::none(),
          "Pushes the gradients of `step` and pulls the weights after it (BSP: version step + 1) "
          "into `out`. Returns an Operation.")
      .def(
          "set_hyperparameters",
          [](PyClient& self, TensorId tensor, uint64_t from_step,
             const std::map<std::string, double>& changes) {
            Client& client = self.client();
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client.SetHyperparameters(tensor, from_step, changes);
            }
            RaiseIfError(status);
          },
          py::arg("tensor"), py::arg("from_step"), py::arg("changes"),
          "Changes optimizer hyperparameters (e.g. {'lr': 0.01}) for the updates from "
          "`from_step` on; call it before any worker pushes that step.")
      .def(
          "read_state",
          [](PyClient& self, TensorId tensor) {
            Client& client = self.client();
            absl::StatusOr<TensorState> state;
            {
              py::gil_scoped_release release;
              state = client.ReadState(tensor);
            }
            TensorState read = ValueOrRaise(std::move(state));
            py::list slots;
            for (std::vector<float>& slot : read.slots) slots.append(ToArray(std::move(slot)));
            return py::make_tuple(read.version, ToArray(std::move(read.weights)), slots);
          },
          py::arg("tensor"), R"doc(
Reads a tensor's state from the shards, between steps: (version, weights, slots), numpy float32
arrays; slots are the rule's state (adam: exp_avg, exp_avg_sq[, max_exp_avg_sq]; sgd with
momentum: momentum_buffer; adagrad: sum; rmsprop: square_avg[, grad_avg][, momentum_buffer]).)doc")
      .def(
          "write_state",
          [](PyClient& self, TensorId tensor, uint64_t version, py::handle weights,
             py::sequence slots) {
            TensorState state;
            state.version = version;
            state.weights = FromArray(weights, "weights");
            for (py::handle slot : slots) state.slots.push_back(FromArray(slot, "a state slot"));
            Client& client = self.client();
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client.WriteState(tensor, state);
            }
            RaiseIfError(status);
          },
          py::arg("tensor"), py::arg("version"), py::arg("weights"), py::arg("slots"),
          "Replaces a tensor's weights, optimizer state and version on the shards (restoring a "
          "checkpoint); only while no worker has pushed a step not yet applied.")
      .def(
          "checkpoint",
          [](PyClient& self, uint64_t step) {
            Client& client = self.client();
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client.Checkpoint(step);
            }
            RaiseIfError(status);
          },
          py::arg("step"),
          "Checkpoints the BSP tensors at version `step` on every shard (started with "
          "--checkpoint_dir) without stopping the job; returns once the checkpoint is committed. "
          "Call it with the step about to be pushed, or a later one.")
      .def(
          "barrier",
          [](PyClient& self) {
            Client& client = self.client();
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client.Barrier();
            }
            RaiseIfError(status);
          },
          "Returns when every worker of the job has called barrier() as often as this one.")
      .def(
          "drop",
          [](PyClient& self, const std::vector<std::string>& names) {
            Client& client = self.client();
            absl::StatusOr<DropResult> dropped;
            {
              py::gil_scoped_release release;
              dropped = client.Drop(names);
            }
            return ValueOrRaise(std::move(dropped));
          },
          py::arg("names"),
          "Removes the named tensors from every shard (weights, optimizer state, backup "
          "copies), so that long-lived shards serve job after job. Any worker's calls on them "
          "raise NOT_FOUND from then on; the names may be declared again. A name no shard "
          "holds is not an error.")
      .def(
          "drop_all",
          [](PyClient& self) {
            Client& client = self.client();
            absl::StatusOr<DropResult> dropped;
            {
              py::gil_scoped_release release;
              dropped = client.DropAll();
            }
            return ValueOrRaise(std::move(dropped));
          },
          "Drops every tensor of the job from every shard, whoever declared it.")
      .def(
          "stop_shard",
          [](PyClient& self, uint32_t shard) {
            Client& client = self.client();
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = client.StopShard(shard);
            }
            RaiseIfError(status);
          },
          py::arg("shard"),
          "Operators' clients (ClientOptions(admin=True)) only: asks a shard to stop as on "
          "SIGTERM (checkpoint, its backup takes over, exit).")
      .def(
          "stats",
          [](PyClient& self) {
            Client& client = self.client();
            absl::StatusOr<std::vector<ShardStats>> stats;
            {
              py::gil_scoped_release release;
              stats = client.Stats();
            }
            return ValueOrRaise(std::move(stats));
          },
          "Figures of every shard, in shard-index order.")
      .def("shutdown", &PyClient::Close,
           "Ends outstanding operations (CANCELLED) and closes the connections; later calls "
           "raise FAILED_PRECONDITION. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.Close(); });
}

}  // namespace hetps::python
