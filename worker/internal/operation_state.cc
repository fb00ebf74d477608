#include "worker/internal/operation_state.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/cycle_clock.h"
#include "transport/internal/call_scope.h"

namespace hetps {
namespace internal {

OperationState::OperationState(size_t messages, DoneCallback done, absl::Status status)
    : remaining_(messages), status_(std::move(status)), callback_(std::move(done)) {
  if (messages == 0) Finish();
}

Operation OperationState::Failed(const absl::Status& status, DoneCallback done,
                                 TimerQueue* timers) {
  auto state = std::make_shared<OperationState>(1, std::move(done));
  transport::internal::CompleteOutsideCall(
      timers, [state](const absl::Status& outcome) { state->MessageDone(outcome); }, status);
  return Operation(state);
}

void OperationState::MessageDone(const absl::Status& status) {
  DoneCallback callback;
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (status_.ok() && !status.ok()) status_ = status;
    if (--remaining_ > 0) return;
    callback = std::move(callback_);
    outcome = status_;
  }
  Complete(std::move(callback), outcome);
}

void OperationState::Finish() {
  DoneCallback callback;
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    callback = std::move(callback_);
    outcome = status_;
  }
  Complete(std::move(callback), outcome);
}

void OperationState::Complete(DoneCallback callback, const absl::Status& outcome) {
  if (metrics_ != nullptr) metrics_->Completed(metrics_op_, outcome, start_ticks_);
  // The callback runs before waiters wake, so a Wait() that returns sees its effects.
  if (callback) callback(outcome);
  absl::MutexLock lock(&mu_);
  done_ = true;
  finished_.store(true, std::memory_order_release);
}

void OperationState::CountWaitsIn(std::shared_ptr<std::atomic<int64_t>> nanoseconds) {
  absl::MutexLock lock(&mu_);
  wait_nanoseconds_ = std::move(nanoseconds);
}

void OperationState::MeasureIn(std::shared_ptr<ClientMetrics> metrics, ClientMetrics::Op op) {
  wait_metrics_ = metrics;
  metrics_ = std::move(metrics);
  metrics_op_ = op;
  start_ticks_ = CycleClock::Now();
}

void OperationState::CountWaitsIn(std::shared_ptr<ClientMetrics> metrics) {
  wait_metrics_ = std::move(metrics);
}

void OperationState::DriveWith(std::weak_ptr<transport::Transport> transport) {
  absl::MutexLock lock(&mu_);
  transport_ = std::move(transport);
}

absl::Status OperationState::Wait() {
  std::shared_ptr<std::atomic<int64_t>> wait_nanoseconds;
  std::weak_ptr<transport::Transport> weak_transport;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return status_;
    wait_nanoseconds = wait_nanoseconds_;
    weak_transport = transport_;
  }
  const bool timed = wait_nanoseconds != nullptr || wait_metrics_ != nullptr;
  const int64_t start = timed ? CycleClock::Now() : 0;
  if (std::shared_ptr<transport::Transport> transport = weak_transport.lock()) {
    transport->Drive([this] { return finished_.load(std::memory_order_acquire); });
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  if (timed) {
    const int64_t waited =
        absl::ToInt64Nanoseconds(CycleClock::TicksToDuration(CycleClock::Now() - start));
    if (wait_nanoseconds != nullptr) wait_nanoseconds->fetch_add(waited);
    if (wait_metrics_ != nullptr) wait_metrics_->waited_nanoseconds.fetch_add(waited);
  }
  return status_;
}

bool OperationState::done() {
  absl::MutexLock lock(&mu_);
  return done_;
}

}  // namespace internal

Operation::Operation(std::shared_ptr<internal::OperationState> state) : state_(std::move(state)) {}

absl::Status Operation::Wait() const { return state_->Wait(); }

bool Operation::done() const { return state_->done(); }

}  // namespace hetps
