// Replication at the partition level (--replicas 2): a primary's queue of changes for its
// backup and the acknowledgements that wait for them; a backup applying its primary's changes.
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/partition.h"

namespace hetps::server {

void Partition::AckWhenReplicated(uint64_t min_version, std::shared_ptr<PendingRequest> request,
                                  size_t slot) {
  // Unreplicated, a push is acknowledged once taken (BSP: held for its step).
  if (!replicated() || (served_version() >= min_version && changes_replicated_ >= changes_made_)) {
    request->CompleteItem(slot);
    return;
  }
  std::erase_if(waiters_, [](const Waiter& w) { return w.request->finished(); });
  request->WaitsForVersion();
  waiters_.push_back(Waiter{min_version, FloatFormat::kFp32, std::move(request), slot,
                            changes_made_, /*ack_only=*/true});
}

transport::Payload Partition::KeepValues(HeldGradient& held) {
  const auto bytes = transport::AsBytes(absl::MakeConstSpan(held.data, config_.range.size));
  if (held.copy.size() == 0) return held.payload;
  auto owned = std::make_shared<AlignedBuffer>(std::move(held.copy));
  held.copy = AlignedBuffer();
  return transport::Payload::Shared(bytes, std::move(owned));
}

void Partition::Replicate(hetps::v1::ReplicatedChange meta, transport::Payload bytes) {
  meta.set_tensor_key(config_.tensor_key);
  meta.set_partition(config_.index);
  meta.set_version(version());
  meta.set_num_bytes(bytes.size());
  ++changes_made_;
  unsent_.push_back(ReplicatedChange{std::move(meta), std::move(bytes)});
  if (!batch_out_) SendToBackup();
}

void Partition::SendToBackup() {
  // Everything queued goes in one batch, up to a bound on its size (at least one change).
  constexpr uint64_t kBatchBytes = 16 << 20;
  std::vector<ReplicatedChange> batch;
  uint64_t bytes = 0;
  size_t taken = 0;
  while (taken < unsent_.size() &&
         (taken == 0 || bytes + unsent_[taken].bytes.size() <= kBatchBytes)) {
    bytes += unsent_[taken].bytes.size();
    ++taken;
  }
  batch.reserve(taken);
  for (size_t i = 0; i < taken; ++i) batch.push_back(std::move(unsent_[i]));
  unsent_.erase(unsent_.begin(), unsent_.begin() + static_cast<ptrdiff_t>(taken));
  batch_out_ = true;
  batch_changes_ = changes_replicated_ + taken;
  batch_version_ = batch.back().meta.version();
  config_.replicate(*this, std::move(batch));
}

void Partition::Replicated() {
  if (!batch_out_) return;
  batch_out_ = false;
  changes_replicated_ = batch_changes_;
  replicated_version_ = batch_version_;
  if (!unsent_.empty()) SendToBackup();
  WakeWaiters();
}

void Partition::DropBackup() {
  if (!replicating_) return;
  replicating_ = false;
  unsent_.clear();
  batch_out_ = false;
  changes_replicated_ = changes_made_;
  replicated_version_ = version();
  WakeWaiters();
}

void Partition::Promote() {
  backup_.store(false, std::memory_order_release);
  WakeWaiters();
}

absl::Status Partition::ApplyReplicated(const hetps::v1::ReplicatedChange& change,
                                        transport::Payload bytes) {
  if (!is_backup()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d was taken over by this shard: it takes no changes from its old primary",
        config_.index));
  }
  const size_t n = config_.range.size;
  switch (change.kind()) {
    case hetps::v1::CHANGE_KIND_STEP: {
      if (change.version() <= version()) return absl::OkStatus();  // a batch sent again
      if (change.version() != version() + 1 || bytes.size() != n * sizeof(float)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "backup of partition %d is at version %d: a step to version %d with %d bytes does "
            "not follow",
            config_.index, version(), change.version(), bytes.size()));
      }
      for (const hetps::v1::WorkerRunChange& run : change.runs()) {
        if (run.rank() < runs_.size()) runs_[run.rank()].incarnation = run.incarnation();
      }
      HETPS_ASSIGN_OR_RETURN(HeldGradient held, Hold(FloatFormat::kFp32, std::move(bytes)));
      const float* gradients[] = {held.data};
      Apply(gradients);
      Release(held);
      return absl::OkStatus();
    }
    case hetps::v1::CHANGE_KIND_ASP_PUSH: {
      if (change.rank() >= runs_.size() || bytes.size() != n * sizeof(float)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("backup of partition %d: a push of worker %d with %d bytes",
                            config_.index, change.rank(), bytes.size()));
      }
      PushOrigin origin;
      origin.rank = change.rank();
      origin.incarnation = change.incarnation();
      origin.sequence = change.sequence();
      return PushAsp(origin, FloatFormat::kFp32, std::move(bytes)).status();
    }
    case hetps::v1::CHANGE_KIND_WRITE_STATE:
      return WriteState(change.version(), bytes);
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "backup of partition %d: unknown change kind %d", config_.index, change.kind()));
  }
}

}  // namespace hetps::server
