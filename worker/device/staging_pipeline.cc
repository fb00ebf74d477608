#include "worker/device/staging_pipeline.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/await.h"
#include "common/log.h"
#include "common/partitioning.h"
#include "common/status_macros.h"

namespace hetps::internal {

struct StagingPipeline::Job {
  StagedMethod method = StagedMethod::kPush;
  uint64_t step_or_version = 0;
  uint64_t sequence = 0;
  std::vector<DeviceItem> items;
  std::shared_ptr<StreamPoint> after;
  size_t remaining = 0;  // chunks not finished
  size_t unstaged = 0;   // chunks that may still read the gradients
  absl::Status status;
  absl::AnyInvocable<void(const absl::Status&)> finished;
  absl::AnyInvocable<void()> staged;
};

namespace {

bool Pushes(StagedMethod method) { return method != StagedMethod::kPull; }
bool Pulls(StagedMethod method) { return method != StagedMethod::kPush; }

// Runs start on a cache line inside their slot.
size_t AlignUp(size_t bytes) {
  constexpr size_t kAlign = kPartitionAlignElements * sizeof(float);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

absl::Status CheckDeviceItems(StagedMethod method, absl::Span<const DeviceItem> items) {
  if (items.empty()) return absl::InvalidArgumentError("no tensors given");
  for (const DeviceItem& item : items) {
    const char* missing = nullptr;
    if (Pushes(method) && item.gradient == nullptr) missing = "gradient memory";
    if (Pulls(method) && item.weights == nullptr) missing = "weights memory";
    if (item.num_elements == 0) missing = "size";
    if (missing != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %016x: no %s given", item.tensor, missing));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StagingPipeline>> StagingPipeline::Create(
    Client* client, CopyEngine* engine, size_t slot_bytes, size_t num_slots,
    absl::Duration drain_timeout) {
  if (num_slots < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "staging memory holds %d slot(s) of %d bytes (the partition size); at least 2 are needed",
        num_slots, slot_bytes));
  }
  HETPS_ASSIGN_OR_RETURN(void* staging, engine->AllocatePinned(slot_bytes * num_slots));
  return std::unique_ptr<StagingPipeline>(new StagingPipeline(
      client, engine, slot_bytes, static_cast<uint8_t*>(staging), num_slots, drain_timeout));
}

StagingPipeline::StagingPipeline(Client* client, CopyEngine* engine, size_t slot_bytes,
                                 uint8_t* staging, size_t num_slots, absl::Duration drain_timeout)
    : client_(client),
      engine_(engine),
      slot_bytes_(slot_bytes),
      staging_(staging),
      num_slots_(num_slots),
      drain_timeout_(drain_timeout),
      free_slots_(num_slots) {
  // Lowest index on top, so a quiet pipeline keeps reusing the same (cache-warm) slots.
  std::iota(free_slots_.rbegin(), free_slots_.rend(), 0);
}

StagingPipeline::~StagingPipeline() {
  // Chunks still waiting for a slot end at once; those in flight end by their messages'
  // deadlines, and their completions need this object, so it waits for them.
  Post([this] {
    closing_ = true;
    while (!waiting_.empty()) {
      std::unique_ptr<Chunk> chunk = std::move(waiting_.begin()->second);
      waiting_.erase(waiting_.begin());
      Finish(std::move(chunk), absl::CancelledError("the device client is closing"),
             /*slots_reusable=*/false);
    }
  });
  {
    absl::MutexLock lock(&mu_);
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_in_flight_ == 0; };
    while (!AwaitFor(mu_, absl::Condition(&drained), drain_timeout_)) {
      LogError("device client closing: %d operation(s) still in flight after %s", jobs_in_flight_,
               absl::FormatDuration(drain_timeout_));
    }
  }
  thread_.Stop();
}

absl::StatusOr<std::vector<StagingPipeline::Chunk>> StagingPipeline::PlanChunks(
    absl::Span<const DeviceItem> items, const std::vector<size_t>& order) {
  std::vector<Chunk> chunks;
  size_t used = slot_bytes_;  // no open chunk yet
  for (size_t item : order) {
    HETPS_ASSIGN_OR_RETURN(std::vector<TensorPartition> partitions,
                           client_->Partitions(items[item].tensor));
    const TensorPartition& last = partitions.back();
    if (last.begin + last.size != items[item].num_elements) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %016x has %d elements, %d were given", items[item].tensor,
                          last.begin + last.size, items[item].num_elements));
    }
    for (uint32_t p = 0; p < partitions.size(); ++p) {
      const size_t bytes = partitions[p].size * sizeof(float);
      if (bytes > slot_bytes_) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "a partition of %d bytes does not fit in a staging slot of %d", bytes, slot_bytes_));
      }
      const size_t offset = AlignUp(used);
      if (offset + bytes > slot_bytes_) {
        chunks.emplace_back();
        used = 0;
      } else {
        used = offset;
      }
      std::vector<Run>& runs = chunks.back().runs;
      if (!runs.empty() && runs.back().item == item) {
        Run& run = runs.back();  // the partition continues this tensor's run
        ++run.num_partitions;
        run.elements += partitions[p].size;
      } else {
        runs.push_back({item, p, 1, partitions[p].begin, partitions[p].size, used});
      }
      used += bytes;
    }
  }
  return chunks;
}

