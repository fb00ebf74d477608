// ShardChannel: the client's link to one shard, a transport connection plus retries. A call
// that finds the shard unreachable (Unavailable: not started yet, restarting, connection
// broken) is sent again after a pause that grows from 20 ms to 1 s, until its deadline; then it
// fails with DeadlineExceeded. Retrying is safe because shards recognise repeated pushes.
// Errors name the shard: "shard 1 (10.0.0.2:7000): ..."; DataLoss (the shard restarted without
// its state) also names the tensors this client has there.
//
// Thread-safe. Callbacks never run inside Call (transport/internal/call_scope.h). Shutdown()
// waits for the threads inside the connection's Call (they leave it promptly), then ends every
// outstanding call with Cancelled; after it returns the channel touches neither the connection
// nor the timers, although callbacks may still hold the channel itself.
#ifndef HETPS_WORKER_INTERNAL_SHARD_CHANNEL_H_
#define HETPS_WORKER_INTERNAL_SHARD_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/timer_queue.h"
#include "transport/transport.h"

namespace hetps::internal {

class ShardChannel : public std::enable_shared_from_this<ShardChannel> {
 public:
  // REQUIRES: `timers` stays valid until Shutdown() has returned. Messages sent again are
  // counted in `retries` (null: not counted).
  ShardChannel(uint32_t index, std::string address,
               std::unique_ptr<transport::Connection> connection, TimerQueue* timers,
               std::shared_ptr<std::atomic<uint64_t>> retries = nullptr);

  uint32_t index() const { return index_; }
  const std::string& address() const { return address_; }

  // The run of the shard's state the client met (HelloResponse.shard_incarnation), which every
  // request that touches state carries; 0 before the hello (not checked).
  uint64_t shard_incarnation() const { return shard_incarnation_.load(std::memory_order_acquire); }
  void set_shard_incarnation(uint64_t id) {
    shard_incarnation_.store(id, std::memory_order_release);
  }
  // Records a tensor with partitions on this shard, named when the shard reports them lost.
  void AddTensor(const std::string& name);
  // Replication: the shard that keeps the copies of this one's partitions and takes them over
  // when this one is gone. A data call (push, pull, push-pull) or hyperparameter change that
  // finds one of the two unavailable is sent again at the other (with that shard's state run in
  // its header), and calls go on where the last one succeeded.
  void SetStandIn(std::weak_ptr<ShardChannel> stand_in);

  // `sink`: where the response's payload should land (see transport::Request::response_sink);
  // `burst_bytes`: see transport::Request.
  void Call(uint32_t method, std::string header, transport::Payload payload, absl::Time deadline,
            transport::ResponseCallback done, transport::ResponseSink sink = {},
            size_t burst_bytes = 0);
  void Shutdown();

 private:
  struct PendingCall;

  void Send(std::shared_ptr<PendingCall> call);
  std::shared_ptr<ShardChannel> StandIn();
  void OnResponse(std::shared_ptr<PendingCall> call, absl::StatusOr<transport::Response> result);
  // Sends `call` again after its pause (`at_once`: now); false past its deadline.
  bool ScheduleRetry(std::shared_ptr<PendingCall> call, bool at_once = false);
  void RunRetry(uint64_t retry_id);
  void Complete(PendingCall& call, absl::StatusOr<transport::Response> result);
  // Marks a use of the connection (returned) until Exit(); null once shutting down.
  transport::Connection* Enter();
  void Exit();

  const uint32_t index_;
  const std::string address_;
  TimerQueue* const timers_;
  const std::shared_ptr<std::atomic<uint64_t>> retries_counted_;
  std::atomic<uint64_t> shard_incarnation_{0};
  // Data calls start at the stand-in (the last one succeeded there).
  std::atomic<bool> at_stand_in_{false};

  absl::Mutex mu_;
  std::unique_ptr<transport::Connection> connection_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_retry_id_ ABSL_GUARDED_BY(mu_) = 1;
  struct Retry {
    std::shared_ptr<PendingCall> call;
    TimerQueue::TimerId timer = 0;
  };
  absl::flat_hash_map<uint64_t, Retry> retries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tensors_ ABSL_GUARDED_BY(mu_);  // in declaration order
  std::weak_ptr<ShardChannel> stand_in_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::internal

#endif  // HETPS_WORKER_INTERNAL_SHARD_CHANNEL_H_
