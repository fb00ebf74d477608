#include "worker/internal/shard_channel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "proto/ps.pb.h"
#include "transport/internal/call_scope.h"

namespace hetps::internal {
namespace {

constexpr absl::Duration kFirstRetryPause = absl::Milliseconds(20);
constexpr absl::Duration kLongestRetryPause = absl::Seconds(1);
// A replicated data call tries both copies in turn: a takeover (about a quarter of the shards'
// etcd lease after the lease ends) is found within this.
constexpr absl::Duration kLongestStandInPause = absl::Milliseconds(250);
constexpr absl::Duration kLastAttemptMargin = absl::Milliseconds(10);

}  // namespace

struct ShardChannel::PendingCall {
  uint32_t method = 0;
  std::string header;
  transport::Payload payload;
  absl::Time deadline;
  transport::ResponseSink sink;
  size_t burst_bytes = 0;
  transport::ResponseCallback done;
  absl::Duration pause = kFirstRetryPause;
  // Why the last attempt could not reach the shard (empty before any retry).
  std::string unreachable;
  // A call that may go to the stand-in (data calls, and hyperparameter changes, which the
  // stand-in applies to the copies it keeps), and whether this attempt does.
  bool may_stand_in = false;
  bool at_stand_in = false;
  uint32_t failed_attempts = 0;
};

ShardChannel::ShardChannel(uint32_t index, std::string address,
                           std::unique_ptr<transport::Connection> connection, TimerQueue* timers,
                           std::shared_ptr<std::atomic<uint64_t>> retries)
    : index_(index),
      address_(std::move(address)),
      timers_(timers),
      retries_counted_(std::move(retries)),
      connection_(std::move(connection)) {}

transport::Connection* ShardChannel::Enter() {
  absl::MutexLock lock(&mu_);
  if (closed_) return nullptr;
  ++active_;
  return connection_.get();
}

void ShardChannel::Exit() {
  absl::MutexLock lock(&mu_);
  --active_;
}

void ShardChannel::Call(uint32_t method, std::string header, transport::Payload payload,
                        absl::Time deadline, transport::ResponseCallback done,
                        transport::ResponseSink sink, size_t burst_bytes) {
  transport::internal::CallScope scope;
  auto call = std::make_shared<PendingCall>();
  call->method = method;
  call->header = std::move(header);
  call->payload = std::move(payload);
  call->deadline = deadline;
  call->sink = std::move(sink);
  call->burst_bytes = burst_bytes;
  call->done = std::move(done);
  call->may_stand_in = method == hetps::v1::METHOD_PUSH || method == hetps::v1::METHOD_PULL ||
                       method == hetps::v1::METHOD_PUSH_PULL ||
                       method == hetps::v1::METHOD_SET_OPTIMIZER;
  call->at_stand_in =
      call->may_stand_in && at_stand_in_.load(std::memory_order_relaxed) && StandIn() != nullptr;
  Send(std::move(call));
}

void ShardChannel::SetStandIn(std::weak_ptr<ShardChannel> stand_in) {
  absl::MutexLock lock(&mu_);
  stand_in_ = std::move(stand_in);
}

std::shared_ptr<ShardChannel> ShardChannel::StandIn() {
  absl::MutexLock lock(&mu_);
  return stand_in_.lock();
}

namespace {

template <typename Request>
std::string WithShardIncarnationAs(const std::string& header, uint64_t shard_incarnation) {
  Request request;
  if (!request.ParseFromString(header)) return header;
  request.set_shard_incarnation(shard_incarnation);
  std::string out;
  request.SerializeToString(&out);
  return out;
}

// `header` (of a call that may go to the stand-in) with the state run of the shard it goes to
// instead.
std::string WithShardIncarnation(uint32_t method, const std::string& header,
                                 uint64_t shard_incarnation) {
  switch (method) {
    case hetps::v1::METHOD_PULL:
      return WithShardIncarnationAs<hetps::v1::PullRequest>(header, shard_incarnation);
    case hetps::v1::METHOD_SET_OPTIMIZER:
      return WithShardIncarnationAs<hetps::v1::SetOptimizerRequest>(header, shard_incarnation);
    default:
      return WithShardIncarnationAs<hetps::v1::PushRequest>(header, shard_incarnation);
  }
}

}  // namespace

void ShardChannel::Send(std::shared_ptr<PendingCall> call) {
  std::shared_ptr<ShardChannel> target = shared_from_this();
  if (call->at_stand_in) {
    if (std::shared_ptr<ShardChannel> stand_in = StandIn()) target = std::move(stand_in);
  }
  transport::Connection* connection = target->Enter();
  if (connection == nullptr) {
    Complete(*call, absl::CancelledError("the client is shut down"));
    return;
  }
  transport::Request request;
  request.method = call->method;
  request.header = target.get() == this ? call->header
                                        : WithShardIncarnation(call->method, call->header,
                                                               target->shard_incarnation());
  request.payload = call->payload;
  request.deadline = call->deadline;
  request.response_sink = call->sink;
  request.burst_bytes = call->burst_bytes;
  connection->Call(std::move(request),
                   [self = shared_from_this(), call](absl::StatusOr<transport::Response> result) {
                     self->OnResponse(call, std::move(result));
                   });
  target->Exit();
}

void ShardChannel::OnResponse(std::shared_ptr<PendingCall> call,
                              absl::StatusOr<transport::Response> result) {
  if (result.status().code() == absl::StatusCode::kUnavailable) {
    call->unreachable = std::string(result.status().message());
    // Replicated: the other copy may serve it (or will, once it has taken over): it is asked
    // at once, and a pause follows only once both have failed.
    bool at_once = false;
    if (call->may_stand_in && StandIn() != nullptr) {
      call->at_stand_in = !call->at_stand_in;
      at_once = call->failed_attempts++ % 2 == 0;
    }
    if (ScheduleRetry(call, at_once)) return;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) result = absl::CancelledError("the client is shut down");
    }
  }
  if (result.status().code() == absl::StatusCode::kUnavailable ||
      (result.status().code() == absl::StatusCode::kDeadlineExceeded &&
       !call->unreachable.empty())) {
    result = absl::DeadlineExceededError(absl::StrFormat(
        "unreachable until the call's deadline; last error: %s", call->unreachable));
  }
  Complete(*call, std::move(result));
}

