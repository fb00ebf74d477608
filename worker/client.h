// The hetps worker client: what a training job embeds to push gradients to the shards and pull
// weights back.
//
//   hetps::ClientOptions options;
//   options.servers = {"127.0.0.1:7000", "127.0.0.1:7001"};
//   options.rank = rank;
//   options.world_size = 2;
//   absl::StatusOr<std::unique_ptr<hetps::Client>> client = hetps::Client::Create(options);
//
//   absl::StatusOr<hetps::TensorId> w = (*client)->Declare(spec);
//   for (uint64_t step = 0; step < steps; ++step) {
//     ComputeGradient(weights, gradient);
//     absl::Status s = (*client)->PushPull(*w, gradient, weights, step).Wait();
//   }
//
// Push, Pull and PushPull are asynchronous: they return an Operation at once; Wait() on it, or
// pass a callback. Many tensors may go in one call: their partitions bound for the same shard
// are packed together. The memory passed in must stay valid and unchanged until the operation
// is done. Every message has a deadline (ClientOptions::call_timeout), so every operation ends.
//
// Thread safety: a Client may be used from several threads at once.
#ifndef HETPS_WORKER_CLIENT_H_
#define HETPS_WORKER_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/options.h"

namespace hetps {

// Identifies a declared tensor (derived from its name).
using TensorId = uint64_t;

// Runs once when an operation is done: on a client thread, or inside Operation::Wait() on the
// waiting thread, never inside the Push, Pull or PushPull that started the operation (not even
// when it fails at once), so the caller may hold a lock there that the callback takes. It must
// not block: it holds up other operations' completions.
using DoneCallback = absl::AnyInvocable<void(const absl::Status&)>;

namespace internal {
class OperationState;
}  // namespace internal

// The handle of an asynchronous push or pull. Copyable; all copies refer to one operation.
class Operation {
 public:
  // Blocks until the operation is done and returns its outcome: OK, or the first error of its
  // messages. Returns only after no message of it can touch the caller's memory any more.
  absl::Status Wait() const;
  bool done() const;

  explicit Operation(std::shared_ptr<internal::OperationState> state);

 private:
  std::shared_ptr<internal::OperationState> state_;
};

// Values in host memory: fp32, or bf16 / fp16 held as 16-bit patterns. A span or vector of
// floats converts to one implicitly.
class ConstTensorView {
 public:
  ConstTensorView() = default;
  ConstTensorView(absl::Span<const float> values)  // NOLINT: implicit by design
      : data_(values.data()), size_(values.size()), dtype_(DType::kFp32) {}
  template <
      typename Container,
      typename = std::enable_if_t<std::is_convertible_v<const Container&, absl::Span<const float>>>>
  ConstTensorView(const Container& values)  // NOLINT: implicit by design
      : ConstTensorView(absl::Span<const float>(values)) {}
  static ConstTensorView Bf16(absl::Span<const uint16_t> bits) {
    return ConstTensorView(bits.data(), bits.size(), DType::kBf16);
  }
  static ConstTensorView Fp16(absl::Span<const uint16_t> bits) {
    return ConstTensorView(bits.data(), bits.size(), DType::kFp16);
  }

  const void* data() const { return data_; }
  size_t size() const { return size_; }  // elements
  DType dtype() const { return dtype_; }

 private:
  ConstTensorView(const void* data, size_t size, DType dtype)
      : data_(data), size_(size), dtype_(dtype) {}
  const void* data_ = nullptr;
  size_t size_ = 0;
  DType dtype_ = DType::kFp32;
};

// Writable values in host memory, as ConstTensorView.
class TensorView {
 public:
  TensorView() = default;
  TensorView(absl::Span<float> values)  // NOLINT: implicit by design
      : data_(values.data()), size_(values.size()), dtype_(DType::kFp32) {}
  template <typename Container,
            typename = std::enable_if_t<std::is_convertible_v<Container&, absl::Span<float>>>>
  TensorView(Container& values)  // NOLINT: implicit by design
      : TensorView(absl::Span<float>(values)) {}
  static TensorView Bf16(absl::Span<uint16_t> bits) {
    return TensorView(bits.data(), bits.size(), DType::kBf16);
  }
  static TensorView Fp16(absl::Span<uint16_t> bits) {
    return TensorView(bits.data(), bits.size(), DType::kFp16);
  }

  void* data() const { return data_; }
  size_t size() const { return size_; }  // elements
  DType dtype() const { return dtype_; }

