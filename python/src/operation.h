// Python's handle of an asynchronous push or pull, and the thread that runs Python code when
// operations end.
//
// The client ends operations on its own threads, which must never wait for the GIL (they would
// hold up every other operation's completion while Python runs). An ended operation is
// finished (its callbacks run, the memory it used let go) holding the GIL: by a thread that
// waits for it, by the next Python call that looks at it, or by the CallbackRunner's thread
// (OperationState says which). That memory (the arrays passed in) is owned by the operation's
// state, not by the Python handle: dropping the handle early is safe.
#ifndef HETPS_PYTHON_SRC_OPERATION_H_
#define HETPS_PYTHON_SRC_OPERATION_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/client.h"

namespace hetps::python {

// What an operation keeps until it ends. The Python fields are touched only with the GIL held.
struct OperationState {
  OperationState() = default;
  OperationState(const OperationState&) = delete;
  OperationState& operator=(const OperationState&) = delete;
  ~OperationState();

  std::vector<pybind11::object> keep_alive;  // the arrays the operation reads or writes
  // Called with their handle once it ends (holding the handle until then, so that a callback
  // runs even when the caller dropped its reference).
  std::vector<std::pair<pybind11::object, pybind11::object>> callbacks;  // (callback, handle)
  bool finished = false;  // the callbacks have run (FinishOperation)
  absl::Status status;    // set before `finished`

  // Who finishes an ended operation (FinishOperation, holding the GIL). Handing it to the
  // runner wakes the runner's thread, which then takes the GIL from the Python threads (a 4
  // KiB push+pull over shared memory took 10 to 49 us from Python when every operation went
  // there, 10 when a waiter finished it; a wait() for one that had ended took 17.5 us, 0.5
  // when it finished it itself). So the runner gets only what nobody else will:
  // - a thread in wait() finishes it when it wakes;
  // - while a handle lives and no callback waits, the next to look with the GIL: wait(),
  //   add_done_callback(), the last handle's end;
  // - otherwise (callbacks wait and no thread does, or no handle is left), the runner, at once.

  // Wait() before it blocks: it finishes the operation when it wakes.
  void AddWaiter();
  int waiters() const;
  // A handle was made, or one ended. DropHandle: whether the operation ended and nobody
  // finishes it: then the caller must (holding the GIL), with ended_status().
  void AddHandle();
  bool DropHandle();
  // add_done_callback() before the operation finished: from now on its end goes to the runner
  // (unless a thread waits). Returns whether it ended already and nobody finishes it: then the
  // caller must (holding the GIL), with ended_status().
  bool ExpectCallbacks();
  // Called by the client when the operation ends: whether the runner must finish it.
  bool EndNeedsRunner(const absl::Status& status);
  absl::Status ended_status() const;

 private:
  bool RunnerNeeded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return handles_ == 0 || (callbacks_expected_ && waiters_ == 0);
  }

  mutable absl::Mutex mu_;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  int handles_ ABSL_GUARDED_BY(mu_) = 0;
  bool callbacks_expected_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool to_runner_ ABSL_GUARDED_BY(mu_) = false;  // ended, and handed to the runner
  absl::Status ended_status_ ABSL_GUARDED_BY(mu_);
};

class CallbackRunner {
 public:
  // The process's runner (started on first use).
  static CallbackRunner& Get();

  // Called by the client, on any thread, without the GIL.
  void Post(std::shared_ptr<OperationState> state, absl::Status status);
  // Ends the thread (at interpreter exit); what is posted later is leaked, never run.
  // REQUIRES: the GIL is held.
  void Stop();
  // Operations posted so far.
  uint64_t posted();

 private:
  CallbackRunner() = default;
  void Loop();

  absl::Mutex mu_;
  std::deque<std::pair<std::shared_ptr<OperationState>, absl::Status>> queue_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// Finishes `state` with `status` on the calling thread: runs its callbacks, drops what it kept.
// REQUIRES: the GIL is held.
void FinishOperation(OperationState& state, const absl::Status& status);

// What push/pull return to Python.
class OperationHandle {
 public:
  // REQUIRES: the GIL is held (for these and the destructor).
  OperationHandle(Operation operation, std::shared_ptr<OperationState> state);
  OperationHandle(const OperationHandle& other);
  OperationHandle(OperationHandle&& other) noexcept = default;
  OperationHandle& operator=(const OperationHandle&) = delete;
  OperationHandle& operator=(OperationHandle&&) = delete;
  ~OperationHandle();

  // Waits (GIL released) until the operation ends and finishes it (its callbacks run on this
  // thread unless the runner got there first); raises hetps.Error unless it succeeded.
  void Wait();
  // Threads that called Wait() (tests: to end an operation only once a thread waits for it).
  int waiters() const { return state_->waiters(); }
  bool Done() const;
  // Calls `callback(handle)` once the operation has ended (at once if it has).
  void AddDoneCallback(pybind11::object self, pybind11::object callback);
  // The outcome once done: None for success, else a hetps.Error (not raised).
  pybind11::object Exception();

 private:
  Operation operation_;
  std::shared_ptr<OperationState> state_;
};

// The DoneCallback that hands an ended operation to the runner.
DoneCallback PostTo(std::shared_ptr<OperationState> state);

}  // namespace hetps::python

#endif  // HETPS_PYTHON_SRC_OPERATION_H_