absl::Status StagingPipeline::Start(StagedMethod method, absl::Span<const DeviceItem> items,
                                    uint64_t step_or_version, std::shared_ptr<StreamPoint> after,
                                    absl::AnyInvocable<void(const absl::Status&)> finished,
                                    absl::AnyInvocable<void()> staged) {
  HETPS_RETURN_IF_ERROR(CheckDeviceItems(method, items));
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].priority > items[b].priority; });
  HETPS_ASSIGN_OR_RETURN(std::vector<Chunk> chunks, PlanChunks(items, order));

  auto job = std::make_shared<Job>();
  job->method = method;
  job->step_or_version = step_or_version;
  job->items.assign(items.begin(), items.end());
  job->after = std::move(after);
  job->remaining = chunks.size();
  job->unstaged = chunks.size();
  job->finished = std::move(finished);
  job->staged = std::move(staged);
  {
    absl::MutexLock lock(&mu_);
    job->sequence = next_job_++;
    ++jobs_in_flight_;
  }
  std::vector<std::pair<ChunkKey, std::unique_ptr<Chunk>>> keyed;
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto chunk = std::make_unique<Chunk>(std::move(chunks[i]));
    chunk->job = job;
    // A chunk takes the priority of its first tensor (chunks follow the priority order).
    const int priority = items[chunk->runs.front().item].priority;
    keyed.emplace_back(ChunkKey{-priority, job->sequence, i}, std::move(chunk));
  }
  Post([this, keyed = std::move(keyed)]() mutable {
    for (auto& [key, chunk] : keyed) waiting_.emplace(key, std::move(chunk));
    Schedule();
  });
  return absl::OkStatus();
}

void StagingPipeline::Schedule() {
  while (!waiting_.empty() && !closing_) {
    auto first = waiting_.begin();
    const StagedMethod method = first->second->job->method;
    const size_t needed = (Pushes(method) ? 1 : 0) + (Pulls(method) ? 1 : 0);
    if (free_slots_.size() < needed) break;
    std::unique_ptr<Chunk> chunk = std::move(first->second);
    waiting_.erase(first);
    if (Pushes(method)) {
      chunk->slot_gradient = free_slots_.back();
      free_slots_.pop_back();
    }
    if (Pulls(method)) {
      chunk->slot_weights = free_slots_.back();
      free_slots_.pop_back();
    }
    Launch(std::move(chunk));
  }
}

void StagingPipeline::Launch(std::unique_ptr<Chunk> chunk) {
  if (Pushes(chunk->job->method)) {
    CopyThen(std::move(chunk), CopyDirection::kToHost, &StagingPipeline::Send);
  } else {
    MarkStaged(*chunk);
    Send(std::move(chunk));
  }
}

