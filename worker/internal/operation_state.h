// OperationState: what an Operation handle refers to. An operation is a known number of
// messages; it is done when every one of them has completed (so none can still write into the
// caller's memory), and its outcome is the first error among them, or OK.
//
// Thread-safe.
#ifndef HETPS_WORKER_INTERNAL_OPERATION_STATE_H_
#define HETPS_WORKER_INTERNAL_OPERATION_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/timer_queue.h"
#include "transport/transport.h"
#include "worker/client.h"
#include "worker/internal/client_metrics.h"

namespace hetps::internal {

class OperationState {
 public:
  // With `messages` == 0 the operation is done at once, with `status`.
  OperationState(size_t messages, DoneCallback done, absl::Status status = absl::OkStatus());

  // An operation that failed before sending anything. Its callback runs on `timers`' thread
  // when the caller is inside a client call (never inside Push, Pull or PushPull).
  static Operation Failed(const absl::Status& status, DoneCallback done, TimerQueue* timers);

  void MessageDone(const absl::Status& status);
  // Wait() adds the time it blocks to `nanoseconds` (the device client's waited-on-PS figure).
  void CountWaitsIn(std::shared_ptr<std::atomic<int64_t>> nanoseconds);
  // Counts the operation in `metrics` as `op` when it completes, timed from now, and adds the
  // time Wait() blocks to its figure of time waited on the PS. Before any message is sent.
  void MeasureIn(std::shared_ptr<ClientMetrics> metrics, ClientMetrics::Op op);
  // Only adds the time Wait() blocks to `metrics` (the device client's operations, whose
  // messages are the host client's, counted there). Before any message is sent.
  void CountWaitsIn(std::shared_ptr<ClientMetrics> metrics);
  // Wait() drives `transport` (see Transport::Drive) before it blocks, while it still exists.
  void DriveWith(std::weak_ptr<transport::Transport> transport);
  absl::Status Wait();
  bool done();

 private:
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the callback taken out of callback_, then marks the operation done.
  void Complete(DoneCallback callback, const absl::Status& outcome) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  DoneCallback callback_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::atomic<int64_t>> wait_nanoseconds_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<transport::Transport> transport_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> finished_{false};  // done_, for a driving Wait() to poll without the lock
  // Set by MeasureIn or CountWaitsIn before any message is sent (so before any thread
  // completes the operation).
  std::shared_ptr<ClientMetrics> metrics_;  // counts the operation
  std::shared_ptr<ClientMetrics> wait_metrics_;
  ClientMetrics::Op metrics_op_ = ClientMetrics::kPush;
  int64_t start_ticks_ = 0;
};

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_OPERATION_STATE_H_
