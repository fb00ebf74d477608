// BarrierCoordinator: the n-th Barrier call of every worker meets the n-th of the others. When
// the last of the W workers arrives all are answered OK; a worker still waiting at its deadline
// is answered DeadlineExceeded, naming the workers that did not arrive. A retried arrival
// replaces the earlier one (which is answered Aborted); an arrival for a barrier that already
// completed is answered OK at once, one beyond the next barrier InvalidArgument.
//
// Thread-safe.
#ifndef HETPS_SERVER_BARRIER_H_
#define HETPS_SERVER_BARRIER_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/timer_queue.h"
#include "transport/transport.h"

namespace hetps::server {

class BarrierCoordinator {
 public:
  // REQUIRES: `timers` outlives the coordinator.
  BarrierCoordinator(uint32_t num_workers, TimerQueue* timers);

  // REQUIRES: rank < num_workers, generation >= 1.
  void Arrive(uint32_t rank, uint64_t generation, absl::Time deadline,
              transport::ReplyCallback reply);
  // Answers every waiting worker with `status`.
  void FailAll(const absl::Status& status);
  // The highest generation that completed (0 before the first).
  uint64_t completed() const;

 private:
  struct Arrival {
    transport::ReplyCallback reply;
    TimerQueue::TimerId timer = 0;
  };
  using Generation = absl::flat_hash_map<uint32_t, Arrival>;

  void Expire(uint32_t rank, uint64_t generation);

  const uint32_t num_workers_;
  TimerQueue* const timers_;
  mutable absl::Mutex mu_;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;  // highest generation that completed
  std::map<uint64_t, Generation> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_BARRIER_H_
