// Shard: the request handler of one ps-server shard. It answers the control calls (hello,
// declare, barrier, stats) itself and hands the partitions of data calls (push, pull,
// push-pull) to the threads that own them.
//
// A request is checked whole before anything is applied: an unknown tensor, a partition out of
// range or owned by another shard, a wrong dtype or size, or a malformed header is answered with
// a specific error and changes nothing.
//
// Thread-safe: HandleRequest may be called from any number of transport threads.
#ifndef HETPS_SERVER_SHARD_H_
#define HETPS_SERVER_SHARD_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/task_thread.h"
#include "common/thread_pool.h"
#include "common/timer_queue.h"
#include "proto/ps.pb.h"
#include "server/barrier.h"
#include "server/checkpoint.h"
#include "server/etcd_client.h"
#include "server/lease_holder.h"
#include "server/metrics.h"
#include "server/pending_request.h"
#include "server/replicator.h"
#include "server/tensor_table.h"
#include "transport/transport.h"

namespace hetps::server {

struct ShardOptions {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint32_t num_workers = 1;
  std::string job_id = "hetps";
  // Owner threads that apply updates; partitions are spread over them.
  int threads = 1;
  // BSP: a push may be at most this many steps ahead of its partition's version.
  uint32_t max_pending_steps = 4;
  // Longest a pull or barrier waits, whatever deadline the caller sent.
  absl::Duration max_wait = absl::Minutes(10);
  // Reported to clients in Hello (the transport enforces it).
  size_t max_message_bytes = 64 << 20;
  // Declarations that would take the shard's tensor memory (weights, optimizer state and a
  // gradient buffer per partition) past this are refused with ResourceExhausted.
  uint64_t max_memory_bytes = ~uint64_t{0};
  // The job's shared secret; when set, only connections that present it are admitted.
  std::string auth_token;
  // Consistent checkpoints of the BSP tensors every `checkpoint_every` steps into
  // `checkpoint_dir` (server/checkpoint.h); 0 or empty: none.
  std::string checkpoint_dir;
  uint64_t checkpoint_every = 0;
  // Copies of each partition (1 or 2). With 2 (and etcd), the partitions placed on shard g (its
  // group) have copies on shards g and g + 1 (mod num_shards): one serves them and sends its
  // changes (server/replicator.h, over `peer_transport`) to the other, found in etcd. At the
  // start shard g serves; when it is gone, g + 1 takes over; when it comes back it catches up
  // and backs them up (and takes them over if g + 1 goes). Needs 2 shards or more. `servers`:
  // the addresses shards advertise (empty: the one each listens on).
  uint32_t replicas = 1;
  std::vector<std::string> servers;
  transport::Transport* peer_transport = nullptr;
  // etcd ("host:port") where the shard holds a lease and registers its address
  // (/hetps/<job>/shards/<index>), and finds its backup's; required with 2 replicas. A shard
  // whose lease can no longer be trusted acknowledges no update (server/lease_holder.h).
  std::string etcd;
  absl::Duration lease_ttl = absl::Seconds(2);
  // Time requests, updates and replication for the latency histograms of RenderMetrics (a
  // clock read or two per request; off when nobody scrapes them).
  bool time_requests = false;
};

// Which of a new tensor's partitions on a shard are to get their values copied over them
// rather than from the declaration's initializer: none; the backup copies (a rejoining shard's,
// from their snapshots); or all (a restore from a checkpoint). Those start as zeros, and the
// initializer's work (a pass over the memory; a random rule's draws too) is done only if
// something else comes first (Partition::Config::deferred_init).
enum class CopiedValues { kNone, kBackups, kAll };

class Shard final : public transport::RequestHandler {
 public:
  explicit Shard(const ShardOptions& options);
  ~Shard() override;

  // Takes the state of a checkpoint's part (LoadCheckpointPart): declares its tensors and
  // fills their partitions. Only before the shard serves any request (and before JoinCluster:
  // replicated, the backup then catches up with the restored state). DataLoss naming the file
  // if the part does not fit (a partition of another shard, sizes that do not match).
  absl::Status Restore(const CheckpointPartData& part);
  // The step the restored checkpoint was cut at (0: started empty).
  uint64_t resume_step() const { return resume_step_; }
  // The newest checkpoint step of which this shard's part is durable (0: none).
  uint64_t last_checkpoint() const;
  // Writes this shard's part of a checkpoint of the current state (SIGTERM), if every BSP
  // partition is at the same step (between steps) and some step was applied; waits for the
  // owner threads until `deadline`. FailedPrecondition in the middle of a step.
  absl::Status CheckpointNow(absl::Time deadline);

