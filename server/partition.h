// Partition: one partition of a tensor on this shard. It holds the fp32 master weights, the
// optimizer's state, its version (optimizer steps applied) and, in BSP, the gradients of the
// steps still being gathered.
//
// BSP: the W gradients of step s are kept until all have arrived, then summed in rank order and
// applied once; the version becomes s + 1. A gradient for a step already applied, or a second
// one from the same worker for the same step, is recognised as a retry and ignored.
// ASP: each push is applied on arrival; a push whose sequence number was already applied from
// that worker is recognised as a retry and ignored (see ReplayWindow).
//
// Pushes carry the worker's run (incarnation): a retry is only ever a push of the same run. A
// push is never answered OK unless it was applied, or was applied before:
//   ABORTED             ASP: the sequence is 64 or more below the newest of that run (too old
//                       to tell from a retry); nothing applied
//   FAILED_PRECONDITION BSP: a run's first push is for a step already applied (the state of an
//                       earlier run of the job, or a restarted worker behind the others)
//   INVALID_ARGUMENT    ASP: sequence 0, or one more than 2^32 ahead of the newest
//
// Gradients may arrive as fp32, bf16 or fp16 and weights may leave in any of them; a pull's
// 16-bit form is converted once per version and shared by every worker that asks for it.
//
// Replication (--replicas 2): a primary partition hands every change it applies to
// Config::replicate, one batch at a time, and counts a version as served only once the backup
// confirmed it (Replicated()): pulls wait for that, and pushes are acknowledged only then, so an
// acknowledged update is on two shards. A backup partition changes only by ApplyReplicated.
//
// Thread model: a partition belongs to one owner thread (owner()). Everything but version() and
// the constant accessors runs there, so the update needs no lock.
#ifndef HETPS_SERVER_PARTITION_H_
#define HETPS_SERVER_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "common/aligned_buffer.h"
#include "common/half.h"
#include "common/partitioning.h"
#include "common/prometheus.h"
#include "common/thread_pool.h"
#include "optimizer/optimizer.h"
#include "proto/checkpoint.pb.h"
#include "proto/ps.pb.h"
#include "server/pending_request.h"
#include "server/replay_window.h"
#include "transport/payload.h"

namespace hetps::server {

// A change a primary partition applied, for its backup (replication): what it was (kind,
// version, origin) and its fp32 bytes, which the payload keeps alive while they are sent.
struct ReplicatedChange {
  hetps::v1::ReplicatedChange meta;
  transport::Payload bytes;
};

struct PartitionCopy {
  uint32_t index = 0;
  uint64_t version = 0;
  uint64_t elements = 0;
  uint32_t state_slots = 0;
  // The weights are shared, not copied: the partition writes the next version into a fresh
  // buffer while this one is held (copy on write, as for pulls being sent).
  std::shared_ptr<const AlignedBuffer> weights;
  std::unique_ptr<float[]> state;               // each state slot, `elements` values each
  std::vector<hetps::v1::WorkerRunImage> runs;  // by rank
};

class Partition {
 public:
  struct Config {
    uint64_t tensor_key = 0;
    uint32_t index = 0;
    PartitionRange range;
    hetps::v1::SyncMode sync_mode = hetps::v1::SYNC_MODE_BSP;
    uint32_t num_workers = 1;
    std::shared_ptr<const Optimizer> optimizer;  // the rule the tensor was declared with
    size_t owner = 0;                            // index of the owner thread
    bool awaits_values = false;                  // initial values will be sent by the workers
    // Large partitions spread their updates over this pool (null: the owner does all).
    ThreadPool* kernel_pool = nullptr;
    // Where each update's time goes (null: not timed).
    LatencyHistogram* apply_duration = nullptr;
    // BSP: every `checkpoint_every` steps (0: never), right after the update that makes the
    // version a multiple of it, and at the versions CheckpointAt asks for, a copy of the
    // partition (Capture()) goes to `checkpoint` (null: no checkpoints), on the owner thread.
    // Every partition passes every version, so the copies of one version form a consistent
    // cut of the job without stopping it.
    uint64_t checkpoint_every = 0;
    std::function<void(PartitionCopy)> checkpoint;
    // Whether the periodic copy of a version is taken after all (the shard skips one while the
    // last is still being written); null: always.
    std::function<bool(uint64_t version)> periodic_wanted;
    // A primary with a backup: sends the backup `changes` (in order), then has Replicated()
    // run on the owner thread once it holds them. Null: no backup.
    std::function<void(Partition& self, std::vector<ReplicatedChange> changes)> replicate;
    // Whether a primary has a backup from the start; false: from StartReplica on.
    bool replicating = true;
    // This is the backup's copy of a partition another shard serves.
    bool backup = false;
    // A copy whose values are to be copied over it (a rejoining backup's snapshot, a restore):
    // it starts as zeros, and takes its initial values from this initializer (the tensor's,
    // which outlives the partition) only if something else comes first (a replicated change,
    // a takeover). Null: the weights given to Create are the initial ones.
    const hetps::v1::Initializer* deferred_init = nullptr;
  };