void StagingPipeline::CopyThen(std::unique_ptr<Chunk> chunk, CopyDirection direction,
                               void (StagingPipeline::*next)(std::unique_ptr<Chunk>)) {
  const Job& job = *chunk->job;
  for (const Run& run : chunk->runs) {
    const DeviceItem& item = job.items[run.item];
    const size_t bytes = run.elements * sizeof(float);
    absl::Status copied =
        direction == CopyDirection::kToHost
            ? engine_->Copy(direction, *job.after, Slot(chunk->slot_gradient) + run.slot_offset,
                            item.gradient + run.begin, bytes)
            : engine_->Copy(direction, *job.after, item.weights + run.begin,
                            Slot(chunk->slot_weights) + run.slot_offset, bytes);
    if (!copied.ok()) {
      chunk->status = copied;
      break;
    }
  }
  // Even after a failed copy, the slots are reused only once the copies queued before it are done.
  Chunk* raw = chunk.release();
  absl::Status notified = engine_->Notify(direction, [this, raw, next, direction] {
    Post([this, raw, next, direction] {
      std::unique_ptr<Chunk> chunk(raw);
      if (direction == CopyDirection::kToHost) MarkStaged(*chunk);
      if (chunk->status.ok()) {
        (this->*next)(std::move(chunk));
      } else {
        const absl::Status status = chunk->status;
        Finish(std::move(chunk), status, /*slots_reusable=*/true);
      }
    });
  });
  if (!notified.ok()) {
    std::unique_ptr<Chunk> chunk(raw);
    Finish(std::move(chunk), notified, /*slots_reusable=*/false);
  }
}

void StagingPipeline::Send(std::unique_ptr<Chunk> chunk) {
  const Job& job = *chunk->job;
  std::vector<PushItem> pushes;
  std::vector<PullItem> pulls;
  for (const Run& run : chunk->runs) {
    const TensorId tensor = job.items[run.item].tensor;
    const PartitionSpan span{run.first_partition, run.num_partitions};
    if (Pushes(job.method)) {
      auto* values = reinterpret_cast<const float*>(Slot(chunk->slot_gradient) + run.slot_offset);
      pushes.push_back({tensor, absl::MakeConstSpan(values, run.elements), span});
    }
    if (Pulls(job.method)) {
      auto* values = reinterpret_cast<float*>(Slot(chunk->slot_weights) + run.slot_offset);
      pulls.push_back({tensor, absl::MakeSpan(values, run.elements), span});
    }
  }
  const uint64_t step = job.step_or_version;
  Chunk* raw = chunk.release();
  DoneCallback arrived = [this, raw](const absl::Status& status) {
    Post([this, raw, status] { Arrived(std::unique_ptr<Chunk>(raw), status); });
  };
  switch (job.method) {
    case StagedMethod::kPush:
      client_->Push(pushes, step, std::move(arrived));
      break;
    case StagedMethod::kPull:
      client_->Pull(pulls, step, std::move(arrived));
      break;
    case StagedMethod::kPushPull:
      client_->PushPull(pushes, pulls, step, std::move(arrived));
      break;
  }
}

void StagingPipeline::Arrived(std::unique_ptr<Chunk> chunk, const absl::Status& status) {
  if (!status.ok() || !Pulls(chunk->job->method)) {
    Finish(std::move(chunk), status, /*slots_reusable=*/true);
    return;
  }
  CopyThen(std::move(chunk), CopyDirection::kToDevice, &StagingPipeline::Landed);
}

void StagingPipeline::Landed(std::unique_ptr<Chunk> chunk) {
  Finish(std::move(chunk), absl::OkStatus(), /*slots_reusable=*/true);
}

void StagingPipeline::Finish(std::unique_ptr<Chunk> chunk, const absl::Status& status,
                             bool slots_reusable) {
  if (slots_reusable) {
    for (int slot : {chunk->slot_gradient, chunk->slot_weights}) {
      if (slot >= 0) free_slots_.push_back(slot);
    }
  }
  MarkStaged(*chunk);  // a chunk that ends early never reads the gradients
  Job& job = *chunk->job;
  if (job.status.ok() && !status.ok()) job.status = status;
  if (--job.remaining == 0) {
    job.finished(job.status);
    absl::MutexLock lock(&mu_);
    --jobs_in_flight_;
  }
  Schedule();
}

void StagingPipeline::MarkStaged(Chunk& chunk) {
  if (chunk.staged) return;
  chunk.staged = true;
  Job& job = *chunk.job;
  if (--job.unstaged == 0 && job.staged) job.staged();
}

}  // namespace hetps::internal
