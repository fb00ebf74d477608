// ThreadPool: a fixed set of threads taking tasks from one queue, and ParallelFor to split a
// loop over them.
//
//   ThreadPool pool(4, "kernels");
//   pool.ParallelFor(n, /*align=*/16, [&](size_t begin, size_t end) { Update(begin, end); });
//
// Thread-safe. Tasks must not wait for other tasks of the same pool (ParallelFor's caller does
// its own share and waits outside the pool, so calling it from any non-pool thread is safe).
#ifndef HETPS_COMMON_THREAD_POOL_H_
#define HETPS_COMMON_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace hetps {

class ThreadPool {
 public:
  ThreadPool(int threads, const std::string& name);
  // Runs the tasks already scheduled, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(absl::AnyInvocable<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

  // Calls fn(begin, end) on contiguous ranges covering [0, n), one per pool thread plus one for
  // the caller, with every boundary a multiple of `align`; returns when all have run.
  void ParallelFor(size_t n, size_t align, absl::FunctionRef<void(size_t, size_t)> fn);

 private:
  void Work();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<absl::AnyInvocable<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace hetps

#endif  // HETPS_COMMON_THREAD_POOL_H_