  // Updates of at least this many elements are spread over the kernel pool.
  static constexpr size_t kParallelElements = size_t{1} << 21;

  // Memory a partition takes besides its tensor data, for a job of `num_workers` (what a shard
  // reserves for it).
  static uint64_t BookkeepingBytes(uint32_t num_workers);

  // `weights` holds the initial values (range.size floats). ResourceExhausted if the
  // optimizer state cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Partition>> Create(const Config& config,
                                                           AlignedBuffer weights);

  // Any thread.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  size_t owner() const { return config_.owner; }
  uint32_t index() const { return config_.index; }
  uint64_t num_elements() const { return config_.range.size; }
  uint64_t parameter_bytes() const { return config_.range.size * sizeof(float); }
  uint64_t state_bytes() const { return state_.size_bytes(); }
  // Any thread.
  bool is_backup() const { return backup_.load(std::memory_order_acquire); }
  // Owner thread: whether changes go to a backup.
  bool replicated() const { return replicating_; }

  // Who sent a push.
  struct PushOrigin {
    uint32_t rank = 0;
    uint64_t incarnation = 0;  // the worker's run
    uint64_t step = 0;         // BSP
    uint64_t sequence = 0;     // ASP
  };

  // Owner thread only.
  //
  // Takes a worker's gradient (num_elements() values in `format`), which BSP keeps until its
  // step is applied: `gradient` must own what it refers to, as a received payload does.
  // ResourceExhausted if it cannot be held, or one of the refusals above; nothing changes then.
  // Returns the version a replicated partition must serve before the push is acknowledged
  // (AckWhenReplicated).
  // REQUIRES: origin.rank < num_workers.
  absl::StatusOr<uint64_t> Push(const PushOrigin& origin, FloatFormat format,
                                transport::Payload gradient);
  // Replicated: completes `slot` of `request` (no weights) once the backup holds every change
  // made so far and the partition serves `min_version`. Unreplicated: at once.
  void AckWhenReplicated(uint64_t min_version, std::shared_ptr<PendingRequest> request,
                         size_t slot);
  // The backup confirmed the batch last handed to Config::replicate.
  void Replicated();
  // The backup is gone (its shard's etcd lease ended): what it has not confirmed counts as
  // confirmed and nothing more is sent; the partition runs without a copy from now on.
  void DropBackup();
  // Backup: the primary is gone and this shard took its partitions over: this copy is served
  // from now on (without a copy of its own), and takes no more changes from the primary.
  void Promote();
  // Primary without a backup (a shard rejoined): sends a snapshot of the whole partition
  // (`meta` names the tensor's declaration and schedule) through Config::replicate, then every
  // change after it; `copied(true)` once the backup holds the snapshot (at once if it is
  // replicated already), `copied(false)` if the backup is dropped first or the partition
  // cannot start one (a backup, no Config::replicate). Acknowledgements wait for the backup from
  // now on: a step stalls for at most the copy of this one partition.
  void StartReplica(hetps::v1::ReplicatedChange meta, absl::AnyInvocable<void(bool)> copied);
  // Backup: takes a snapshot (CHANGE_KIND_SNAPSHOT) from its primary: weights, optimizer
  // state, version, runs, and `schedule` (the rule from each version on, the first at 0).
  // InvalidArgument if it does not fit this partition.
  absl::Status LoadSnapshot(
      const hetps::v1::ReplicatedChange& snapshot,
      std::vector<std::pair<uint64_t, std::shared_ptr<const Optimizer>>> schedule,
      const transport::Payload& bytes);
  // Backup: applies a change its primary made (a batch sent again is recognised and applied
  // once). FailedPrecondition for a step that does not follow this copy's version.
  absl::Status ApplyReplicated(const hetps::v1::ReplicatedChange& change, transport::Payload bytes);
  // Completes `slot` of `request` with the weights, in `format`, once version() >= min_version.
  void Pull(uint64_t min_version, FloatFormat format, std::shared_ptr<PendingRequest> request,
            size_t slot);
  // Uses `optimizer` for the updates from `from_version` on. FailedPrecondition if this
  // partition has already applied that update.
  // REQUIRES: optimizer->state_slots() is the declared rule's.
  absl::Status Reschedule(uint64_t from_version, std::shared_ptr<const Optimizer> optimizer);
  // Sets the initial weights (num_elements() floats) if the partition still awaits them and no
  // step has been applied; otherwise does nothing (the first values win).
  void SetInitialValues(const transport::Payload& values);
  // Why a pull of `min_version` still waits, e.g. "partition 3 is at version 5: step 5 waits
  // for worker(s) 1, 2"; empty if it need not wait.
  std::string DescribeWait(uint64_t min_version) const;
  // Fails every waiting pull with `status` (shutdown).
  void FailWaiters(const absl::Status& status);
  // The partition's tensor was dropped: waiting requests fail with `why`, and so does every
  // later push, pull, acknowledgement, state write or schedule change; replicated changes and
  // checkpoints of it are ignored from now on. Its memory goes with the last holder of its
  // tensor (TensorRef).
  void Retire(absl::Status why);
  bool retired() const { return !retired_.ok(); }