 private:
  TensorView(void* data, size_t size, DType dtype) : data_(data), size_(size), dtype_(dtype) {}
  void* data_ = nullptr;
  size_t size_ = 0;
  DType dtype_ = DType::kFp32;
};

// A run of a tensor's partitions: [first, first + count). The default is the whole tensor. A
// caller that moves a tensor piece by piece (staging through device memory) pushes or pulls
// runs of partitions; Client::Partitions() says where each one begins.
struct PartitionSpan {
  static constexpr uint32_t kAll = ~uint32_t{0};
  uint32_t first = 0;
  uint32_t count = kAll;  // kAll: through the last partition
};

// Where one partition of a declared tensor lies.
struct TensorPartition {
  uint64_t begin = 0;  // first element
  uint64_t size = 0;   // elements
  uint32_t shard = 0;  // the shard that holds it
};

struct PushItem {
  TensorId tensor = 0;
  // The tensor's num_elements values, or, with `partitions`, the values of those partitions.
  ConstTensorView gradient;
  PartitionSpan partitions;
};

struct PullItem {
  TensorId tensor = 0;
  // Receives the tensor's num_elements values, or those of `partitions`.
  TensorView weights;
  PartitionSpan partitions;
};

// A declared tensor's whole state on the shards: what an optimizer's checkpoint holds.
struct TensorState {
  uint64_t version = 0;        // steps applied
  std::vector<float> weights;  // num_elements values
  // The rule's state, state-slot by state-slot, num_elements values each: sgd with momentum:
  // the momentum buffer; adam / adamw: the first and second moments (and with amsgrad the
  // largest second moment); adagrad: the sum of squares; rmsprop: the square average (then the
  // gradient average when centered, and the momentum buffer with momentum). None for "sum".
  std::vector<std::vector<float>> slots;
};

// What a drop removed.
struct DropResult {
  uint32_t tensors = 0;         // tensors that some shard held (the most any one held)
  uint64_t released_bytes = 0;  // tensor memory given back, summed over the shards
};

class Client {
 public:
  // Connects to every shard and checks that they agree with `options` (protocol version, job,
  // world size, shard order). InvalidArgument for bad options; FailedPrecondition when a shard
  // disagrees; Unavailable / DeadlineExceeded when a shard cannot be reached in
  // options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  virtual ~Client() = default;

  // Declares a tensor on the shards (every worker declares the same tensors; declaring again
  // with the same spec is fine, with a different one is AlreadyExists). `initial_values`, if
  // not empty, holds num_elements values that replace spec.init; the first declaration's values
  // are the ones kept. Blocking.
  virtual absl::StatusOr<TensorId> Declare(const TensorSpec& spec,
                                           absl::Span<const float> initial_values = {}) = 0;

  // The options the client was created with.
  virtual const ClientOptions& options() const = 0;

  // How a declared tensor is cut into partitions (NotFound if this client did not declare it).
  virtual absl::StatusOr<std::vector<TensorPartition>> Partitions(TensorId tensor) = 0;

  // Pushes the gradients of `step` (BSP: computed from the weights of version `step`).
  //
  // A push that ends OK was applied exactly once, however often it was sent. Each client is one
  // run of its worker (a random id sent with every push), and a shard never answers OK for a
  // gradient it did not apply. A push that ends with one of these errors was not applied:
  //   Aborted             ASP: more than 64 later pushes of this worker to the same partition
  //                       overtook it, so the shard cannot tell it from a retry. Push the
  //                       gradient again (a new call, which gets a new sequence number) if it
  //                       must count, or drop it as ASP allows.
  //   FailedPrecondition  BSP: the step was already applied but not with this run's gradient.
  //                       The shards hold the state of an earlier run of the job (restart them
  //                       or use another job id), or this worker restarted behind the others
  //                       (pull, then go on from the partitions' version). Also: another
  //                       process took this worker's rank over (two processes with one rank).
  // Other partitions of the same call may have been applied; pushing the call again is safe.
  virtual Operation Push(absl::Span<const PushItem> gradients, uint64_t step,
                         DoneCallback done = nullptr) = 0;
  // Pulls weights of at least version `min_version`, waiting for it if needed.
  virtual Operation Pull(absl::Span<const PullItem> weights, uint64_t min_version = 0,
                         DoneCallback done = nullptr) = 0;
  // Pushes the gradients of `step` and pulls the weights after it: in BSP those of version
  // step + 1 (after every worker's push of that step), in ASP those right after this push.
  // `weights` must name the same tensors as `gradients`, in the same order.
  virtual Operation PushPull(absl::Span<const PushItem> gradients,
                             absl::Span<const PullItem> weights, uint64_t step,
                             DoneCallback done = nullptr) = 0;

  // Changes hyperparameters of a tensor's optimizer (those named in `changes`; the rest stay)
  // for the updates from `from_step` on: a learning-rate schedule. Every shard switches at that
  // same step. Call it before any worker pushes step `from_step` (FailedPrecondition if a shard
  // already applied it); InvalidArgument for bad values or for a change of the optimizer's
  // state layout (momentum, centered or amsgrad turned on or off). Blocking.
  virtual absl::Status SetHyperparameters(TensorId tensor, uint64_t from_step,
                                          const std::map<std::string, double>& changes) = 0;

