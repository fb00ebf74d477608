// Replicator: a primary shard's link to its backup shard (--replicas 2). Partitions hand it
// the changes they applied, one batch per partition at a time; it sends each batch to the
// backup as a METHOD_REPLICATE call and reports back once the backup applied it.
//
// The connection is opened on first use, on the replicator's own thread (connecting blocks).
// A batch the backup cannot take (unreachable, shutting down, or not ready: e.g. a tensor it
// has not seen declared yet) is sent again after a pause that grows to a second; the
// partition's workers meanwhile wait within their own deadlines, and their requests then say
// that they wait for the backup. Nothing is dropped: a batch ends with `done` exactly once, OK
// once applied, Cancelled when the shard stops, NotFound when `find_backup` says the backup is
// gone (its etcd registration ended) or the backup cannot take it (it lost its copies).
//
// Thread-safe.
#ifndef HETPS_SERVER_REPLICATOR_H_
#define HETPS_SERVER_REPLICATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/prometheus.h"
#include "common/task_thread.h"
#include "common/timer_queue.h"
#include "server/partition.h"
#include "transport/transport.h"

namespace hetps::server {

struct ReplicatorOptions {
  uint32_t shard_index = 0;  // the primary's
  uint32_t backup_index = 0;
  uint32_t num_shards = 1;
  std::string job_id;
  std::string auth_token;
  // The backup's address (empty until SetBackupAddress), unless `find_backup` is given: then
  // that finds it (etcd's registration) each time the replicator connects.
  std::string backup_address;
  std::function<absl::StatusOr<std::string>()> find_backup;
  // Longest one attempt waits to connect, and for the backup's answer.
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration attempt_timeout = absl::Seconds(30);
  // Where the time from Send until the backup applied a batch goes (null: not timed).
  LatencyHistogram* round_trips = nullptr;
};

class Replicator {
 public:
  // `transport` and `timers` must outlive the replicator.
  Replicator(const ReplicatorOptions& options, transport::Transport* transport, TimerQueue* timers);
  ~Replicator();  // Stop()

  // The backup's address, if none was given (a worker's Hello lists the shards); the first
  // one set stays.
  void SetBackupAddress(const std::string& address);
  // Sends `changes` to the backup and runs `done` once it has applied them.
  void Send(std::vector<ReplicatedChange> changes, absl::AnyInvocable<void(absl::Status)> done);
  // Ends every batch not yet applied with Cancelled, and refuses later ones. Idempotent.
  void Stop();

  // Batches sent again after a failed attempt (tests, stats).
  uint64_t resends() const;
  // Batches handed to Send and not yet ended: how far the backup lags.
  int64_t in_flight() const;

 private:
  struct Batch;
  // Connects if need be (replicator thread only), then calls.
  void Attempt(std::shared_ptr<Batch> batch);
  void Call(transport::Connection& connection, std::shared_ptr<Batch> batch);
  void Retry(std::shared_ptr<Batch> batch, const absl::Status& why);
  void Finish(Batch& batch, absl::Status status);
  // Ends `batch` with NotFound `why`: the backup is gone or lost its copies (said once).
  void GiveUp(Batch& batch, const absl::Status& why);
  bool Stopped() const;
  // The connection, opened if need be. On the replicator thread only.
  absl::StatusOr<transport::Connection*> Connection();

  const ReplicatorOptions options_;
  transport::Transport* const transport_;
  TimerQueue* const timers_;
  std::unique_ptr<TaskThread> thread_;
  std::unique_ptr<transport::Connection> connection_;  // made on the replicator thread

  mutable absl::Mutex mu_;
  std::string backup_address_ ABSL_GUARDED_BY(mu_);
  // connection_ once it is made (it is never replaced: it reconnects by itself).
  transport::Connection* connected_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Batches not yet applied, so that Stop can end them.
  std::vector<std::weak_ptr<Batch>> open_ ABSL_GUARDED_BY(mu_);
  uint64_t resends_ ABSL_GUARDED_BY(mu_) = 0;
  bool backup_gone_ ABSL_GUARDED_BY(mu_) = false;  // said so in the log
  bool backup_seen_ ABSL_GUARDED_BY(mu_) = false;  // find_backup has found it
  absl::Time last_warning_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_REPLICATOR_H_