  WeightsSnapshot Snapshot(FloatFormat format);

  // What a checkpoint keeps of this partition: a copy of the weights and optimizer state, the
  // version and each worker's run (the exactly-once bookkeeping).
  PartitionCopy Capture() const;
  // Also hands a copy to Config::checkpoint at `version`: now if the partition is there, when
  // it gets there if below. FailedPrecondition once past it, or without Config::checkpoint.
  absl::Status CheckpointAt(uint64_t version);
  // Takes the state of a checkpoint's copy (at start, before any request; any thread then).
  // InvalidArgument if it does not fit this partition.
  absl::Status Restore(const hetps::v1::PartitionImage& image, absl::Span<const float> values);

  // The weights, then each optimizer state slot (num_elements() fp32 values each), at
  // `*version`.
  transport::Payload ReadState(uint64_t* version) const;
  // Replaces the weights and the state (as ReadState lays them out) and sets the version;
  // waiting pulls that the new version satisfies are answered. FailedPrecondition while a BSP
  // step is being gathered; InvalidArgument if `state` does not have the size ReadState's has.
  absl::Status WriteState(uint64_t version, const transport::Payload& state);

  // A hash of everything this partition holds: weights, optimizer state, version, the steps
  // being gathered and each worker's run (tests: a refused request changes none of it).
  uint64_t Digest() const;

 private:
  // A gradient kept until it is applied: the received bytes themselves when they are one
  // aligned piece (16-bit ones are widened as they are applied), otherwise an fp32 copy.
  struct HeldGradient {
    transport::Payload payload;
    AlignedBuffer copy;
    // Contiguous fp32 values; null while `payload` holds 16-bit or scattered ones (the update
    // reads those as it goes).
    const float* data = nullptr;
    FloatFormat format = FloatFormat::kFp32;  // of `payload`
    bool held = false;
  };
  struct Step {
    std::vector<HeldGradient> gradients;  // by rank
    uint32_t received = 0;
  };
  // What this partition knows of one worker's current run.
  struct WorkerRun {
    uint64_t incarnation = 0;
    ReplayWindow applied;  // ASP
  };
  struct Waiter {
    uint64_t min_version;
    FloatFormat format;
    std::shared_ptr<PendingRequest> request;
    size_t slot;
    uint64_t min_replicated = 0;  // changes the backup must hold first
    bool ack_only = false;        // completes without weights (a push's acknowledgement)
  };
  // The weights in a 16-bit format, converted for one version.
  struct WireCopy {
    uint64_t version = 0;
    std::shared_ptr<uint16_t[]> values;
  };

  Partition(const Config& config, AlignedBuffer weights, AlignedBuffer state);

