// BufferPool: byte buffers for work done on every call (the worker's conversions of gradients
// to a 16-bit wire format), taken back when their last owner lets go and handed out again.
// Fresh memory costs a page fault per page each time it is used; reused memory none (from
// Python, under glibc's allocator, a bf16 push+pull of 16 Mi fp32 elements took 1.5x as long
// with a new buffer per partition and push: bench/wire_dtype.py).
//
//   std::shared_ptr<BufferPool> pool = BufferPool::Create(/*max_kept_bytes=*/1 << 30);
//   std::shared_ptr<uint8_t[]> buffer = pool->Take(bytes);  // uninitialised
//
// Thread-safe. A buffer may outlive the pool's other owners: it keeps the pool alive.
#ifndef HETPS_COMMON_BUFFER_POOL_H_
#define HETPS_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace hetps {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Keeps at most `max_kept_bytes` of released buffers; beyond that they are freed.
  static std::shared_ptr<BufferPool> Create(size_t max_kept_bytes);

  // `bytes` bytes, uninitialised: a released buffer of that size if one is kept, else a new
  // one.
  std::shared_ptr<uint8_t[]> Take(size_t bytes);

  // Bytes of released buffers kept for reuse.
  size_t kept_bytes() const;

 private:
  explicit BufferPool(size_t max_kept_bytes) : max_kept_bytes_(max_kept_bytes) {}
  void Give(std::unique_ptr<uint8_t[]> buffer, size_t bytes);

  const size_t max_kept_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<std::unique_ptr<uint8_t[]>>> kept_ ABSL_GUARDED_BY(mu_);
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps

#endif  // HETPS_COMMON_BUFFER_POOL_H_
