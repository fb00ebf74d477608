#include "server/partition.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/cycle_clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "server/request_util.h"

namespace hetps::server {

uint64_t Partition::BookkeepingBytes(uint32_t num_workers) {
  // The object, its heap-allocated members' headers, and per-worker state that lives as long
  // as the partition (runs_) or comes and goes with the steps (a gradient slot per worker).
  return sizeof(Partition) + 256 +
         uint64_t{num_workers} * (sizeof(WorkerRun) + sizeof(HeldGradient));
}

absl::StatusOr<std::unique_ptr<Partition>> Partition::Create(const Config& config,
                                                             AlignedBuffer weights) {
  const size_t state_floats =
      static_cast<size_t>(config.optimizer->state_slots()) * config.range.size;
  HETPS_ASSIGN_OR_RETURN(AlignedBuffer state, AlignedBuffer::Allocate(state_floats));
  auto partition =
      std::unique_ptr<Partition>(new Partition(config, std::move(weights), std::move(state)));
  if (config.checkpoint && !config.backup) {
    // The first checkpoint's copy on write finds its buffer in memory already (zeroed now, at
    // declaration, rather than faulted in during a step). A backup's is allocated when it is
    // needed, after a takeover.
    HETPS_ASSIGN_OR_RETURN(AlignedBuffer spare, AlignedBuffer::AllocateZeroed(config.range.size));
    partition->spare_weights_ = std::make_shared<AlignedBuffer>(std::move(spare));
  }
  return partition;
}

Partition::Partition(const Config& config, AlignedBuffer weights, AlignedBuffer state)
    : config_(config),
      backup_(config.backup),
      replicating_(config.replicate != nullptr && config.replicating && !config.backup),
      deferred_init_(config.deferred_init),
      weights_(std::make_shared<AlignedBuffer>(std::move(weights))),
      state_(std::move(state)),
      awaits_values_(config.awaits_values),
      runs_(config.num_workers),
      runs_sent_(config.num_workers, 0) {
  for (int slot = 0; slot < config_.optimizer->state_slots(); ++slot) {
    state_slots_.push_back(state_.data() + slot * config_.range.size);
  }
  config_.optimizer->InitializeState(state_slots_, config_.range.size);
  schedule_.emplace_back(0, config_.optimizer);
}

absl::StatusOr<Partition::HeldGradient> Partition::Hold(FloatFormat format,
                                                        transport::Payload gradient) {
  HeldGradient held;
  held.held = true;
  held.format = format;
  held.payload = std::move(gradient);
  const auto& segments = held.payload.segments();
  const bool whole =
      segments.size() == 1 && reinterpret_cast<uintptr_t>(segments[0].data()) % alignof(float) == 0;
  if (whole && format == FloatFormat::kFp32) {
    held.data = reinterpret_cast<const float*>(segments[0].data());
    return held;
  }
  // Apply widens 16-bit values and gathers scattered ones (gRPC's receive buffers) as it goes,
  // with no copy of the whole. A replicated partition forwards fp32 values, so widens and
  // gathers them once, here.
  if (!replicated()) return held;
  HETPS_RETURN_IF_ERROR(Widen(held));
  return held;
}

absl::Status Partition::Widen(HeldGradient& held) {
  if (held.data != nullptr) return absl::OkStatus();
  if (!spare_buffers_.empty()) {
    held.copy = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  } else {
    HETPS_ASSIGN_OR_RETURN(held.copy, AlignedBuffer::Allocate(config_.range.size));
  }
  held.payload.ConvertTo(0, held.format, held.copy.data(), FloatFormat::kFp32, config_.range.size);
  held.payload = transport::Payload();
  held.format = FloatFormat::kFp32;
  held.data = held.copy.data();
  return absl::OkStatus();
}

void Partition::Release(HeldGradient& gradient) {
  if (gradient.copy.size() > 0) spare_buffers_.push_back(std::move(gradient.copy));
  gradient = HeldGradient();
}

absl::StatusOr<uint64_t> Partition::Push(const PushOrigin& origin, FloatFormat format,
                                         transport::Payload gradient) {
  if (retired()) return retired_;
  return config_.sync_mode == hetps::v1::SYNC_MODE_ASP
             ? PushAsp(origin, format, std::move(gradient))
             : PushBsp(origin, format, std::move(gradient));
}

absl::StatusOr<uint64_t> Partition::PushAsp(const PushOrigin& origin, FloatFormat format,
                                            transport::Payload gradient) {
  WorkerRun& run = runs_[origin.rank];
  // Another run numbers its pushes from 1 again: what the last one sent says nothing about it.
  const bool new_run = origin.incarnation != run.incarnation;
  const ReplayWindow& window = new_run ? ReplayWindow() : run.applied;
  switch (window.Judge(origin.sequence)) {
    case ReplayWindow::kSeen:
      return 0;  // a retry of a push that was applied
    case ReplayWindow::kTooOld:
      if (origin.sequence == 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("partition %d: push sequence numbers start at 1", config_.index));
      }
      return absl::AbortedError(absl::StrFormat(
          "partition %d: push %d of worker %d is too old to tell from a retry (its newest is %d; "
          "the last %d are remembered): not applied",
          config_.index, origin.sequence, origin.rank, window.highest(), ReplayWindow::kSize));
    case ReplayWindow::kTooFarAhead:
      return absl::InvalidArgumentError(absl::StrFormat(
          "partition %d: push sequence %d of worker %d jumps more than 2^32 past its newest (%d)",
          config_.index, origin.sequence, origin.rank, window.highest()));
    case ReplayWindow::kNew:
      break;
  }
  HETPS_ASSIGN_OR_RETURN(HeldGradient held, Hold(format, std::move(gradient)));
  if (new_run) run = WorkerRun{origin.incarnation, ReplayWindow()};
  run.applied.Mark(origin.sequence);
  Apply(absl::MakeConstSpan(&held, 1));
  if (replicated()) {
    hetps::v1::ReplicatedChange change;
    change.set_kind(hetps::v1::CHANGE_KIND_ASP_PUSH);
    change.set_rank(origin.rank);
    change.set_incarnation(origin.incarnation);
    change.set_sequence(origin.sequence);
    Replicate(std::move(change), KeepValues(held));
  }
  Release(held);
  WakeWaiters();
  return 0;
}

