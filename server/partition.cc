#include "server/partition.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace hetps::server {

absl::StatusOr<std::unique_ptr<Partition>> Partition::Create(const Config& config,
                                                             AlignedBuffer weights) {
  const size_t state_floats =
      static_cast<size_t>(config.optimizer->state_slots()) * config.range.size;
  HETPS_ASSIGN_OR_RETURN(AlignedBuffer state, AlignedBuffer::AllocateZeroed(state_floats));
  return std::unique_ptr<Partition>(new Partition(config, std::move(weights), std::move(state)));
}

Partition::Partition(const Config& config, AlignedBuffer weights, AlignedBuffer state)
    : config_(config),
      weights_(std::make_shared<AlignedBuffer>(std::move(weights))),
      state_(std::move(state)),
      awaits_values_(config.awaits_values),
      applied_(config.num_workers) {
  for (int slot = 0; slot < config_.optimizer->state_slots(); ++slot) {
    state_slots_.push_back(state_.data() + slot * config_.range.size);
  }
}

absl::StatusOr<Partition::HeldGradient> Partition::Hold(transport::Payload gradient) {
  HeldGradient held;
  if (gradient.segments().size() == 1 &&
      reinterpret_cast<uintptr_t>(gradient.segments()[0].data()) % alignof(float) == 0) {
    held.data = reinterpret_cast<const float*>(gradient.segments()[0].data());
    held.payload = std::move(gradient);
    return held;
  }
  if (!spare_buffers_.empty()) {
    held.copy = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  } else {
    HETPS_ASSIGN_OR_RETURN(held.copy, AlignedBuffer::Allocate(config_.range.size));
  }
  gradient.CopyTo(0, transport::AsWritableBytes(held.copy.span()));
  held.data = held.copy.data();
  return held;
}

void Partition::Release(HeldGradient& gradient) {
  if (gradient.copy.size() > 0) spare_buffers_.push_back(std::move(gradient.copy));
  gradient = HeldGradient();
}

absl::Status Partition::Push(uint32_t rank, uint64_t step, uint64_t sequence,
                             transport::Payload gradient) {
  if (config_.sync_mode == hetps::v1::SYNC_MODE_ASP) {
    if (!applied_[rank].IsNew(sequence)) return absl::OkStatus();  // a retry
    HETPS_ASSIGN_OR_RETURN(HeldGradient held, Hold(std::move(gradient)));
    applied_[rank].Mark(sequence);
    const float* gradients[] = {held.data};
    Apply(gradients);
    Release(held);
    WakeWaiters();
    return absl::OkStatus();
  }
  if (step < version()) return absl::OkStatus();  // that step is applied: a retry
  Step& pending = steps_[step];
  if (pending.gradients.empty()) pending.gradients.resize(config_.num_workers);
  if (pending.gradients[rank].data != nullptr) return absl::OkStatus();  // a retry
  absl::StatusOr<HeldGradient> held = Hold(std::move(gradient));
  if (!held.ok()) {
    if (pending.received == 0) steps_.erase(step);
    return held.status();
  }
  pending.gradients[rank] = *std::move(held);
  ++pending.received;
  ApplyCompleteSteps();
  return absl::OkStatus();
}

void Partition::ApplyCompleteSteps() {
  bool applied = false;
  for (auto it = steps_.find(version());
       it != steps_.end() && it->second.received == config_.num_workers;
       it = steps_.find(version())) {
    std::vector<const float*> gradients;
    gradients.reserve(config_.num_workers);
    for (const HeldGradient& held : it->second.gradients) gradients.push_back(held.data);
    Apply(gradients);
    for (HeldGradient& held : it->second.gradients) Release(held);
    steps_.erase(it);
    applied = true;
  }
  if (applied) WakeWaiters();
}

void Partition::Apply(absl::Span<const float* const> gradients) {
  // Pulls being sent still refer to the current buffer: then write the new weights into a fresh
  // one instead of in place. Only this thread adds references, so use_count() == 1 is exclusive.
  std::shared_ptr<AlignedBuffer> out = weights_;
  if (weights_.use_count() > 2) {  // weights_ and `out`
    absl::StatusOr<AlignedBuffer> fresh = AlignedBuffer::Allocate(config_.range.size);
    if (fresh.ok()) {
      out = std::make_shared<AlignedBuffer>(*std::move(fresh));
    } else {
      LogWarning("partition %d: %s; updating in place while a pull is being sent", config_.index,
                 fresh.status().ToString());
    }
  }
  UpdateArgs args;
  args.weights_in = weights_->data();
  args.weights_out = out->data();
  args.gradients = gradients;
  args.state = state_slots_;
  args.size = config_.range.size;
  args.step = version();
  config_.optimizer->Update(args);
  weights_ = std::move(out);
  version_.store(version() + 1, std::memory_order_release);
}

void Partition::SetInitialValues(const transport::Payload& values) {
  if (!awaits_values_ || version() != 0) return;
  awaits_values_ = false;
  if (weights_.use_count() > 1) {
    // A pull is sending the zeros: write the values into a fresh buffer.
    absl::StatusOr<AlignedBuffer> fresh = AlignedBuffer::Allocate(config_.range.size);
    if (fresh.ok()) weights_ = std::make_shared<AlignedBuffer>(*std::move(fresh));
  }
  values.CopyTo(0, transport::AsWritableBytes(weights_->span()));
}

void Partition::Pull(uint64_t min_version, std::shared_ptr<PendingRequest> request, size_t slot) {
  if (version() >= min_version) {
    request->CompleteItem(slot, Snapshot());
    return;
  }
  // Drop waiters whose requests already ended (deadline) so they cannot pile up.
  std::erase_if(waiters_, [](const Waiter& w) { return w.request->finished(); });
  waiters_.push_back(Waiter{min_version, std::move(request), slot});
}

void Partition::WakeWaiters() {
  const uint64_t now = version();
  std::vector<Waiter> ready;
  std::erase_if(waiters_, [&](Waiter& w) {
    if (w.request->finished()) return true;
    if (w.min_version > now) return false;
    ready.push_back(std::move(w));
    return true;
  });
  for (Waiter& w : ready) w.request->CompleteItem(w.slot, Snapshot());
}

void Partition::FailWaiters(const absl::Status& status) {
  std::vector<Waiter> waiters = std::move(waiters_);
  waiters_.clear();
  for (Waiter& w : waiters) w.request->Fail(status);
}

}  // namespace hetps::server