  // A connection is admitted on its greeting, the worker's HelloRequest: what Hello checks
  // (protocol version, job, world size, rank, shard order) holds for all its requests.
  absl::Status Admit(const transport::ConnectionInfo& connection) override;
  void HandleRequest(transport::Request request, transport::ReplyCallback reply) override;
  // Lets go of the pulls its requests left waiting.
  void Disconnected(uint64_t connection_id) override;

  // With ShardOptions::etcd (server/shard_membership.cc): takes a lease, before the shard
  // serves; then registers the address it listens on under it. Unavailable if etcd cannot be
  // reached.
  absl::Status JoinCluster();
  absl::Status Register(const std::string& address);

  // Answers waiting pulls and barriers with Unavailable and stops the owner threads; later
  // requests are answered Unavailable. Ends the etcd lease (the registration goes at once).
  // Idempotent.
  void Stop();

  hetps::v1::StatsResponse Stats() const;
  // An operator's client asked the shard to stop (METHOD_STOP): its process should stop it as
  // on SIGTERM.
  bool stop_requested() const { return stop_requested_.load(std::memory_order_acquire); }
  // Everything an operator watches, in Prometheus' text format (server/shard_metrics.cc).
  std::string RenderMetrics() const;
  // Whether the shard serves (readiness): not stopping, and with etcd, holding its lease and
  // no longer waiting to rejoin. Says why not.
  absl::Status CheckServing() const;

  // A hash of the shard's whole state: its tensors' declarations and every partition's
  // Partition::Digest, read on their owner threads. For tests (bad requests change nothing).
  uint64_t StateDigest();
  // Each partition's Partition::Digest, backups included (tests: a backup equals its primary).
  struct PartitionDigest {
    uint64_t tensor_key = 0;
    uint32_t partition = 0;
    bool backup = false;
    uint64_t digest = 0;
    auto operator<=>(const PartitionDigest&) const = default;
  };
  std::vector<PartitionDigest> PartitionDigests();

  // Who serves the partitions placed on a shard (its group) and who keeps complete copies of
  // them, as etcd's key /hetps/<job>/groups/<group> says ("epoch server backup lease
  // server_lease").
  struct GroupRecord {
    uint64_t epoch = 0;  // bumped by each takeover
    uint32_t server = 0;
    int64_t backup = -1;       // -1: none
    int64_t backup_lease = 0;  // the backup's etcd lease (its run); 0: named at the job's start
    // The server's lease when it claimed the group (its run): a server registered under
    // another lease has restarted since, and its memory holds nothing of the group. 0: not
    // recorded (a record of an older layout).
    int64_t server_lease = 0;
    int64_t mod_revision = 0;  // etcd's, of the key as read
  };

 private:
  // What a data request asks of each of its partitions.
  struct DataCall {
    bool push = false;
    bool pull = false;
    Partition::PushOrigin origin;  // push: who sent it; pull: the rank
    uint64_t min_version = 0;      // pull only
  };
  struct DataItem {
    Partition* partition = nullptr;
    TensorRef tensor;  // keeps `partition` alive
    hetps::v1::PartitionItem meta;
    FloatFormat format = FloatFormat::kFp32;       // of the item's bytes on the wire
    FloatFormat pull_format = FloatFormat::kFp32;  // of the weights sent back
    transport::Payload gradient;
    uint64_t wanted_version = 0;  // pulls: the version the weights must have
  };

