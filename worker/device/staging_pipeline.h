// StagingPipeline: moves tensors between device memory and the shards through a fixed pool of
// pinned staging slots, a chunk at a time.
//
// A chunk is a run of partitions that fills one slot (small tensors share one; a partition is
// never split). Per chunk: copy to the slot (push), send it as soon as that copy is done, and on
// the answer copy the pulled weights back to the device (pull); meanwhile the other chunks copy
// and travel. Chunks wait for free slots in priority order (higher priority first, then the
// order of the calls), so a later call with a higher priority overtakes queued ones.
//
// Its state lives on one thread (a TaskThread), fed by the copy engine's and the client's
// completions, so it takes no lock. Thread-safe to call.
#ifndef HETPS_WORKER_DEVICE_STAGING_PIPELINE_H_
#define HETPS_WORKER_DEVICE_STAGING_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/task_thread.h"
#include "worker/client.h"
#include "worker/device/copy_engine.h"
#include "worker/device_client.h"

namespace hetps::internal {

enum class StagedMethod { kPush, kPull, kPushPull };

// InvalidArgument unless there are items and each has a size and the memory `method` reads
// (gradients) and writes (weights).
absl::Status CheckDeviceItems(StagedMethod method, absl::Span<const DeviceItem> items);

class StagingPipeline {
 public:
  // `client` and `engine` must outlive the pipeline. `slot_bytes` is the client's
  // partition_bytes, so any partition fits in one slot.
  static absl::StatusOr<std::unique_ptr<StagingPipeline>> Create(Client* client, CopyEngine* engine,
                                                                 size_t slot_bytes,
                                                                 size_t num_slots,
                                                                 absl::Duration drain_timeout);
  // Ends the chunks still waiting for a slot with Cancelled and waits for those in flight (each
  // ends by its message's deadline), logging every drain_timeout while it waits.
  ~StagingPipeline();

  // Checks `items` and starts moving them; the copies start after `after`. `finished` runs once,
  // on the pipeline's thread, when every chunk is done (for a pull: its weights are on the
  // device); `staged`, if given, runs before it, once no chunk will read the gradients any more.
  // Errors found before anything moved are returned and neither is called.
  absl::Status Start(StagedMethod method, absl::Span<const DeviceItem> items,
                     uint64_t step_or_version, std::shared_ptr<StreamPoint> after,
                     absl::AnyInvocable<void(const absl::Status&)> finished,
                     absl::AnyInvocable<void()> staged = nullptr);

 private:
  // Consecutive partitions of one tensor inside a chunk.
  struct Run {
    size_t item = 0;
    uint32_t first_partition = 0;
    uint32_t num_partitions = 0;
    uint64_t begin = 0;  // first element in the tensor
    uint64_t elements = 0;
    size_t slot_offset = 0;  // bytes
  };
  struct Job;
  struct Chunk {
    std::shared_ptr<Job> job;
    std::vector<Run> runs;
    int slot_gradient = -1;
    int slot_weights = -1;
    bool staged = false;  // its gradients are in its slot (or will never be read)
    absl::Status status;
  };
  // Priority (negated, so higher comes first), call sequence, chunk index.
  using ChunkKey = std::tuple<int, uint64_t, size_t>;

  StagingPipeline(Client* client, CopyEngine* engine, size_t slot_bytes, uint8_t* staging,
                  size_t num_slots, absl::Duration drain_timeout);

  absl::StatusOr<std::vector<Chunk>> PlanChunks(absl::Span<const DeviceItem> items,
                                                const std::vector<size_t>& order);
  // The steps of a chunk, all on thread_.
  void Schedule();
  void Launch(std::unique_ptr<Chunk> chunk);
  void Send(std::unique_ptr<Chunk> chunk);
  void Arrived(std::unique_ptr<Chunk> chunk, const absl::Status& status);
  void Landed(std::unique_ptr<Chunk> chunk);
  void Finish(std::unique_ptr<Chunk> chunk, const absl::Status& status, bool slots_reusable);
  void MarkStaged(Chunk& chunk);
  // Queues the copies of a chunk's runs in `direction`, then a notification that continues with
  // `next` (posted to thread_).
  void CopyThen(std::unique_ptr<Chunk> chunk, CopyDirection direction,
                void (StagingPipeline::*next)(std::unique_ptr<Chunk>));
  uint8_t* Slot(int index) const { return staging_ + static_cast<size_t>(index) * slot_bytes_; }
  // Runs `task` on thread_; a task refused after Stop() is dropped, which only happens once
  // every job is done.
  void Post(absl::AnyInvocable<void()> task) { thread_.Post(std::move(task)); }

  Client* const client_;
  CopyEngine* const engine_;
  const size_t slot_bytes_;
  uint8_t* const staging_;
  const size_t num_slots_;
  const absl::Duration drain_timeout_;

  // Owned by thread_.
  std::vector<int> free_slots_;
  std::map<ChunkKey, std::unique_ptr<Chunk>> waiting_;
  bool closing_ = false;

  mutable absl::Mutex mu_;
  uint64_t next_job_ ABSL_GUARDED_BY(mu_) = 0;
  size_t jobs_in_flight_ ABSL_GUARDED_BY(mu_) = 0;

  TaskThread thread_{"staging"};
};

}  // namespace hetps::internal

#endif  // HETPS_WORKER_DEVICE_STAGING_PIPELINE_H_
