// The tensors declared on a shard. A tensor's declaration and partitions never change after it
// is published. A tensor may be removed (dropped): whoever works on it holds a TensorRef, so it
// and its partitions are freed when the last holder lets go (requests in flight, tasks on the
// owner threads, replication), never under one.
//
// Thread-safe. Find() is on every request's path: each thread keeps its own cache of the
// tensors it has looked up (weak references, checked for removal), so a hit takes no lock;
// only misses, Insert and Remove lock the table.
#ifndef HETPS_SERVER_TENSOR_TABLE_H_
#define HETPS_SERVER_TENSOR_TABLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "common/partitioning.h"
#include "optimizer/optimizer.h"
#include "proto/ps.pb.h"
#include "server/partition.h"

namespace hetps::server {

struct Tensor : std::enable_shared_from_this<Tensor> {
  Tensor(hetps::v1::TensorDecl decl, PartitionLayout layout)
      : decl(std::move(decl)), layout(layout) {}

  // Constant after publication.
  const hetps::v1::TensorDecl decl;  // as first declared
  const PartitionLayout layout;
  std::shared_ptr<const Optimizer> optimizer;  // the declared rule
  // By partition index; null where another shard owns the partition.
  std::vector<std::unique_ptr<Partition>> partitions;

  // Hyperparameters in effect from each version on (the declared ones at 0): the base that a
  // change of hyperparameters is merged into.
  mutable absl::Mutex schedule_mu;
  mutable std::map<uint64_t, OptimizerParams> schedule ABSL_GUARDED_BY(schedule_mu);

  // Set when a worker found this shard's partitions new while other shards had applied steps to
  // theirs (the shard restarted without its state): from then on every request for the tensor
  // gets DataLoss, whoever sends it.
  mutable std::atomic<bool> lost{false};
  // Set once it is removed from its table: cached references to it are stale.
  std::atomic<bool> dropped{false};
  // What the shard set aside for it (--max_memory_bytes), given back when it is dropped.
  uint64_t reserved_bytes = 0;
};

// Keeps a tensor and its partitions alive while something works on them.
using TensorRef = std::shared_ptr<const Tensor>;

class TensorTable {
 public:
  TensorTable();

  // Publishes `tensor` unless its key is taken. Returns the tensor now under the key and
  // whether it is `tensor`.
  std::pair<TensorRef, bool> Insert(std::unique_ptr<Tensor> tensor);
  TensorRef Find(uint64_t key) const;
  // Takes the tensor out of the table (later lookups miss) and marks it dropped; null if there
  // is none under `key`.
  std::shared_ptr<Tensor> Remove(uint64_t key);
  // Under the table's lock: `visit` must not call back into the table. It may keep a tensor
  // with shared_from_this().
  void ForEach(absl::FunctionRef<void(const Tensor&)> visit) const;
  std::vector<uint64_t> Keys() const;

 private:
  const uint64_t instance_id_;  // tells the per-thread caches of several tables apart
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Tensor>> tensors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_TENSOR_TABLE_H_