  absl::StatusOr<transport::Response> Hello(const transport::Request& request) const;
  // What a connection's greeting and the Hello method both check.
  absl::Status CheckHello(const hetps::v1::HelloRequest& hello) const;
  void Declare(transport::Request request, transport::ReplyCallback reply);
  void DeclareNow(transport::Request request, transport::ReplyCallback reply);
  absl::StatusOr<hetps::v1::DeclareRequest> CheckDeclaration(
      const transport::Request& request) const;
  // A tensor's declaration (a worker's, or a snapshot's): name and key, dtype, sync mode,
  // initializer.
  static absl::Status CheckTensorDecl(const hetps::v1::TensorDecl& decl);
  // The partitions whose initial values a declaration carries, checked like a push.
  absl::StatusOr<std::vector<DataItem>> ResolveInitialValues(
      const Tensor& tensor, const hetps::v1::DeclareRequest& declare,
      const transport::Payload& values) const;
  void Barrier(transport::Request request, transport::ReplyCallback reply);
  void SetOptimizer(transport::Request request, transport::ReplyCallback reply);
  absl::StatusOr<transport::Response> Echo(transport::Request request);
  void Data(transport::Request request, transport::ReplyCallback reply);
  // A partition's weights and optimizer state (server/shard_state.cc).
  void ReadState(transport::Request request, transport::ReplyCallback reply);
  void WriteState(transport::Request request, transport::ReplyCallback reply);
  void Checkpoint(transport::Request request, transport::ReplyCallback reply);
  // (server/shard_lifecycle.cc) Removes tensors; DropNow on the declaring thread.
  void Drop(transport::Request request, transport::ReplyCallback reply);
  void DropNow(const std::vector<uint64_t>& keys, transport::ReplyCallback reply);
  // An operator's client asks the shard to stop (the process polls stop_requested()).
  void RequestStop(transport::Request request, transport::ReplyCallback reply);
  // Whether a tensor of that key was dropped here (a backup ignores its primary's changes to
  // it until the primary has dropped it too).
  bool WasDropped(uint64_t tensor_key) const;
  // Backup side of replication (server/shard_replica.cc): applies a batch of the primary's
  // changes, on a connection its primary opened.
  void Replicate(transport::Request request, transport::ReplyCallback reply);
  // A snapshot's tensor, declared here if it is not yet (with its hyperparameter schedule).
  absl::Status DeclareFromSnapshot(const hetps::v1::ReplicatedChange& snapshot);
  // A snapshot's rules from each version on, the first at 0.
  using Schedule = std::vector<std::pair<uint64_t, std::shared_ptr<const Optimizer>>>;
  static absl::StatusOr<Schedule> ScheduleOf(const hetps::v1::ReplicatedChange& snapshot);
  // Whether a greeting from shard `hello.peer_shard() - 1` may connect: another shard of the
  // same job, with replication on (what it may send is checked per batch: ServesGroup).
  absl::Status CheckPeerHello(const hetps::v1::HelloRequest& hello) const;
  // The etcd key of shard `index`'s registration, of who serves the partitions placed on shard
  // `group` (a GroupRecord), and of the run of shard `index`'s state that workers know.
  std::string MemberKey(uint32_t index) const;
  std::string GroupKey(uint32_t group) const;
  std::string StateRunKey(uint32_t index) const;
  // The etcd key naming the process that runs shard `index` now (its first lease): a new run
  // writes it before it ends the last run's lease, so that run never takes a lease again.
  std::string ProcessKey(uint32_t index) const;
  // Aborted unless this process is still the one that runs its shard index.
  absl::Status CheckStillThisShardsProcess() const;
  absl::StatusOr<GroupRecord> ReadGroup(uint32_t group) const;
  // Every group's record (nullopt: no key yet), in one read.
  absl::StatusOr<std::vector<std::optional<GroupRecord>>> ReadGroups() const;
  absl::StatusOr<GroupRecord> ParseGroupKey(uint32_t group, const EtcdClient::Value& value) const;
  // Writes `record` if the key is still at record.mod_revision (0: absent); whether it was.
  absl::StatusOr<bool> WriteGroup(uint32_t group, const GroupRecord& record);
  // Shard `index`'s registration (its address, under its lease). NotFound while it is not
  // registered (not started, or its lease ended); Unavailable if etcd cannot be asked.
  absl::StatusOr<EtcdClient::Value> FindMember(uint32_t index) const;
  // At start: claims this shard's own partitions in etcd, or finds them served elsewhere (then
  // it rejoins as their backup, and keeps the run of its state that workers know).
  absl::Status ClaimOwnGroup();
  // On the lease's thread, when etcd ended this shard's lease (unreachable for longer than it
  // lasts) and granted another: registers the shard again under `granted` and names it in the
  // records of the groups it serves, which nobody took over meanwhile. Aborted if one was
  // taken over: this process's partitions of it are stale, and it serves nothing again.
  absl::Status ReplaceLease(int64_t ended, int64_t granted);
  // A record of `group` that names this shard as its server under one of this process's
  // leases now names `granted`; Aborted if the group is served elsewhere while this shard
  // holds served partitions of it.
  absl::Status ReclaimGroup(uint32_t group, int64_t granted);
  // Whether `lease` is `granted` or one this process held before (the lease thread only).
  bool IsOwnLease(int64_t lease, int64_t granted) const;
  // Puts this shard's registration under `granted`, unless another process registered it.
  absl::Status RegisterAgain(int64_t granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(member_mu_);
  // With replication, on the watcher thread every quarter lease: for each group, takes it over
  // when its server is gone and this shard holds complete copies (TakeOver); for the groups
  // this shard serves, drops a backup that is gone or restarted (ForgetBackup) and copies the
  // partitions to a new one (CatchUp).
  void ManageGroups();
  void ManageGroup(uint32_t group, GroupRecord record);
  // Takes the record's server as the group's, unless the record names this shard from an
  // earlier run (false: the group is not this shard's to serve). A group this shard served
  // and another serves now is let go (LetGo).
  bool NoteServer(uint32_t group, const GroupRecord& record);
  // Another shard serves `group` since `epoch`: what waits here for its partitions is
  // answered Unavailable, which workers retry at the group's other copy.
  void LetGo(uint32_t group, uint64_t epoch);
  void WatchBackup(uint32_t group, const GroupRecord& record);
  void TakeOver(uint32_t group, const GroupRecord& record);
  void ForgetBackup(uint32_t group, uint32_t backup);
  // The backup applied the partition's batch: it may acknowledge what waited for it, once the
  // lease holds.
  void ConfirmReplicated(TensorRef tensor, Partition& partition);
  void CatchUp(uint32_t group, const GroupRecord& record);
  // (server/shard_catch_up.cc) Has the new backup declare `tensor` (its group's `partition`
  // names the group), ahead of its partitions' snapshots; waits until it has.
  absl::Status DeclareOnBackup(uint32_t backup, const Tensor& tensor, uint32_t partition);
  // Starts a partition's copy to its new backup and waits until the backup holds it; whether a
  // snapshot was sent (false: the partition was replicated already).
  absl::StatusOr<bool> CopyPartition(const Tensor& tensor, Partition& partition);
  // Waits (bounded, and not past Stop) for an outcome of shard_catch_up.cc; `what` names it.
  absl::Status AwaitOutcome(const std::shared_ptr<void>& awaited, const std::string& what);
  // From any thread: the backup of `group` failed (ForgetBackup follows on the watcher).
  void ReportBackupLost(uint32_t group, uint32_t backup);
  void ForEachPartitionOfGroup(uint32_t group,
                               absl::FunctionRef<void(const TensorRef&, Partition*)> f);
  // The replicator that sends to shard `backup` (made on first use), and its retirement once
  // that shard is gone (a new one connects afresh to its next run).
  Replicator* ReplicatorFor(uint32_t backup);
  void RetireReplicator(uint32_t backup);
  // Whether the group's server this shard last read from etcd is `peer` (read again if not).
  bool ServesGroup(uint32_t peer, uint32_t group);
  // OK while the shard may acknowledge updates: without etcd always; with etcd while its
  // lease is held. Unavailable, saying why, once it is not.
  absl::Status CheckLease() const;
  // The partitions of BSP tensors this shard serves (what its checkpoint parts hold), with
  // their tensor keys.
  std::vector<std::pair<TensorRef, Partition*>> CheckpointedPartitions() const;
  // The groups this shard keeps copies of, and so may serve and write checkpoint parts of: its
  // own and, replicated, the previous shard's.
  std::vector<uint32_t> CopiedGroups() const;
  // Fails a pull whose wait ran out, saying what it waited for (which workers' pushes): asks
  // each owner thread of its items, since only the owner may read a partition's steps.
  // (A PendingRequest::Explainer: `shard` is the Shard, `items` the request's DataItems.)
  static void ExplainWait(void* shard, std::shared_ptr<PendingRequest> request,
                          const std::shared_ptr<void>& items);

  absl::Status CheckRank(uint32_t rank) const;
  // The rank's current run is `incarnation`: Hello sets it, the first request after a shard
  // restart adopts it. FailedPrecondition for a run that another process took over.
  absl::Status CheckRun(uint32_t rank, uint64_t incarnation) const;
  // Whether a request was meant for this run of the shard's state (its shard_incarnation; 0:
  // not checked): DataLoss for a worker that knew the shard before it restarted without it.
  absl::Status CheckStateRun(uint64_t shard_incarnation) const;
  // DataLoss for a tensor marked lost (DeclareRequest.mark_lost).
  absl::Status CheckNotLost(const Tensor& tensor) const;
  // Decodes and checks a push, pull or push-pull request.
  absl::StatusOr<std::vector<DataItem>> ParseDataRequest(const transport::Request& request,
                                                         DataCall* call) const;
  // The tensor and this shard's partition that a request names: NotFound, OutOfRange, or
  // FailedPrecondition for a partition of another shard (or one this shard only backs up,
  // unless `backup` allows it).
  absl::StatusOr<std::pair<TensorRef, Partition*>> LocatePartition(uint64_t tensor_key,
                                                                   uint32_t partition,
                                                                   bool backup = false) const;
  // CheckRank(rank) and CheckStateRun(shard_incarnation), then LocatePartition.
  // With `backup`, the backup copy this shard keeps (FailedPrecondition if it keeps none).
  absl::StatusOr<std::pair<TensorRef, Partition*>> LocateForWorker(uint32_t rank,
                                                                   uint64_t shard_incarnation,
                                                                   uint64_t tensor_key,
                                                                   uint32_t partition,
                                                                   bool backup = false) const;
  // Looks up and checks a request's items; with `gradients`, also cuts the payload into them.
  absl::StatusOr<std::vector<DataItem>> ResolveItems(
      const google::protobuf::RepeatedPtrField<hetps::v1::PartitionItem>& items,
      const transport::Payload* gradients, bool backups = false) const;
  // Builds and publishes a tensor not declared yet; the bool: whether it was this one (another
  // worker's declaration may have come first).
  absl::StatusOr<std::pair<TensorRef, bool>> CreateTensor(
      const hetps::v1::TensorDecl& decl, CopiedValues copied = CopiedValues::kNone);
  absl::StatusOr<std::unique_ptr<Tensor>> BuildTensor(const hetps::v1::TensorDecl& decl,
                                                      const PartitionLayout& layout,
                                                      std::shared_ptr<Optimizer> optimizer,
                                                      CopiedValues copied);
  // The partitions of `shard` (this one's, or with `backup` those it keeps for its primary);
  // with `copied`, zeros, the initializer deferred.
  absl::Status BuildPartitions(Tensor& tensor, uint32_t shard, bool backup, bool copied);
  // Sends a primary partition's changes to its group's backup; Replicated() follows on its
  // owner thread.
  void SendToBackup(TensorRef tensor, Partition& partition, std::vector<ReplicatedChange> changes);
  // Sets aside the memory a new tensor's partitions on this shard will take, or says why not.
  absl::StatusOr<uint64_t> ReserveMemory(const hetps::v1::TensorDecl& decl,
                                         const PartitionLayout& layout, const Optimizer& optimizer);
  void ReleaseMemory(uint64_t bytes);
  // Every BSP tensor's declaration and hyperparameter schedule (a CheckpointWriter::Catalog).
  std::map<uint64_t, hetps::v1::TensorImage> CheckpointCatalog() const;

  // Constant after construction.
  const ShardOptions options_;
  // This run of the shard's state (HelloResponse.shard_incarnation): set before the shard
  // serves, by JoinCluster when it rejoins with its state kept by replicas.
  uint64_t incarnation_;
  const std::shared_ptr<ShardMetrics> metrics_;

  std::unique_ptr<TimerQueue> timers_;
  WaitingRequests waiting_;  // pulls that wait, by connection
  BarrierCoordinator barrier_;
  TensorTable table_;
  // Before the owners, which hand them their copies: they go after them. By group (the shard a
  // partition is placed on), for this shard's own and, replicated, the previous shard's, whose
  // part this shard writes while it serves them (after a takeover); empty without
  // --checkpoint_dir.
  std::vector<std::unique_ptr<CheckpointWriter>> checkpoints_;
  uint64_t resume_step_ = 0;  // set by Restore, before any request
  std::vector<std::unique_ptr<TaskThread>> owners_;
  // Creates declared tensors, off the transport threads.
  std::unique_ptr<TaskThread> declarer_;
  std::unique_ptr<ThreadPool> kernels_;  // spreads the updates of large partitions
  // Before the replicator, which asks it where the backup is.
  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<LeaseHolder> lease_;  // with etcd, from JoinCluster on
  // The lease thread only: the leases this process held before lease_->id().
  std::vector<int64_t> ended_leases_;
  int64_t first_lease_ = 0;  // set by JoinCluster: this run's name in ProcessKey
  // Where the others reach this shard, once registered in etcd (empty before).
  absl::Mutex member_mu_;
  std::string advertised_ ABSL_GUARDED_BY(member_mu_);
  // Replication needs etcd, a peer transport and two shards.
  const bool replication_on_;
  // By group: the shard that serves it, as last read from etcd; and, for the groups this shard
  // serves, the shard their changes go to (-1: none).
  const std::unique_ptr<std::atomic<uint32_t>[]> group_server_;
  const std::unique_ptr<std::atomic<int32_t>[]> replica_target_;
  // By group: the partitions of BSP tensors placed on it (counted for CopiedGroups()).
  const std::unique_ptr<std::atomic<size_t>[]> bsp_partitions_;
  // Created its own group's key in etcd: started with the job, so its copies are complete.
  std::atomic<bool> fresh_member_{false};
  // Watcher thread only, by group: the epoch in which its server was seen registered, and the
  // lease its backup was first seen with.
  std::vector<uint64_t> seen_epoch_;
  // By group: changes came from its server since the watcher last looked.
  const std::unique_ptr<std::atomic<bool>[]> changes_received_;
  std::vector<int64_t> backup_lease_seen_;
  // Watcher thread only, by group: when its server was first seen registered under another
  // lease than the group's record names (restarted), on the monotonic clock (lease times are).
  std::vector<std::optional<std::chrono::steady_clock::time_point>> server_restart_seen_;
  std::thread watcher_;
  absl::Mutex watch_mu_;
  bool watch_stopped_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::vector<std::pair<uint32_t, uint32_t>> lost_backups_ ABSL_GUARDED_BY(watch_mu_);
  // By backup shard; retired ones stay until the shard goes (their callbacks may still run).
  mutable absl::Mutex replicators_mu_;
  std::map<uint32_t, std::unique_ptr<Replicator>> replicators_ ABSL_GUARDED_BY(replicators_mu_);
  std::vector<std::unique_ptr<Replicator>> retired_replicators_ ABSL_GUARDED_BY(replicators_mu_);
  // Connections from other shards (peers), by the shard they said they are: the only ones that
  // may replicate; and workers' connections, by rank (metrics).
  mutable absl::Mutex connections_mu_;
  absl::flat_hash_map<uint64_t, uint32_t> peer_connections_ ABSL_GUARDED_BY(connections_mu_);
  absl::flat_hash_map<uint64_t, uint32_t> worker_connections_ ABSL_GUARDED_BY(connections_mu_);
  absl::flat_hash_set<uint64_t> admin_connections_ ABSL_GUARDED_BY(connections_mu_);
  std::atomic<bool> stop_requested_{false};
  std::atomic<size_t> next_owner_{0};
  // Zero bytes that echo replies are cut from, grown to the largest size asked for.
  absl::Mutex zeros_mu_;
  std::shared_ptr<const std::vector<uint8_t>> zeros_ ABSL_GUARDED_BY(zeros_mu_);
  std::atomic<bool> stopped_{false};
  std::atomic<bool> serving_{false};  // registered: listening, and in etcd if replicated
  // Each rank's current run (incarnation; 0: none seen yet).
  const std::unique_ptr<std::atomic<uint64_t>[]> runs_;
  mutable absl::Mutex dropped_mu_;
  absl::flat_hash_set<uint64_t> dropped_keys_ ABSL_GUARDED_BY(dropped_mu_);
  mutable absl::Mutex memory_mu_;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(memory_mu_) = 0;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_SHARD_H_
