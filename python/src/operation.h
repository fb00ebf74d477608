// Python's handle of an asynchronous push or pull, and the thread that runs Python code when
// operations end.
//
// The client ends operations on its own threads, which must never wait for the GIL (they would
// hold up every other operation's completion while Python runs). An operation that a thread
// waits for (wait()) is finished by that thread when it wakes, holding the GIL again: it runs
// the handle's callbacks and lets go of the memory the operation used. Every other ended
// operation goes to the CallbackRunner, whose thread takes the GIL and does the same. That
// memory (the arrays passed in) is owned by the operation's state, not by the Python handle:
// dropping the handle early is safe.
#ifndef HETPS_PYTHON_SRC_OPERATION_H_
#define HETPS_PYTHON_SRC_OPERATION_H_

#include <pybind11/pybind11.h>

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

  // Called by Wait() before it blocks: it will finish the operation when it wakes.
  void AddWaiter();
  int waiters() const;
  // Called by the client when the operation ends: whether a waiter will finish it (else the
  // runner must). Handing an ended operation to the runner wakes the runner's thread, which
  // then takes the GIL just as the waiter wants it back (a 4 KiB push+pull over shared memory
  // took 10 to 49 us from Python that way; 10 with the waiter finishing it).
  bool HasWaiter() const { return waiters() > 0; }

 private:
  mutable absl::Mutex mu_;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
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

 private:
  CallbackRunner() = default;
  void Loop();

  absl::Mutex mu_;
  std::deque<std::pair<std::shared_ptr<OperationState>, absl::Status>> queue_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Finishes `state` with `status` on the calling thread: runs its callbacks, drops what it kept.
// REQUIRES: the GIL is held.
void FinishOperation(OperationState& state, const absl::Status& status);

// What push/pull return to Python.
class OperationHandle {
 public:
  OperationHandle(Operation operation, std::shared_ptr<OperationState> state)
      : operation_(std::move(operation)), state_(std::move(state)) {}

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
