// TaskThread: one thread that runs posted tasks in the order they were posted.
//
//   TaskThread thread("shard-owner-0");
//   thread.Post([&] { partition.Apply(...); });
//   thread.Stop();  // runs what is queued, then joins
//
// Thread-safe. Tasks posted after Stop() are refused (Post returns false) and destroyed unrun.
// Tasks run one at a time, in order; RunHereOrPost may run one on the caller's thread.
#ifndef HETPS_COMMON_TASK_THREAD_H_
#define HETPS_COMMON_TASK_THREAD_H_

#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace hetps {

class TaskThread {
 public:
  explicit TaskThread(std::string name);
  ~TaskThread();  // Stop()
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  bool Post(absl::AnyInvocable<void()> task);
  // Runs `task` on the calling thread when this TaskThread is idle (nothing queued or running),
  // which spares waking it; otherwise posts it. Either way tasks never overlap and keep their
  // order. False (task unrun) after Stop(). A template, so that a task run here is never
  // wrapped (the wrapping allocates).
  template <typename Task>
  bool RunHereOrPost(Task&& task) {
    switch (EnterHere()) {
      case Here::kStopping:
        return false;
      case Here::kBusy:
        return Post(absl::AnyInvocable<void()>(std::forward<Task>(task)));
      case Here::kEntered:
        break;
    }
    task();
    LeaveHere();
    return true;
  }
  // Runs the tasks already posted, then ends the thread. Idempotent.
  // REQUIRES: not called from one of this thread's own tasks.
  void Stop();
  // True when called from this TaskThread's own thread.
  bool IsCurrent() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  enum class Here { kEntered, kBusy, kStopping };
  // For RunHereOrPost: kEntered when the thread is idle (it is then busy with the caller's
  // task until LeaveHere()).
  Here EnterHere();
  void LeaveHere();
  void Run();

  const std::string name_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a task runs, here or on a caller's thread
  std::deque<absl::AnyInvocable<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace hetps

#endif  // HETPS_COMMON_TASK_THREAD_H_