absl::StatusOr<uint64_t> Partition::PushBsp(const PushOrigin& origin, FloatFormat format,
                                            transport::Payload gradient) {
  WorkerRun& run = runs_[origin.rank];
  const uint64_t step = origin.step;
  const bool new_run = origin.incarnation != run.incarnation;
  if (step < version()) {
    // Step `step` was applied, so this worker's gradient for it arrived: from this run, this is
    // a retry. A run that never pushed here before cannot have sent it.
    if (!new_run) return step + 1;
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d has applied %d steps; step %d of worker %d is not from the run that "
        "pushed it: the shard holds the state of an earlier run of the job (restart the shards "
        "or use another --job_id), or the worker restarted behind the others (pull and go on "
        "from step %d)",
        config_.index, version(), step, origin.rank, version()));
  }
  Step& pending = steps_[step];
  if (pending.gradients.empty()) {
    pending.gradients = std::move(spare_gradients_);
    pending.gradients.resize(config_.num_workers);
  }
  HeldGradient& slot = pending.gradients[origin.rank];
  if (slot.held && !new_run) return step + 1;  // a retry
  absl::StatusOr<HeldGradient> held = Hold(format, std::move(gradient));
  if (!held.ok()) {
    if (pending.received == 0) steps_.erase(step);
    return held.status();
  }
  run.incarnation = origin.incarnation;
  if (slot.held) {
    Release(slot);  // a new run's gradient replaces the one its predecessor left
  } else {
    ++pending.received;
  }
  slot = *std::move(held);
  ApplyCompleteSteps();
  return step + 1;
}

