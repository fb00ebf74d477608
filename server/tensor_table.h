// The tensors declared on a shard. A tensor's declaration and partitions never change after it
// is published and tensors are never removed, so a found pointer stays valid for the table's
// lifetime.
//
// Thread-safe. Find() is on every request's path: each thread keeps its own cache of the
// pointers it has looked up, so a hit takes no lock; only misses and Insert lock the table.
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

struct Tensor {
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
};

class TensorTable {
 public:
  TensorTable();

  // Publishes `tensor` unless its key is taken. Returns the tensor now under the key and
  // whether it is `tensor`.
  std::pair<const Tensor*, bool> Insert(std::unique_ptr<Tensor> tensor);
  const Tensor* Find(uint64_t key) const;
  void ForEach(absl::FunctionRef<void(const Tensor&)> visit) const;

 private:
  const uint64_t instance_id_;  // tells the per-thread caches of several tables apart
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Tensor>> tensors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_TENSOR_TABLE_H_
