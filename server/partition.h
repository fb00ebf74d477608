// Partition: one partition of a tensor on this shard. It holds the fp32 master weights, the
// optimizer's state, its version (optimizer steps applied) and, in BSP, the gradients of the
// steps still being gathered.
//
// BSP: the W gradients of step s are kept until all have arrived, then summed in rank order and
// applied once; the version becomes s + 1. A gradient for a step already applied, or a second
// one from the same worker for the same step, is recognised as a retry and ignored.
// ASP: each push is applied on arrival; a push whose sequence number was already applied from
// that worker is recognised as a retry and ignored (see ReplayWindow).
//
// Thread model: a partition belongs to one owner thread (owner()). Push and Pull run only
// there, so the update needs no lock. version() may be read from any thread.
#ifndef HETPS_SERVER_PARTITION_H_
#define HETPS_SERVER_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/aligned_buffer.h"
#include "common/partitioning.h"
#include "optimizer/optimizer.h"
#include "proto/ps.pb.h"
#include "server/pending_request.h"
#include "server/replay_window.h"
#include "transport/payload.h"

namespace hetps::server {

class Partition {
 public:
  struct Config {
    uint32_t index = 0;
    PartitionRange range;
    hetps::v1::SyncMode sync_mode = hetps::v1::SYNC_MODE_BSP;
    uint32_t num_workers = 1;
    const Optimizer* optimizer = nullptr;  // owned by the tensor; outlives the partition
    size_t owner = 0;                      // index of the owner thread
    bool awaits_values = false;            // initial values will be sent by the workers
  };

  // `weights` holds the initial values (range.size floats). ResourceExhausted if the
  // optimizer state cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Partition>> Create(const Config& config,
                                                           AlignedBuffer weights);

  // Any thread.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  size_t owner() const { return config_.owner; }
  uint32_t index() const { return config_.index; }
  uint64_t num_elements() const { return config_.range.size; }
  uint64_t parameter_bytes() const { return config_.range.size * sizeof(float); }
  uint64_t state_bytes() const { return state_.size_bytes(); }

  // Owner thread only.
  //
  // Takes worker `rank`'s gradient (num_elements() floats). ResourceExhausted if it cannot be
  // held; nothing changes then.
  absl::Status Push(uint32_t rank, uint64_t step, uint64_t sequence, transport::Payload gradient);
  // Completes `slot` of `request` with the weights once version() >= min_version.
  void Pull(uint64_t min_version, std::shared_ptr<PendingRequest> request, size_t slot);
  // Sets the initial weights (num_elements() floats) if the partition still awaits them and no
  // step has been applied; otherwise does nothing (the first values win).
  void SetInitialValues(const transport::Payload& values);
  // Fails every waiting pull with `status` (shutdown).
  void FailWaiters(const absl::Status& status);

  WeightsSnapshot Snapshot() const { return {weights_, version()}; }

 private:
  // A gradient kept for a BSP step: the received bytes themselves when they are one aligned
  // piece, otherwise a copy.
  struct HeldGradient {
    transport::Payload payload;
    AlignedBuffer copy;
    const float* data = nullptr;
  };
  struct Step {
    std::vector<HeldGradient> gradients;  // by rank
    uint32_t received = 0;
  };
  struct Waiter {
    uint64_t min_version;
    std::shared_ptr<PendingRequest> request;
    size_t slot;
  };

  Partition(const Config& config, AlignedBuffer weights, AlignedBuffer state);

  absl::StatusOr<HeldGradient> Hold(transport::Payload gradient);
  void Release(HeldGradient& gradient);
  // Runs the optimizer on the gradients (summed in the order given) and bumps the version.
  void Apply(absl::Span<const float* const> gradients);
  void ApplyCompleteSteps();
  void WakeWaiters();

  const Config config_;
  std::shared_ptr<AlignedBuffer> weights_;
  AlignedBuffer state_;
  std::vector<float*> state_slots_;
  std::atomic<uint64_t> version_{0};
  bool awaits_values_;
  std::map<uint64_t, Step> steps_;            // BSP steps being gathered
  std::vector<ReplayWindow> applied_;         // ASP: by rank
  std::vector<AlignedBuffer> spare_buffers_;  // reused gradient copies
  std::vector<Waiter> waiters_;
};

}  // namespace hetps::server

#endif  // HETPS_SERVER_PARTITION_H_
