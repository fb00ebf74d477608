#include "server/barrier.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "proto/ps.pb.h"

namespace hetps::server {
namespace {

transport::Response OkResponse() {
  transport::Response response;
  response.header = hetps::v1::BarrierResponse().SerializeAsString();
  return response;
}

}  // namespace

BarrierCoordinator::BarrierCoordinator(uint32_t num_workers, TimerQueue* timers)
    : num_workers_(num_workers), timers_(timers) {}

void BarrierCoordinator::Arrive(uint32_t rank, uint64_t generation, absl::Time deadline,
                                transport::ReplyCallback reply) {
  std::vector<Arrival> released;
  Arrival replaced;
  {
    absl::MutexLock lock(&mu_);
    if (generation <= completed_) {
      released.push_back(Arrival{std::move(reply)});
    } else {
      Generation& arrivals = waiting_[generation];
      if (auto it = arrivals.find(rank); it != arrivals.end()) {
        replaced = std::move(it->second);
        arrivals.erase(it);
      }
      if (arrivals.size() + 1 == num_workers_) {
        completed_ = std::max(completed_, generation);
        for (auto& [r, arrival] : arrivals) released.push_back(std::move(arrival));
        released.push_back(Arrival{std::move(reply)});
        waiting_.erase(generation);
      } else {
        Arrival& arrival = arrivals[rank];
        arrival.reply = std::move(reply);
        arrival.timer =
            timers_->Schedule(deadline, [this, rank, generation] { Expire(rank, generation); });
      }
    }
  }
  if (replaced.reply) {
    timers_->Cancel(replaced.timer);
    replaced.reply(absl::AbortedError("replaced by a retried barrier call"));
  }
  for (Arrival& arrival : released) {
    if (arrival.timer != 0) timers_->Cancel(arrival.timer);
    arrival.reply(OkResponse());
  }
}

uint64_t BarrierCoordinator::completed() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

void BarrierCoordinator::Expire(uint32_t rank, uint64_t generation) {
  Arrival expired;
  size_t arrived = 0;
  {
    absl::MutexLock lock(&mu_);
    auto generation_it = waiting_.find(generation);
    if (generation_it == waiting_.end()) return;
    auto it = generation_it->second.find(rank);
    if (it == generation_it->second.end()) return;
    expired = std::move(it->second);
    generation_it->second.erase(it);
    arrived = generation_it->second.size() + 1;
    if (generation_it->second.empty()) waiting_.erase(generation_it);
  }
  expired.reply(absl::DeadlineExceededError(
      absl::StrFormat("barrier %d: only %d of %d workers arrived before the deadline", generation,
                      arrived, num_workers_)));
}

void BarrierCoordinator::FailAll(const absl::Status& status) {
  std::vector<Arrival> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [generation, arrivals] : waiting_) {
      for (auto& [rank, arrival] : arrivals) failed.push_back(std::move(arrival));
    }
    waiting_.clear();
  }
  for (Arrival& arrival : failed) {
    timers_->Cancel(arrival.timer);
    arrival.reply(status);
  }
}

}  // namespace hetps::server