void Partition::ApplyCompleteSteps() {
  bool applied = false;
  for (auto it = steps_.find(version());
       it != steps_.end() && it->second.received == config_.num_workers;
       it = steps_.find(version())) {
    const std::vector<HeldGradient>& gradients = it->second.gradients;
    if (!replicated()) {
      Apply(gradients);
    } else {
      // The backup applies the sum the update ran on: one gradient, read as it is.
      hetps::v1::ReplicatedChange change;
      change.set_kind(hetps::v1::CHANGE_KIND_STEP);
      for (uint32_t rank = 0; rank < config_.num_workers; ++rank) {
        if (runs_[rank].incarnation == runs_sent_[rank]) continue;
        runs_sent_[rank] = runs_[rank].incarnation;
        hetps::v1::WorkerRunChange* run = change.add_runs();
        run->set_rank(rank);
        run->set_incarnation(runs_[rank].incarnation);
      }
      transport::Payload sum;
      if (gradients.size() == 1) {
        Apply(gradients);
        sum = KeepValues(it->second.gradients[0]);
      } else {
        if (spare_sum_ == nullptr || spare_sum_.use_count() > 1) {
          absl::StatusOr<AlignedBuffer> buffer = AlignedBuffer::Allocate(config_.range.size);
          // The shard's reservation counts this buffer: failing here is the allocator failing
          // outright, as a failed operator new would.
          if (!buffer.ok()) {
            LogError("partition %d: %s", config_.index, buffer.status().ToString());
            std::abort();
          }
          spare_sum_ = std::make_shared<AlignedBuffer>(*std::move(buffer));
        }
        Apply(gradients, spare_sum_->data());
        const AlignedBuffer& buffer = *spare_sum_;
        sum = transport::Payload::Shared(transport::AsBytes(buffer.span()), spare_sum_);
      }
      Replicate(std::move(change), std::move(sum));
    }
    for (HeldGradient& held : it->second.gradients) Release(held);
    spare_gradients_ = std::move(it->second.gradients);
    spare_gradients_.clear();
    steps_.erase(it);
    applied = true;
    CheckpointIfDue();
  }
  if (applied) WakeWaiters();
}

const Optimizer& Partition::OptimizerForNextStep() {
  const uint64_t next = version();
  // Entries are ascending; drop those that a later entry has replaced for good.
  while (schedule_.size() > 1 && schedule_[1].first <= next) schedule_.erase(schedule_.begin());
  return *schedule_.front().second;
}

void Partition::Apply(absl::Span<const HeldGradient> gradients, float* gradient_sum_out) {
  // Pulls being sent still refer to the current buffer: then write the new weights into a fresh
  // one instead of in place. Only this thread adds references, so use_count() == 1 is exclusive.
  std::shared_ptr<AlignedBuffer> out = weights_;
  if (weights_.use_count() > 2) {  // weights_ and `out`
    if (spare_weights_ != nullptr && spare_weights_.use_count() == 1) {
      // Let go by the checkpoint that held it: in memory already, no page to fault in.
      std::atomic_thread_fence(std::memory_order_acquire);
      out = std::move(spare_weights_);
    } else {
      absl::StatusOr<AlignedBuffer> fresh = AlignedBuffer::Allocate(config_.range.size);
      if (fresh.ok()) {
        out = std::make_shared<AlignedBuffer>(*std::move(fresh));
      } else {
        LogWarning("partition %d: %s; updating in place while a pull is being sent", config_.index,
                   fresh.status().ToString());
      }
    }
    // A checkpointed partition keeps the buffer it leaves for the next copy on write.
    if (config_.checkpoint && out != weights_) spare_weights_ = weights_;
  }
  absl::InlinedVector<const float*, 8> values;
  absl::InlinedVector<StreamedGradient, 8> streamed(gradients.size());
  bool any_streamed = false;
  for (size_t i = 0; i < gradients.size(); ++i) {
    values.push_back(gradients[i].data);
    if (gradients[i].data != nullptr) continue;
    any_streamed = true;
    const absl::Span<const transport::ByteSpan> segments = gradients[i].payload.segments();
    streamed[i].format = gradients[i].format;
    if (segments.size() == 1 && gradients[i].format != FloatFormat::kFp32 &&
        reinterpret_cast<uintptr_t>(segments[0].data()) % alignof(uint16_t) == 0) {
      streamed[i].values = reinterpret_cast<const uint16_t*>(segments[0].data());
    } else {
      streamed[i].pieces = segments;
    }
  }
  const Optimizer& rule = OptimizerForNextStep();
  UpdateArgs args;
  args.weights_in = weights_->data();
  args.weights_out = out->data();
  args.gradients = values;
  if (any_streamed) args.streamed_gradients = streamed;
  args.state = state_slots_;
  args.size = config_.range.size;
  args.step = version();
  args.gradient_sum_out = gradient_sum_out;
  if (wire_format_ != FloatFormat::kFp32) {
    args.narrow_format = wire_format_;
    args.narrow_weights_out = PrepareWireCopy(wire_format_, version() + 1);
  }
  const int64_t start = config_.apply_duration != nullptr ? CycleClock::Now() : 0;
  if (config_.kernel_pool != nullptr && args.size >= kParallelElements) {
    config_.kernel_pool->ParallelFor(
        args.size, kPartitionAlignElements,
        [&rule, &args](size_t begin, size_t end) { UpdateRange(rule, args, begin, end); });
  } else {
    rule.Update(args);
  }
  if (start != 0) config_.apply_duration->ObserveTicks(CycleClock::Now() - start);
  weights_ = std::move(out);
  version_.store(version() + 1, std::memory_order_release);
}