  // Reads a tensor's weights, optimizer state and version from every shard that holds part of
  // it. Call it between steps (e.g. after Wait() on this worker's last push-pull):
  // FailedPrecondition if its partitions are at different versions (a step was being applied
  // meanwhile). Blocking.
  virtual absl::StatusOr<TensorState> ReadState(TensorId tensor) = 0;
  // The same from the backup copies (shards started with --replicas 2), which hold exactly
  // what the partitions' own shards do once a step is acknowledged: a check that the replicas
  // agree. FailedPrecondition without replication.
  virtual absl::StatusOr<TensorState> ReadBackupState(TensorId tensor) = 0;
  // Replaces a tensor's weights, optimizer state and version on the shards (restoring a
  // checkpoint): the next step to push is state.version. Only while no worker has pushed a
  // step the shards have not applied (e.g. one worker writes before training goes on, then
  // every worker meets at a Barrier): FailedPrecondition otherwise. InvalidArgument if the
  // sizes or the number of slots are not the tensor's. Blocking.
  virtual absl::Status WriteState(TensorId tensor, const TensorState& state) = 0;

  // Returns when every worker of the job has called Barrier as many times as this one. A
  // client created after the job passed some barriers (a restarted worker) joins the next one.
  virtual absl::Status Barrier() = 0;

  // The step to go on from: the step of the checkpoint the shards restored (ps-server
  // --restore), 0 for shards that started empty. A job that starts again after its shards were
  // restored pulls the weights of this version and pushes this step next, and can restart its
  // data loader there. Known once the client is created (the shards say it in their hello).
  virtual uint64_t ResumeStep() const = 0;

  // Checkpoints the BSP tensors at version `step` (the weights after `step` updates) on every
  // shard, each shard started with --checkpoint_dir, without stopping the job: each partition
  // copies itself when it reaches that version. Call it with the step the job is about to push
  // (between steps), or a later one; one worker's call is enough. Returns once every shard's
  // part is durable and the checkpoint is committed. FailedPrecondition for a step some
  // partition has passed, or for shards without --checkpoint_dir; DeadlineExceeded (after
  // call_timeout) if the workers do not reach the step. Blocking.
  virtual absl::Status Checkpoint(uint64_t step) = 0;

  // Removes tensors from every shard (weights, optimizer state and backup copies), so that a
  // long-lived pool of shards serves job after job: call it when the job is done with them (one
  // worker's call is enough), or from an operator's client (ClientOptions::admin). Any worker's
  // requests on them fail with NotFound from then on, including those in flight or waiting;
  // the names may be declared again afterwards, with another spec. A name the shards do not
  // hold is not an error. Unavailable if a shard cannot be reached (what the others dropped
  // stays dropped; call it again). Blocking.
  virtual absl::StatusOr<DropResult> Drop(absl::Span<const std::string> names) = 0;
  // Drops every tensor of the job on every shard, whoever declared it.
  virtual absl::StatusOr<DropResult> DropAll() = 0;

  // Operators' tools (ClientOptions::admin) only: asks shard `shard` to stop as on SIGTERM
  // (checkpoint if it keeps them, its etcd lease ended so that a backup takes over at once,
  // exit). PermissionDenied from a worker's client; OutOfRange for a shard index not in the
  // list. Returns once the shard has taken the request, not when its process has ended.
  virtual absl::Status StopShard(uint32_t shard) = 0;

  // Figures of every shard, in shard-index order.
  virtual absl::StatusOr<std::vector<ShardStats>> Stats() = 0;
  // Where ClientOptions::metrics_port serves ("host:port", the port chosen); empty: nowhere.
  virtual std::string metrics_address() const = 0;

  // Ends outstanding operations with Cancelled and closes the connections; later calls fail
  // with FailedPrecondition. Idempotent. The destructor calls it.
  virtual void Shutdown() = 0;

  // One-tensor forms of the calls above.
  Operation Push(TensorId tensor, ConstTensorView gradient, uint64_t step,
                 DoneCallback done = nullptr) {
    const PushItem item{tensor, gradient, {}};
    return Push(absl::MakeConstSpan(&item, 1), step, std::move(done));
  }
  Operation Pull(TensorId tensor, TensorView weights, uint64_t min_version = 0,
                 DoneCallback done = nullptr) {
    const PullItem item{tensor, weights, {}};
    return Pull(absl::MakeConstSpan(&item, 1), min_version, std::move(done));
  }
  Operation PushPull(TensorId tensor, ConstTensorView gradient, TensorView weights, uint64_t step,
                     DoneCallback done = nullptr) {
    const PushItem push{tensor, gradient, {}};
    const PullItem pull{tensor, weights, {}};
    return PushPull(absl::MakeConstSpan(&push, 1), absl::MakeConstSpan(&pull, 1), step,
                    std::move(done));
  }
};

}  // namespace hetps

#endif  // HETPS_WORKER_CLIENT_H_
