#include "server/pending_request.h"

#include <utility>

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
  std::vector<WeightsSnapshot> snapshots;
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
    hetps::v1::PullResponse header;
    for (size_t i = 0; i < items.size(); ++i) {
      hetps::v1::PartitionItem& item = items[i];
      const WeightsSnapshot& snapshot = snapshots[i];
      item.set_num_bytes(snapshot.bytes.size());
      item.set_version(snapshot.version);
      *header.add_items() = std::move(item);
      response.payload.Append(snapshot.bytes);
    }
    ShardMetrics::Add(metrics_->payload_bytes_sent, response.payload.size());
    response.header = header.SerializeAsString();
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
  }
  if (timers != nullptr) timers->Cancel(timer);
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

void PendingRequest::SetDeadlineTimer(TimerQueue* timers, TimerQueue::TimerId timer) {
  bool cancel_now;
  {
    absl::MutexLock lock(&mu_);
    cancel_now = finished_;
    timers_ = timers;
    timer_ = timer;
  }
  if (cancel_now) timers->Cancel(timer);
}

}  // namespace hetps::server