uint16_t* Partition::PrepareWireCopy(FloatFormat format, uint64_t version) {
  WireCopy& copy = format == FloatFormat::kBf16 ? bf16_ : fp16_;
  if (copy.values == nullptr || copy.values.use_count() > 1) {
    // A pull still sends the last copy (or there is none): a buffer of its own, uninitialised.
    copy.values.reset(new uint16_t[config_.range.size]);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);  // the sender's last read is done
  }
  copy.version = version;
  return copy.values.get();
}

absl::Status Partition::Reschedule(uint64_t from_version,
                                   std::shared_ptr<const Optimizer> optimizer) {
  if (retired()) return retired_;
  if (version() > from_version) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "partition %d is at version %d: too late to change the optimizer from version %d on",
        config_.index, version(), from_version));
  }
  auto it =
      std::lower_bound(schedule_.begin(), schedule_.end(), from_version,
                       [](const auto& entry, uint64_t version) { return entry.first < version; });
  if (it != schedule_.end() && it->first == from_version) {
    it->second = std::move(optimizer);
  } else {
    schedule_.emplace(it, from_version, std::move(optimizer));
  }
  return absl::OkStatus();
}

void Partition::SetInitialValues(const transport::Payload& values) {
  if (retired() || !awaits_values_ || version() != 0) return;
  awaits_values_ = false;
  deferred_init_ = nullptr;
  bf16_ = fp16_ = WireCopy();  // conversions of the zeros are stale now
  if (weights_.use_count() > 1) {
    // A pull is sending the zeros: write the values into a fresh buffer.
    absl::StatusOr<AlignedBuffer> fresh = AlignedBuffer::Allocate(config_.range.size);
    if (fresh.ok()) weights_ = std::make_shared<AlignedBuffer>(*std::move(fresh));
  }
  values.CopyTo(0, transport::AsWritableBytes(weights_->span()));
}

WeightsSnapshot Partition::Snapshot(FloatFormat format) {
  if (format == FloatFormat::kFp32) {
    const AlignedBuffer& weights = *weights_;
    return {transport::Payload::Shared(transport::AsBytes(weights.span()), weights_), version()};
  }
  wire_format_ = format;
  WireCopy& copy = format == FloatFormat::kBf16 ? bf16_ : fp16_;
  if (copy.values == nullptr || copy.version != version()) {
    uint16_t* values = PrepareWireCopy(format, version());
    ConvertFloats(weights_->data(), FloatFormat::kFp32, values, format, config_.range.size);
  }
  const auto bytes = transport::AsBytes(absl::MakeConstSpan(copy.values.get(), config_.range.size));
  return {transport::Payload::Shared(bytes, copy.values), version()};
}

