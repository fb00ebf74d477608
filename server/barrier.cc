#include "server/barrier.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "proto/ps.pb.h"
#include "server/request_util.h"

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
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (generation > completed_ + 1) {
      // A worker calls barrier n + 1 only after barrier n completed: this number is corrupt or
      // forged, and taking it would let every later barrier return at once.
      refused = absl::InvalidArgumentError(
          absl::StrFormat("barrier %d is ahead of the job: %d barriers completed, the next is %d",
                          generation, completed_, completed_ + 1));
    } else if (generation <= completed_) {
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
  if (!refused.ok()) {
    reply(refused);
    return;
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
  std::vector<uint32_t> missing;
  {
    absl::MutexLock lock(&mu_);
    auto generation_it = waiting_.find(generation);
    if (generation_it == waiting_.end()) return;
    Generation& arrivals = generation_it->second;
    auto it = arrivals.find(rank);
    if (it == arrivals.end()) return;
    for (uint32_t r = 0; r < num_workers_; ++r) {
      if (!arrivals.contains(r)) missing.push_back(r);
    }
    expired = std::move(it->second);
    arrivals.erase(it);
    if (arrivals.empty()) waiting_.erase(generation_it);
  }
  const std::string why = absl::StrFormat(
      "barrier %d: waited for worker(s) %s, which did not arrive before worker %d's deadline "
      "(%d of %d workers arrived; is a worker not running, or started with another rank?)",
      generation, DescribeRanks(missing), rank, num_workers_ - missing.size(), num_workers_);
  LogWarning("%s", why);
  expired.reply(absl::DeadlineExceededError(why));
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