bool ShardChannel::ScheduleRetry(std::shared_ptr<PendingCall> call, bool at_once) {
  // The last attempt goes out just before the deadline: a shard back by then is still reached.
  const absl::Time now = hetps::Now();
  const absl::Time last = call->deadline - kLastAttemptMargin;
  if (last <= now) return false;
  const absl::Time when = at_once ? now : std::min(now + call->pause, last);
  if (!at_once) {
    call->pause =
        std::min(call->pause * 2, call->may_stand_in && StandIn() != nullptr ? kLongestStandInPause
                                                                             : kLongestRetryPause);
  }
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  const uint64_t id = next_retry_id_++;
  Retry& retry = retries_[id];
  retry.call = std::move(call);
  retry.timer = timers_->Schedule(when, [self = shared_from_this(), id] { self->RunRetry(id); });
  if (retries_counted_ != nullptr) retries_counted_->fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ShardChannel::RunRetry(uint64_t retry_id) {
  std::shared_ptr<PendingCall> call;
  {
    absl::MutexLock lock(&mu_);
    auto it = retries_.find(retry_id);
    if (it == retries_.end()) return;  // taken by Shutdown
    call = std::move(it->second.call);
    retries_.erase(it);
  }
  Send(std::move(call));
}

void ShardChannel::AddTensor(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (std::find(tensors_.begin(), tensors_.end(), name) == tensors_.end()) {
    tensors_.push_back(name);
  }
}

void ShardChannel::Complete(PendingCall& call, absl::StatusOr<transport::Response> result) {
  if (!result.ok()) {
    std::string lost;
    if (result.status().code() == absl::StatusCode::kDataLoss) {
      constexpr size_t kNamed = 10;
      absl::MutexLock lock(&mu_);
      const size_t named = std::min(tensors_.size(), kNamed);
      lost = absl::StrFormat(
          "; this worker's tensors with partitions there: '%s'%s",
          absl::StrJoin(tensors_.begin(), tensors_.begin() + named, "', '"),
          named < tensors_.size() ? absl::StrFormat(", ... (%d in all)", tensors_.size()) : "");
      if (tensors_.empty()) lost = "; this worker declared no tensor there";
    }
    result = absl::Status(
        result.status().code(),
        absl::StrFormat("shard %d (%s): %s%s", index_, address_, result.status().message(), lost));
  }
  if (result.ok() && call.may_stand_in) {
    at_stand_in_.store(call.at_stand_in, std::memory_order_relaxed);
  }
  transport::ResponseCallback done = std::move(call.done);
  call.done = nullptr;
  if (done) transport::internal::CompleteOutsideCall(timers_, std::move(done), std::move(result));
}

void ShardChannel::Shutdown() {
  std::vector<Retry> retries;
  std::unique_ptr<transport::Connection> connection;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    // Threads inside connection_->Call leave it promptly (no callback runs in there), so this
    // waits without a time limit: the connection must not go while one of them uses it.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
    mu_.Await(absl::Condition(&idle));
    for (auto& [id, retry] : retries_) retries.push_back(std::move(retry));
    retries_.clear();
    connection = std::move(connection_);
  }
  for (Retry& retry : retries) {
    timers_->Cancel(retry.timer);
    Complete(*retry.call, absl::CancelledError("the client is shut down"));
  }
  // Outstanding calls end with Cancelled; OnResponse then completes them.
  connection->Shutdown();
}

}  // namespace hetps::internal