void Partition::Pull(uint64_t min_version, FloatFormat format,
                     std::shared_ptr<PendingRequest> request, size_t slot) {
  if (retired()) {
    request->Fail(retired_);
    return;
  }
  if (served_version() >= min_version) {
    request->CompleteItem(slot, Snapshot(format));
    return;
  }
  // Drop waiters whose requests already ended (deadline) so they cannot pile up.
  std::erase_if(waiters_, [](const Waiter& w) { return w.request->finished(); });
  request->WaitsForVersion();
  waiters_.push_back(Waiter{min_version, format, std::move(request), slot});
}

void Partition::WakeWaiters() {
  const uint64_t now = served_version();
  std::vector<Waiter> ready;
  std::erase_if(waiters_, [&](Waiter& w) {
    if (w.request->finished()) return true;
    if (w.min_version > now || w.min_replicated > changes_replicated_) return false;
    ready.push_back(std::move(w));
    return true;
  });
  for (Waiter& w : ready) {
    if (w.ack_only) {
      w.request->CompleteItem(w.slot);
    } else {
      w.request->CompleteItem(w.slot, Snapshot(w.format));
    }
  }
}

uint64_t Partition::Digest() const {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  auto add = [&hash](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      hash ^= static_cast<const uint8_t*>(data)[i];
      hash *= 0x100000001b3ull;
    }
  };
  std::vector<float> drawn;
  add(ReportedWeights(drawn), config_.range.size * sizeof(float));
  add(state_.data(), state_.size_bytes());
  const uint64_t now = version();
  add(&now, sizeof(now));
  for (const WorkerRun& run : runs_) {
    const uint64_t values[] = {run.incarnation, run.applied.highest()};
    add(values, sizeof(values));
  }
  for (uint64_t step = now; step < now + 64; ++step) {
    auto it = steps_.find(step);
    if (it == steps_.end()) continue;
    add(&step, sizeof(step));
    for (const HeldGradient& held : it->second.gradients) {
      if (held.data != nullptr) {
        add(held.data, config_.range.size * sizeof(float));
      } else if (held.held) {
        const std::string bytes = held.payload.ToString();
        add(bytes.data(), bytes.size());
      }
    }
  }
  return hash;
}

std::string Partition::DescribeWait(uint64_t min_version) const {
  const uint64_t now = version();
  if (now >= min_version) {
    if (served_version() >= min_version && changes_replicated_ >= changes_made_) return "";
    return absl::StrFormat(
        "partition %d is at version %d, of which its backup shard has confirmed version %d "
        "(%d of %d changes)",
        config_.index, now, served_version(), changes_replicated_, changes_made_);
  }
  if (config_.sync_mode == hetps::v1::SYNC_MODE_ASP) {
    return absl::StrFormat("partition %d is at version %d, the pull wants %d (any worker's push)",
                           config_.index, now, min_version);
  }
  std::vector<uint32_t> missing;
  auto step = steps_.find(now);
  for (uint32_t rank = 0; rank < config_.num_workers; ++rank) {
    if (step == steps_.end() || !step->second.gradients[rank].held) {
      missing.push_back(rank);
    }
  }
  return absl::StrFormat("partition %d is at version %d: step %d waits for worker(s) %s",
                         config_.index, now, now, DescribeRanks(missing));
}

void Partition::FailWaiters(const absl::Status& status) {
  std::vector<Waiter> waiters = std::move(waiters_);
  waiters_.clear();
  for (Waiter& w : waiters) w.request->Fail(status);
}

void Partition::Retire(absl::Status why) {
  if (retired()) return;
  retired_ = std::move(why);
  checkpoint_at_.clear();
  steps_.clear();
  unsent_.clear();
  // A copy to a new backup in progress: nothing is left to copy.
  if (copied_) std::exchange(copied_, nullptr)(true);
  FailWaiters(retired_);
}

}  // namespace hetps::server
