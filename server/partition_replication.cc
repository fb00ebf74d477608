// Replication at the partition level (--replicas 2): a primary's queue of changes for its
// backup and the acknowledgements that wait for them; a backup applying its primary's changes.
#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/partition.h"

namespace hetps::server {

void Partition::AckWhenReplicated(uint64_t min_version, std::shared_ptr<PendingRequest> request,
                                  size_t slot) {
  if (retired()) {
    request->Fail(retired_);
    return;
  }
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
  if (absl::Status widened = Widen(held); !widened.ok()) {
    // As a failed operator new would: the shard's reservation counts this buffer.
    LogError("partition %d: %s", config_.index, widened.ToString());
    std::abort();
  }
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
  if (copied_ && changes_replicated_ >= copied_at_) std::exchange(copied_, nullptr)(true);
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
  if (copied_) std::exchange(copied_, nullptr)(false);
  WakeWaiters();
}

void Partition::Promote() {
  TakeDeferredValues();  // served from now on: its values are the job's
  backup_.store(false, std::memory_order_release);
  WakeWaiters();
}

void Partition::StartReplica(hetps::v1::ReplicatedChange meta,
                             absl::AnyInvocable<void(bool)> copied) {
  if (retired()) {
    copied(true);  // nothing to copy: the backup drops it too
    return;
  }
  if (replicating_ || is_backup() || !config_.replicate) {
    copied(replicating_);  // already replicated: its changes go to the backup
    return;
  }
  // The weights are shared (the next update writes a fresh buffer while they are sent); the
  // optimizer state, updated in place, is copied.
  const size_t n = config_.range.size;
  transport::Payload bytes = Snapshot(FloatFormat::kFp32).bytes;
  if (!state_slots_.empty()) {
    absl::StatusOr<AlignedBuffer> copy = AlignedBuffer::Allocate(n * state_slots_.size());
    if (!copy.ok()) {
      LogWarning("partition %d: no memory for a copy of its optimizer state: %s", config_.index,
                 copy.status().ToString());
      copied(false);
      return;
    }
    std::copy_n(state_.data(), n * state_slots_.size(), copy->data());
    auto owned = std::make_shared<const AlignedBuffer>(*std::move(copy));
    bytes.Append(transport::Payload::Shared(transport::AsBytes(owned->span()), owned));
  }
  replicating_ = true;
  changes_replicated_ = changes_made_;
  replicated_version_ = version();
  meta.set_kind(hetps::v1::CHANGE_KIND_SNAPSHOT);
  meta.set_state_slots(static_cast<uint32_t>(state_slots_.size()));
  for (size_t rank = 0; rank < runs_.size(); ++rank) {
    hetps::v1::WorkerRunImage* run = meta.add_run_images();
    run->set_incarnation(runs_[rank].incarnation);
    run->set_highest_sequence(runs_[rank].applied.highest());
    run->set_seen_mask(runs_[rank].applied.seen());
    runs_sent_[rank] = runs_[rank].incarnation;
  }
  copied_ = std::move(copied);
  copied_at_ = changes_made_ + 1;
  Replicate(std::move(meta), std::move(bytes));
}

absl::Status Partition::LoadSnapshot(
    const hetps::v1::ReplicatedChange& snapshot,
    std::vector<std::pair<uint64_t, std::shared_ptr<const Optimizer>>> schedule,
    const transport::Payload& bytes) {
  if (retired()) return absl::OkStatus();
  if (!is_backup()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d is served by this shard: it takes no snapshot", config_.index));
  }
  if (schedule.empty() || schedule.front().first != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "snapshot of partition %d: the schedule does not start at version 0", config_.index));
  }
  for (const auto& [from_version, rule] : schedule) {
    if (rule->state_slots() != static_cast<int>(state_slots_.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "snapshot of partition %d: a rule with %d state slots, the partition has %d",
          config_.index, rule->state_slots(), state_slots_.size()));
    }
  }
  const size_t n = config_.range.size;
  if (snapshot.state_slots() != state_slots_.size() ||
      bytes.size() != n * (1 + state_slots_.size()) * sizeof(float) ||
      snapshot.run_images_size() != static_cast<int>(runs_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "snapshot of partition %d: %d bytes, %d state slots and %d workers' runs; the partition "
        "has %d values, %d slots and %d workers",
        config_.index, bytes.size(), snapshot.state_slots(), snapshot.run_images_size(), n,
        state_slots_.size(), runs_.size()));
  }
  HETPS_RETURN_IF_ERROR(CopyStateFrom(bytes));
  TakeRunsAndVersion(snapshot.run_images(), snapshot.version());
  steps_.clear();
  schedule_ = std::move(schedule);
  return absl::OkStatus();
}

absl::Status Partition::ApplyReplicated(const hetps::v1::ReplicatedChange& change,
                                        transport::Payload bytes) {
  if (retired()) return absl::OkStatus();  // dropped here first: the primary drops it too
  if (!is_backup()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d was taken over by this shard: it takes no changes from its old primary",
        config_.index));
  }
  const size_t n = config_.range.size;
  // A change to the values the primary started from (no snapshot came first: the partition
  // replicates from its declaration).
  if (change.kind() != hetps::v1::CHANGE_KIND_WRITE_STATE) TakeDeferredValues();
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
      Apply(absl::MakeConstSpan(&held, 1));
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
