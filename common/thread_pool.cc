#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>

#include "absl/synchronization/blocking_counter.h"

namespace hetps {

ThreadPool::ThreadPool(int threads, const std::string& name) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name] {
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      Work();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::Schedule(absl::AnyInvocable<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void ThreadPool::Work() {
  while (true) {
    absl::AnyInvocable<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(size_t n, size_t align, absl::FunctionRef<void(size_t, size_t)> fn) {
  const size_t parts = static_cast<size_t>(size()) + 1;
  const size_t units = (n + align - 1) / align;
  const size_t per_part = (units + parts - 1) / parts * align;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t begin = 0; begin < n; begin += per_part) {
    ranges.emplace_back(begin, std::min(n, begin + per_part));
  }
  if (ranges.size() <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  absl::BlockingCounter remaining(static_cast<int>(ranges.size()) - 1);
  for (size_t i = 1; i < ranges.size(); ++i) {
    Schedule([&fn, &remaining, range = ranges[i]] {
      fn(range.first, range.second);
      remaining.DecrementCount();
    });
  }
  fn(ranges[0].first, ranges[0].second);
  // Pool tasks never wait, so the scheduled parts finish; the wait is bounded by their work.
  remaining.Wait();
}

}  // namespace hetps
