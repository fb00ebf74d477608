#include "common/buffer_pool.h"

#include <utility>

namespace hetps {

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_kept_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_kept_bytes));
}

std::shared_ptr<uint8_t[]> BufferPool::Take(size_t bytes) {
  std::unique_ptr<uint8_t[]> buffer;
  {
    absl::MutexLock lock(&mu_);
    auto it = kept_.find(bytes);
    if (it != kept_.end() && !it->second.empty()) {
      buffer = std::move(it->second.back());
      it->second.pop_back();
      kept_bytes_ -= bytes;
    }
  }
  if (buffer == nullptr) buffer.reset(new uint8_t[bytes]);  // uninitialised
  return std::shared_ptr<uint8_t[]>(buffer.release(),
                                    [pool = shared_from_this(), bytes](uint8_t* released) {
                                      pool->Give(std::unique_ptr<uint8_t[]>(released), bytes);
                                    });
}

size_t BufferPool::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

void BufferPool::Give(std::unique_ptr<uint8_t[]> buffer, size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (kept_bytes_ + bytes > max_kept_bytes_) return;  // freed as `buffer` goes
  kept_bytes_ += bytes;
  kept_[bytes].push_back(std::move(buffer));
}

}  // namespace hetps
