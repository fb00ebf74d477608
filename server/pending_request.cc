#include "server/pending_request.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "proto/reused_message.h"

namespace hetps::server {

PendingRequest::PendingRequest(std::vector<hetps::v1::PartitionItem> items, bool returns_weights,
                               transport::ReplyCallback reply,
                               std::shared_ptr<ShardMetrics> metrics, std::string ack_header)
    : returns_weights_(returns_weights),
      ack_header_(std::move(ack_header)),
      metrics_(std::move(metrics)),
      remaining_(items.size()),
      items_(std::move(items)),
      snapshots_(items_.size()),
      reply_(std::move(reply)) {}

void PendingRequest::CompleteItem(size_t slot, WeightsSnapshot snapshot) {
  std::vector<hetps::v1::PartitionItem> items;
  absl::InlinedVector<WeightsSnapshot, 1> snapshots;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    snapshots_[slot] = std::move(snapshot);
    if (--remaining_ > 0) return;
    items = std::move(items_);
    snapshots = std::move(snapshots_);
  }
  transport::Response response;
  if (returns_weights_) {
    ReusedMessage<hetps::v1::PullResponse> header;
    for (size_t i = 0; i < items.size(); ++i) {
      hetps::v1::PartitionItem& item = items[i];
      const WeightsSnapshot& snapshot = snapshots[i];
      item.set_num_bytes(snapshot.bytes.size());
      item.set_version(snapshot.version);
      *header->add_items() = std::move(item);
      response.payload.Append(snapshot.bytes);
    }
    ShardMetrics::Add(metrics_->payload_bytes_sent, response.payload.size());
    header->SerializeToString(&response.header);
  } else {
    response.header = ack_header_;
  }
  Reply(std::move(response));
}

void PendingRequest::Fail(const absl::Status& status) { Reply(status); }

void PendingRequest::Reply(absl::StatusOr<transport::Response> result) {
  transport::ReplyCallback reply;
  TimerQueue* timers;
  TimerQueue::TimerId timer;
  {
    absl::MutexLock lock(&mu_);
    if (!reply_) return;  // already replied
    finished_ = true;
    reply = std::move(reply_);
    reply_ = nullptr;
    snapshots_.clear();
    timers = timers_;
    timer = timer_;
    if (waited_) ShardMetrics::Add(metrics_->requests_waiting, -1);
  }
  if (timer != 0) timers->Cancel(timer);
  reply(std::move(result));
}

bool PendingRequest::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

size_t PendingRequest::remaining() const {
  absl::MutexLock lock(&mu_);
  return remaining_;
}

void PendingRequest::SetDeadline(TimerQueue* timers, absl::Time deadline, absl::Duration max_wait,
                                 Explainer explain, void* owner, std::shared_ptr<void> context,
                                 WaitingRequests* waiting, uint64_t connection) {
  absl::MutexLock lock(&mu_);
  waiting_ = waiting;
  connection_ = connection;
  timers_ = timers;
  deadline_ = deadline;
  max_wait_ = max_wait;
  explain_ = explain;
  explain_owner_ = owner;
  explain_context_ = std::move(context);
}

void PendingRequest::WaitsForVersion() {
  WaitingRequests* waiting = nullptr;
  uint64_t connection = 0;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || timers_ == nullptr || timer_ != 0) return;
    StartTimerLocked();
    ShardMetrics::Add(metrics_->requests_waiting, 1);
    waited_ = true;
    waiting = waiting_;
    connection = connection_;
  }
  // Outside mu_: the registry looks at other requests' state under its own lock.
  if (waiting != nullptr && connection != 0) waiting->Add(connection, weak_from_this());
}

void PendingRequest::StartTimerLocked() {
  const size_t total = items_.size();
  timer_ = timers_->Schedule(
      std::min(deadline_, hetps::Now() + max_wait_), [weak = weak_from_this(), total] {
        std::shared_ptr<PendingRequest> request = weak.lock();
        if (request == nullptr) return;
        Explainer explain;
        void* owner;
        std::shared_ptr<void> context;
        {
          absl::MutexLock lock(&request->mu_);
          explain = request->explain_;
          owner = request->explain_owner_;
          context = std::move(request->explain_context_);
        }
        if (explain != nullptr) {
          explain(owner, request, context);
          return;
        }
        request->Fail(absl::DeadlineExceededError(absl::StrFormat(
            "%d of %d partitions did not reach the wanted version before the deadline "
            "(is a worker missing?)",
            request->remaining(), total)));
      });
}

void WaitingRequests::Add(uint64_t connection, std::weak_ptr<PendingRequest> request) {
  absl::MutexLock lock(&mu_);
  std::vector<std::weak_ptr<PendingRequest>>& list = waiting_[connection];
  // Forget the requests that ended, whenever the list has doubled since it was last cleaned.
  if (list.size() >= 16 && (list.size() & (list.size() - 1)) == 0) {
    std::erase_if(list, [](const std::weak_ptr<PendingRequest>& weak) {
      std::shared_ptr<PendingRequest> alive = weak.lock();
      return alive == nullptr || alive->finished();
    });
  }
  list.push_back(std::move(request));
}

void WaitingRequests::FailAll(uint64_t connection, const absl::Status& status) {
  std::vector<std::weak_ptr<PendingRequest>> list;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(connection);
    if (it == waiting_.end()) return;
    list = std::move(it->second);
    waiting_.erase(it);
  }
  for (const auto& weak : list) {
    if (std::shared_ptr<PendingRequest> request = weak.lock()) request->Fail(status);
  }
}

size_t WaitingRequests::Count(uint64_t connection) {
  absl::MutexLock lock(&mu_);
  auto it = waiting_.find(connection);
  if (it == waiting_.end()) return 0;
  size_t count = 0;
  for (const auto& weak : it->second) {
    std::shared_ptr<PendingRequest> request = weak.lock();
    count += request != nullptr && !request->finished();
  }
  return count;
}

}  // namespace hetps::server
