#include "server/tensor_table.h"

#include <atomic>

namespace hetps::server {
namespace {

std::atomic<uint64_t> next_table_id{1};

}  // namespace

TensorTable::TensorTable() : instance_id_(next_table_id.fetch_add(1)) {}

std::pair<TensorRef, bool> TensorTable::Insert(std::unique_ptr<Tensor> tensor) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = tensors_.try_emplace(tensor->decl.key(), nullptr);
  // Not make_shared: a weak reference left in a thread's cache then keeps only the control
  // block, not the tensor's memory.
  if (inserted) it->second = std::shared_ptr<Tensor>(std::move(tensor));
  return {it->second, inserted};
}

TensorRef TensorTable::Find(uint64_t key) const {
  // Weak: a cache never keeps a dropped tensor (or one of a table that is gone) alive.
  thread_local absl::flat_hash_map<std::pair<uint64_t, uint64_t>, std::weak_ptr<const Tensor>>
      cache;
  const std::pair<uint64_t, uint64_t> cache_key{instance_id_, key};
  if (auto it = cache.find(cache_key); it != cache.end()) {
    TensorRef tensor = it->second.lock();
    if (tensor != nullptr && !tensor->dropped.load(std::memory_order_acquire)) return tensor;
    cache.erase(it);
  }
  TensorRef tensor;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = tensors_.find(key);
    if (it != tensors_.end()) tensor = it->second;
  }
  if (tensor == nullptr) return nullptr;
  // Keys of tensors dropped since would otherwise pile up in a long-lived thread's cache.
  constexpr size_t kMaxCached = size_t{1} << 16;
  if (cache.size() >= kMaxCached) cache.clear();
  cache.emplace(cache_key, tensor);
  return tensor;
}

std::shared_ptr<Tensor> TensorTable::Remove(uint64_t key) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(key);
  if (it == tensors_.end()) return nullptr;
  std::shared_ptr<Tensor> tensor = std::move(it->second);
  tensors_.erase(it);
  tensor->dropped.store(true, std::memory_order_release);
  return tensor;
}

void TensorTable::ForEach(absl::FunctionRef<void(const Tensor&)> visit) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [key, tensor] : tensors_) visit(*tensor);
}

std::vector<uint64_t> TensorTable::Keys() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<uint64_t> keys;
  keys.reserve(tensors_.size());
  for (const auto& [key, tensor] : tensors_) keys.push_back(key);
  return keys;
}

}  // namespace hetps::server
