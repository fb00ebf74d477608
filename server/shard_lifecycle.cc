// What operators ask of a running shard: dropping tensors (METHOD_DROP; a long-lived shard
// serves job after job, so what a finished job declared must be removable without a restart)
// and stopping it (METHOD_STOP).
//
// A drop takes the tensor out of the table (later requests get NOT_FOUND), retires each of its
// partitions on their owner threads (what waits on them fails, later tasks that looked the
// tensor up before the drop find it retired) and gives its memory reservation back. The memory
// itself goes with the last TensorRef: at once unless a request is still being answered.
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {

void Shard::Drop(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::DropRequest> drop = ParseHeader<hetps::v1::DropRequest>(request.header);
  absl::Status status = drop.status();
  if (status.ok() && drop->all() && !drop->tensor_keys().empty()) {
    status = absl::InvalidArgumentError("a drop of every tensor names no tensor");
  }
  if (status.ok() && !drop->all() && drop->tensor_keys().empty()) {
    status = absl::InvalidArgumentError("the drop names no tensor (or set `all`)");
  }
  if (!status.ok()) {
    reply(status);
    return;
  }
  // On the declaring thread: a declaration of the same name comes before or after it, whole.
  auto once = std::make_shared<transport::ReplyCallback>(std::move(reply));
  const bool posted = declarer_->Post([this, drop = *std::move(drop), once] {
    DropNow(drop.all()
                ? table_.Keys()
                : std::vector<uint64_t>(drop.tensor_keys().begin(), drop.tensor_keys().end()),
            std::move(*once));
  });
  if (!posted) {
    (*once)(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
  }
}

void Shard::DropNow(const std::vector<uint64_t>& keys, transport::ReplyCallback reply) {
  hetps::v1::DropResponse response;
  std::vector<std::pair<TensorRef, Partition*>> retiring;
  for (uint64_t key : keys) {
    std::shared_ptr<Tensor> tensor = table_.Remove(key);
    if (tensor == nullptr) continue;
    {
      absl::MutexLock lock(&dropped_mu_);
      dropped_keys_.insert(key);
    }
    if (tensor->decl.sync_mode() == hetps::v1::SYNC_MODE_BSP) {
      for (uint32_t group : CopiedGroups()) {
        bsp_partitions_[group].fetch_sub(
            ShareOfShard(tensor->layout, key, options_.num_shards, group).partitions);
        // Checkpoints being gathered no longer wait for its partitions.
        if (!checkpoints_.empty()) checkpoints_[group]->Forget(key);
      }
    }
    ReleaseMemory(tensor->reserved_bytes);
    response.set_dropped(response.dropped() + 1);
    response.set_released_bytes(response.released_bytes() + tensor->reserved_bytes);
    ShardMetrics::Add(metrics_->tensors_dropped, 1);
    LogInfo("shard %d: dropped tensor '%s' (%d bytes)", options_.shard_index, tensor->decl.name(),
            tensor->reserved_bytes);
    for (const auto& partition : tensor->partitions) {
      if (partition != nullptr) retiring.emplace_back(tensor, partition.get());
    }
  }
  if (retiring.empty()) {
    reply(HeaderResponse(response));
    return;
  }
  // Answered once every partition is retired: what waited on them has failed by then.
  auto pending = std::make_shared<PendingRequest>(
      std::vector<hetps::v1::PartitionItem>(retiring.size()), /*returns_weights=*/false,
      std::move(reply), metrics_, response.SerializeAsString());
  for (size_t slot = 0; slot < retiring.size(); ++slot) {
    auto& [tensor, partition] = retiring[slot];
    absl::Status why = absl::NotFoundError(absl::StrFormat(
        "tensor '%s' was dropped from shard %d", tensor->decl.name(), options_.shard_index));
    const bool posted =
        owners_[partition->owner()]->Post([pending, slot, tensor = std::move(tensor),
                                           partition = partition, why = std::move(why)]() mutable {
          partition->Retire(std::move(why));
          pending->CompleteItem(slot);
        });
    if (!posted) {
      pending->Fail(absl::UnavailableError(
          absl::StrFormat("shard %d is shutting down", options_.shard_index)));
      return;
    }
  }
}

void Shard::RequestStop(transport::Request request, transport::ReplyCallback reply) {
  bool admin = false;
  {
    absl::MutexLock lock(&connections_mu_);
    admin = admin_connections_.contains(request.connection);
  }
  if (!admin) {
    reply(absl::PermissionDeniedError(absl::StrFormat(
        "shard %d: only an operator's client (ps-ctl, ClientOptions::admin) may stop a shard",
        options_.shard_index)));
    return;
  }
  if (!stop_requested_.exchange(true, std::memory_order_acq_rel)) {
    LogWarning("shard %d: an operator's client asked it to stop", options_.shard_index);
  }
  reply(HeaderResponse(hetps::v1::StopResponse()));
}

bool Shard::WasDropped(uint64_t tensor_key) const {
  absl::MutexLock lock(&dropped_mu_);
  return dropped_keys_.contains(tensor_key);
}

}  // namespace hetps::server