  absl::StatusOr<uint64_t> PushAsp(const PushOrigin& origin, FloatFormat format,
                                   transport::Payload gradient);
  absl::StatusOr<uint64_t> PushBsp(const PushOrigin& origin, FloatFormat format,
                                   transport::Payload gradient);
  absl::StatusOr<HeldGradient> Hold(FloatFormat format, transport::Payload gradient);
  // Gives a held gradient its fp32 values (a copy of 16-bit or scattered bytes).
  absl::Status Widen(HeldGradient& held);
  void Release(HeldGradient& gradient);
  // Runs the optimizer on the gradients (summed in the order given; the sum goes to
  // `gradient_sum_out` too if given) and bumps the version. Writes the new weights' 16-bit copy
  // in the same pass when the last pull took one.
  void Apply(absl::Span<const HeldGradient> gradients, float* gradient_sum_out = nullptr);
  // The buffer for the 16-bit copy of version `version` in `format`: the current one when no
  // pull still sends it, else a fresh one.
  uint16_t* PrepareWireCopy(FloatFormat format, uint64_t version);
  // The fp32 values a held gradient points to, as a payload that keeps them (the held
  // gradient gives up its copy).
  transport::Payload KeepValues(HeldGradient& held);
  // Primary: queues a change for the backup and sends it unless a batch is out.
  void Replicate(hetps::v1::ReplicatedChange meta, transport::Payload bytes);
  void SendToBackup();
  // The version pulls are answered at: what the backup confirmed, or version() unreplicated.
  uint64_t served_version() const { return replicated() ? replicated_version_ : version(); }
  const Optimizer& OptimizerForNextStep();
  // WriteState and LoadSnapshot: the weights (into a buffer of their own while a pull still
  // sends the old ones) and each state slot, straight from `state` laid out as ReadState's.
  // REQUIRES: state.size() is ReadState's.
  absl::Status CopyStateFrom(const transport::Payload& state);
  // Draws the deferred initial values into the weights, if nothing has overwritten them yet.
  void TakeDeferredValues();
  // The weights as ReadState and Digest report them: those held, or while they are deferred
  // the initializer's, drawn into `scratch`.
  const float* ReportedWeights(std::vector<float>& scratch) const;
  // Restore and LoadSnapshot: each worker's run (by rank) and the version, as copied.
  void TakeRunsAndVersion(const google::protobuf::RepeatedPtrField<hetps::v1::WorkerRunImage>& runs,
                          uint64_t version);
  void ApplyCompleteSteps();
  void CheckpointIfDue();
  void WakeWaiters();

  const Config config_;
  absl::Status retired_;  // OK until Retire
  std::atomic<bool> backup_;
  bool replicating_;
  // Config::deferred_init until the weights are overwritten or drawn (TakeDeferredValues);
  // meanwhile the weights hold zeros, and ReadState and Digest report the initializer's values.
  const hetps::v1::Initializer* deferred_init_;
  std::shared_ptr<AlignedBuffer> weights_;
  // Checkpointed partitions: the weights buffer the last copy on write left (a checkpoint may
  // still be writing it), reused by the next one.
  std::shared_ptr<AlignedBuffer> spare_weights_;
  AlignedBuffer state_;
  std::vector<float*> state_slots_;
  std::atomic<uint64_t> version_{0};
  bool awaits_values_;
  // (first version, rule), ascending; the first entry is the declared rule at version 0.
  std::vector<std::pair<uint64_t, std::shared_ptr<const Optimizer>>> schedule_;
  absl::flat_hash_map<uint64_t, Step> steps_;  // BSP steps being gathered, by step
  // The gradient list of the last applied step, cleared, for the next step to take over (a
  // step's list would otherwise be allocated and freed every step).
  std::vector<HeldGradient> spare_gradients_;
  std::vector<WorkerRun> runs_;               // by rank
  std::vector<AlignedBuffer> spare_buffers_;  // reused gradient copies
  std::vector<Waiter> waiters_;
  WireCopy bf16_, fp16_;
  // The 16-bit format the last pull took (kFp32: none), which Apply writes ahead.
  FloatFormat wire_format_ = FloatFormat::kFp32;
  std::vector<uint64_t> checkpoint_at_;  // versions CheckpointAt asked for, not reached yet
  uint64_t captured_ = ~uint64_t{0};     // the version last handed to Config::checkpoint
  // Replication (primary): changes made, those the backup confirmed, and the version then;
  // changes not sent yet; whether a batch is out, and what it brings the counts to.
  uint64_t changes_made_ = 0;
  uint64_t changes_replicated_ = 0;
  uint64_t replicated_version_ = 0;
  std::vector<ReplicatedChange> unsent_;
  bool batch_out_ = false;
  uint64_t batch_changes_ = 0, batch_version_ = 0;
  std::vector<uint64_t> runs_sent_;  // by rank: the run the backup last heard of
  // StartReplica: told once the backup holds the snapshot (change number copied_at_).
  absl::AnyInvocable<void(bool)> copied_;
  uint64_t copied_at_ = 0;
  std::shared_ptr<AlignedBuffer> spare_sum_;  // reused for the next step's summed gradient
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_PARTITION_H_
