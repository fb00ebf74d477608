// PendingRequest: a data request whose partition items complete on several owner threads. The
// last item to complete sends the reply; an error (a deadline, a shutdown) sends it instead.
// Either way the reply goes out exactly once.
//
//   auto request = std::make_shared<PendingRequest>(items, /*returns_weights=*/true, reply, m);
//   ... on owner threads: request->CompleteItem(slot, snapshot);
//   ... on the timer thread: request->Fail(absl::DeadlineExceededError(...));
//
// Thread-safe.
#ifndef HETPS_SERVER_PENDING_REQUEST_H_
#define HETPS_SERVER_PENDING_REQUEST_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/timer_queue.h"
#include "proto/ps.pb.h"
#include "server/metrics.h"
#include "transport/transport.h"

namespace hetps::server {

// A partition's weights at one version, encoded for the wire. The bytes are never written
// again once a snapshot refers to them (the owner copies on write), so they can be sent while
// training goes on.
struct WeightsSnapshot {
  transport::Payload bytes;
  uint64_t version = 0;
};

class PendingRequest;

// The requests that wait for a version, by the connection they came on: when a client
// disconnects, its waiting pulls are let go at once instead of at their deadlines.
class WaitingRequests {
 public:
  void Add(uint64_t connection, std::weak_ptr<PendingRequest> request);
  // Fails every waiting request of `connection` with `status`, and forgets the connection.
  void FailAll(uint64_t connection, const absl::Status& status);
  // Requests of `connection` still waiting (tests).
  size_t Count(uint64_t connection);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::vector<std::weak_ptr<PendingRequest>>> waiting_
      ABSL_GUARDED_BY(mu_);
};

class PendingRequest : public std::enable_shared_from_this<PendingRequest> {
 public:
  // `items` describes each slot for the response (key, partition, dtype). With
  // `returns_weights`, the reply is a PullResponse carrying every slot's snapshot; otherwise
  // its header is `ack_header`.
  PendingRequest(std::vector<hetps::v1::PartitionItem> items, bool returns_weights,
                 transport::ReplyCallback reply, std::shared_ptr<ShardMetrics> metrics,
                 std::string ack_header = "");

  void CompleteItem(size_t slot, WeightsSnapshot snapshot = {});
  void Fail(const absl::Status& status);
  bool finished() const;
  // Number of items not yet complete, for error messages.
  size_t remaining() const;

  // Runs when a request's wait ran out and must Fail it, saying why. A plain function with an
  // owner and a context the request keeps alive, so that setting it allocates nothing.
  using Explainer = void (*)(void* owner, std::shared_ptr<PendingRequest> request,
                             const std::shared_ptr<void>& context);

  // The request may wait for a later version (in BSP, for the other workers' pushes) until
  // `deadline`, and at most `max_wait` from when it starts waiting; then `explain` runs (on the
  // timer thread), or without one the request fails with DeadlineExceeded. The timer is set
  // when the first item has to wait (WaitsForVersion): most requests are answered at once and
  // cost no timer. Then too, a request with a `connection` (not 0) joins `waiting`.
  void SetDeadline(TimerQueue* timers, absl::Time deadline, absl::Duration max_wait,
                   Explainer explain = nullptr, void* owner = nullptr,
                   std::shared_ptr<void> context = nullptr, WaitingRequests* waiting = nullptr,
                   uint64_t connection = 0);
  // Called by a partition that parks one of the request's items until a later version.
  void WaitsForVersion();

 private:
  void Reply(absl::StatusOr<transport::Response> result) ABSL_LOCKS_EXCLUDED(mu_);
  void StartTimerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool returns_weights_;
  const std::string ack_header_;
  const std::shared_ptr<ShardMetrics> metrics_;

  mutable absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  std::vector<hetps::v1::PartitionItem> items_ ABSL_GUARDED_BY(mu_);
  // By slot; most requests name one partition.
  absl::InlinedVector<WeightsSnapshot, 1> snapshots_ ABSL_GUARDED_BY(mu_);
  transport::ReplyCallback reply_ ABSL_GUARDED_BY(mu_);
  TimerQueue* timers_ ABSL_GUARDED_BY(mu_) = nullptr;  // null: no deadline of its own
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  absl::Duration max_wait_ ABSL_GUARDED_BY(mu_);
  Explainer explain_ ABSL_GUARDED_BY(mu_) = nullptr;
  void* explain_owner_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<void> explain_context_ ABSL_GUARDED_BY(mu_);
  TimerQueue::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not set
  WaitingRequests* waiting_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool waited_ ABSL_GUARDED_BY(mu_) = false;  // counted in metrics_->requests_waiting
  uint64_t connection_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_PENDING_REQUEST_H_
