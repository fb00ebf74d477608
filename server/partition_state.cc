// A partition's whole state as a unit: the copies checkpoints are made of, a restore from one,
// and the state that ReadState/WriteState (and a rejoining backup's catch-up) move as bytes.
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/initializer.h"
#include "server/partition.h"

namespace hetps::server {

void Partition::CheckpointIfDue() {
  // A backup's copies are its primary's to give; once promoted it gives them.
  if (!config_.checkpoint || is_backup()) return;
  const uint64_t now = version();
  const bool asked = std::erase(checkpoint_at_, now) > 0;
  const bool periodic = config_.checkpoint_every > 0 && now % config_.checkpoint_every == 0 &&
                        (!config_.periodic_wanted || config_.periodic_wanted(now));
  if (asked || periodic) {
    captured_ = now;
    config_.checkpoint(Capture());
  }
}

absl::Status Partition::CheckpointAt(uint64_t version) {
  if (retired()) return absl::OkStatus();  // the checkpoint no longer has it (Forget)
  if (!config_.checkpoint) {
    return absl::FailedPreconditionError(
        absl::StrFormat("partition %d is not checkpointed (an ASP tensor, or no "
                        "--checkpoint_dir)",
                        config_.index));
  }
  const uint64_t now = this->version();
  if (now > version) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d is at version %d, past step %d: checkpoint a step not yet applied",
        config_.index, now, version));
  }
  if (now == version) {
    if (captured_ != now) {
      captured_ = now;
      config_.checkpoint(Capture());
    }
  } else if (std::find(checkpoint_at_.begin(), checkpoint_at_.end(), version) ==
             checkpoint_at_.end()) {
    checkpoint_at_.push_back(version);
  }
  return absl::OkStatus();
}

PartitionCopy Partition::Capture() const {
  PartitionCopy copy;
  const size_t n = config_.range.size;
  copy.index = config_.index;
  copy.version = version();
  copy.elements = n;
  copy.state_slots = static_cast<uint32_t>(state_slots_.size());
  copy.weights = weights_;
  if (!state_slots_.empty()) {
    copy.state = std::make_unique_for_overwrite<float[]>(n * state_slots_.size());
    for (size_t slot = 0; slot < state_slots_.size(); ++slot) {
      std::copy_n(state_slots_[slot], n, copy.state.get() + slot * n);
    }
  }
  for (const WorkerRun& run : runs_) {
    hetps::v1::WorkerRunImage& image = copy.runs.emplace_back();
    image.set_incarnation(run.incarnation);
    image.set_highest_sequence(run.applied.highest());
    image.set_seen_mask(run.applied.seen());
  }
  return copy;
}

absl::Status Partition::Restore(const hetps::v1::PartitionImage& image,
                                absl::Span<const float> values) {
  const size_t n = config_.range.size;
  if (image.state_slots() != state_slots_.size() ||
      values.size() != n * (1 + state_slots_.size()) ||
      image.runs_size() != static_cast<int>(runs_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "partition %d: the copy holds %d values, %d state slots and %d workers' runs; the "
        "partition has %d values, %d slots and %d workers",
        config_.index, values.size(), image.state_slots(), image.runs_size(), n,
        state_slots_.size(), runs_.size()));
  }
  std::copy_n(values.data(), n, weights_->data());
  for (size_t slot = 0; slot < state_slots_.size(); ++slot) {
    std::copy_n(values.data() + (slot + 1) * n, n, state_slots_[slot]);
  }
  deferred_init_ = nullptr;
  TakeRunsAndVersion(image.runs(), image.version());
  return absl::OkStatus();
}

void Partition::TakeRunsAndVersion(
    const google::protobuf::RepeatedPtrField<hetps::v1::WorkerRunImage>& runs, uint64_t version) {
  for (size_t rank = 0; rank < runs_.size(); ++rank) {
    const hetps::v1::WorkerRunImage& run = runs[static_cast<int>(rank)];
    runs_[rank] = WorkerRun{run.incarnation(),
                            ReplayWindow::Restored(run.highest_sequence(), run.seen_mask())};
  }
  awaits_values_ = false;
  bf16_ = fp16_ = WireCopy();
  version_.store(version, std::memory_order_release);
}

transport::Payload Partition::ReadState(uint64_t* version) const {
  const size_t n = config_.range.size;
  auto copy = std::make_shared<std::vector<float>>(n * (1 + state_slots_.size()));
  std::vector<float> drawn;
  std::copy_n(ReportedWeights(drawn), n, copy->data());
  for (size_t slot = 0; slot < state_slots_.size(); ++slot) {
    std::copy_n(state_slots_[slot], n, copy->data() + (slot + 1) * n);
  }
  *version = this->version();
  return transport::Payload::Shared(transport::AsBytes(absl::MakeConstSpan(*copy)), copy);
}

absl::Status Partition::CopyStateFrom(const transport::Payload& state) {
  const size_t n = config_.range.size;
  if (weights_.use_count() > 1) {
    // A pull is sending the current weights: the new ones go into a fresh buffer.
    HETPS_ASSIGN_OR_RETURN(AlignedBuffer fresh, AlignedBuffer::Allocate(n));
    weights_ = std::make_shared<AlignedBuffer>(std::move(fresh));
  }
  state.CopyTo(0, transport::AsWritableBytes(weights_->span()));
  for (size_t slot = 0; slot < state_slots_.size(); ++slot) {
    state.CopyTo((slot + 1) * n * sizeof(float),
                 transport::AsWritableBytes(absl::MakeSpan(state_slots_[slot], n)));
  }
  deferred_init_ = nullptr;
  return absl::OkStatus();
}

const float* Partition::ReportedWeights(std::vector<float>& scratch) const {
  if (deferred_init_ == nullptr) return weights_->data();
  // Not drawn yet, since nothing needed them: they stand for the initializer's values.
  scratch.resize(config_.range.size);
  FillInitialWeights(*deferred_init_, config_.range, scratch.data(), config_.kernel_pool);
  return scratch.data();
}

void Partition::TakeDeferredValues() {
  if (deferred_init_ == nullptr) return;
  // A copy that still waits for its values has sent no weights anywhere: they are its own.
  FillInitialWeights(*deferred_init_, config_.range, weights_->data(), config_.kernel_pool);
  deferred_init_ = nullptr;
}

absl::Status Partition::WriteState(uint64_t version, const transport::Payload& state) {
  const size_t n = config_.range.size;
  const size_t expected = n * (1 + state_slots_.size()) * sizeof(float);
  if (retired()) return retired_;
  if (state.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("partition %d: its weights and %d state slots take %d bytes, %d were sent",
                        config_.index, state_slots_.size(), expected, state.size()));
  }
  if (!steps_.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d holds gradients of step %d, not yet applied: write state between steps",
        config_.index, steps_.begin()->first));
  }
  HETPS_RETURN_IF_ERROR(CopyStateFrom(state));
  awaits_values_ = false;
  bf16_ = fp16_ = WireCopy();  // conversions of the old weights
  version_.store(version, std::memory_order_release);
  if (replicated()) {
    hetps::v1::ReplicatedChange change;
    change.set_kind(hetps::v1::CHANGE_KIND_WRITE_STATE);
    Replicate(std::move(change), state);
  }
  WakeWaiters();
  return absl::OkStatus();
}

}  // namespace hetps::server
