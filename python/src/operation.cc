#include "python/src/operation.h"

#include <utility>

#include "python/src/errors.h"

namespace hetps::python {
namespace py = pybind11;

OperationState::~OperationState() {
  if (keep_alive.empty() && callbacks.empty()) return;
  // Normally emptied by FinishOperation; a state dropped unfinished (the runner stopped at
  // exit) lets go of its Python objects only if the interpreter still runs.
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    for (py::object& object : keep_alive) object.release();
    for (auto& [callback, handle] : callbacks) {
      callback.release();
      handle.release();
    }
    return;
  }
  py::gil_scoped_acquire gil;
  keep_alive.clear();
  callbacks.clear();
}

CallbackRunner& CallbackRunner::Get() {
  static auto* runner = new CallbackRunner();  // never destroyed: see Stop()
  return *runner;
}

void CallbackRunner::Post(std::shared_ptr<OperationState> state, absl::Status status) {
  absl::MutexLock lock(&mu_);
  ++posted_;
  if (stopping_) {
    // After Stop() nothing may touch Python any more: keep the state (and its objects) forever.
    new std::shared_ptr<OperationState>(std::move(state));
    return;
  }
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }
  queue_.emplace_back(std::move(state), std::move(status));
}

void CallbackRunner::Loop() {
  for (;;) {
    std::pair<std::shared_ptr<OperationState>, absl::Status> item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CallbackRunner* runner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(runner->mu_) {
            return runner->stopping_ || !runner->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and everything posted before has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    py::gil_scoped_acquire gil;
    FinishOperation(*item.first, item.second);
    item.first.reset();  // with the GIL: the state may hold the last references
  }
}

uint64_t CallbackRunner::posted() {
  absl::MutexLock lock(&mu_);
  return posted_;
}

void CallbackRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) {
    py::gil_scoped_release release;  // the runner takes the GIL to finish what is queued
    thread_.join();
  }
}

void FinishOperation(OperationState& state, const absl::Status& status) {
  if (state.finished) return;
  state.status = status;
  state.finished = true;
  std::vector<std::pair<py::object, py::object>> callbacks = std::move(state.callbacks);
  for (auto& [callback, handle] : callbacks) {
    try {
      callback(handle);
    } catch (py::error_already_set& error) {
      // As concurrent.futures does: a failing callback is reported, the others still run.
      error.discard_as_unraisable("hetps operation callback");
    }
  }
  state.keep_alive.clear();  // after the callbacks, which may read the pulled values
}

void OperationState::AddWaiter() {
  absl::MutexLock lock(&mu_);
  ++waiters_;
}

int OperationState::waiters() const {
  absl::MutexLock lock(&mu_);
  return waiters_;
}

void OperationState::AddHandle() {
  absl::MutexLock lock(&mu_);
  ++handles_;
}

bool OperationState::DropHandle() {
  absl::MutexLock lock(&mu_);
  --handles_;
  return handles_ == 0 && ended_ && !to_runner_;
}

bool OperationState::ExpectCallbacks() {
  absl::MutexLock lock(&mu_);
  callbacks_expected_ = true;
  return ended_ && !to_runner_;
}

bool OperationState::EndNeedsRunner(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  ended_status_ = status;
  to_runner_ = RunnerNeeded();
  return to_runner_;
}

absl::Status OperationState::ended_status() const {
  absl::MutexLock lock(&mu_);
  return ended_status_;
}

DoneCallback PostTo(std::shared_ptr<OperationState> state) {
  return [state = std::move(state)](const absl::Status& status) mutable {
    // Where a handle lives, it holds the state until the state is finished: when this
    // callback lets go of its reference, the state's arrays are gone or someone else holds it.
    if (state->EndNeedsRunner(status)) CallbackRunner::Get().Post(std::move(state), status);
  };
}

OperationHandle::OperationHandle(Operation operation, std::shared_ptr<OperationState> state)
    : operation_(std::move(operation)), state_(std::move(state)) {
  state_->AddHandle();
}

OperationHandle::OperationHandle(const OperationHandle& other)
    : operation_(other.operation_), state_(other.state_) {
  state_->AddHandle();
}

OperationHandle::~OperationHandle() {
  if (state_ != nullptr && state_->DropHandle()) {
    FinishOperation(*state_, state_->ended_status());
  }
}

void OperationHandle::Wait() {
  absl::Status status;
  state_->AddWaiter();
  {
    py::gil_scoped_release release;
    status = operation_.Wait();
  }
  FinishOperation(*state_, status);  // nothing where the runner (or another waiter) did
  RaiseIfError(status);
}

bool OperationHandle::Done() const { return state_->finished || operation_.done(); }

void OperationHandle::AddDoneCallback(py::object self, py::object callback) {
  if (state_->finished) {
    callback(self);
    return;
  }
  state_->callbacks.emplace_back(std::move(callback), std::move(self));
  if (state_->ExpectCallbacks()) FinishOperation(*state_, state_->ended_status());
}

py::object OperationHandle::Exception() {
  absl::Status status;
  if (state_->finished) {
    status = state_->status;  // callbacks run before the C++ handle may say it is done
  } else if (operation_.done()) {
    py::gil_scoped_release release;
    status = operation_.Wait();  // returns at once
  } else {
    RaiseIfError(absl::FailedPreconditionError("the operation has not ended yet"));
  }
  if (status.ok()) return py::none();
  return ErrorFor(status);
}

}  // namespace hetps::python
