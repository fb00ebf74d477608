#include "server/tensor_table.h"

#include <atomic>

namespace hetps::server {
namespace {

std::atomic<uint64_t> next_table_id{1};

}  // namespace

TensorTable::TensorTable() : instance_id_(next_table_id.fetch_add(1)) {}

std::pair<const Tensor*, bool> TensorTable::Insert(std::unique_ptr<Tensor> tensor) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = tensors_.try_emplace(tensor->decl.key(), nullptr);
  if (inserted) it->second = std::move(tensor);
  return {it->second.get(), inserted};
}

const Tensor* TensorTable::Find(uint64_t key) const {
  // Entries are never removed, so a cached pointer never goes stale.
  thread_local absl::flat_hash_map<std::pair<uint64_t, uint64_t>, const Tensor*> cache;
  const std::pair<uint64_t, uint64_t> cache_key{instance_id_, key};
  if (auto it = cache.find(cache_key); it != cache.end()) return it->second;
  const Tensor* tensor = nullptr;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = tensors_.find(key);
    if (it != tensors_.end()) tensor = it->second.get();
  }
  if (tensor != nullptr) cache.emplace(cache_key, tensor);
  return tensor;
}

void TensorTable::ForEach(absl::FunctionRef<void(const Tensor&)> visit) const {
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [key, tensor] : tensors_) visit(*tensor);
}

}  // namespace hetps::server
