#include "common/task_thread.h"

#include <pthread.h>

namespace hetps {

TaskThread::TaskThread(std::string name) : name_(std::move(name)), thread_([this] { Run(); }) {}

TaskThread::~TaskThread() { Stop(); }

bool TaskThread::Post(absl::AnyInvocable<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

TaskThread::Here TaskThread::EnterHere() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return Here::kStopping;
  if (busy_ || !tasks_.empty()) return Here::kBusy;
  busy_ = true;
  return Here::kEntered;
}

void TaskThread::LeaveHere() {
  absl::MutexLock lock(&mu_);
  busy_ = false;  // the thread picks up what was posted meanwhile
}

void TaskThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TaskThread::Run() {
  // Linux limits thread names to 15 characters.
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  while (true) {
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !busy_ && (stopping_ || !tasks_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
    }
    task();
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace hetps
