// RunOn(): a task run holding a UCX worker, for tests that reach inside the UCX transport.
#ifndef HETPS_TESTS_TRANSPORT_RUN_ON_WORKER_H_
#define HETPS_TESTS_TRANSPORT_RUN_ON_WORKER_H_

#include <memory>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "common/await.h"
#include "transport/ucx/ucx_worker.h"

namespace hetps::transport::ucx_internal {

// Runs `task` holding `worker`; false if it did not run within 10 s.
inline bool RunOn(UcxWorker& worker, absl::AnyInvocable<void()> task) {
  auto done = std::make_shared<TimedNotification>();
  return worker.Post([task = std::move(task), done]() mutable {
    task();
    done->Notify();
  }) && done->WaitForNotificationWithTimeout(absl::Seconds(10));
}

}  // namespace hetps::transport::ucx_internal

#endif  // HETPS_TESTS_TRANSPORT_RUN_ON_WORKER_H_
