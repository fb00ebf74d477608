// LocalGroup: the GPUs of one machine acting as one worker of the job (NCCL).
//
// Each local GPU has a rank in the group; rank 0 is the root. Before a push the gradients of all
// local GPUs are summed into the root's (ncclReduce); only the root talks to the shards; after a
// pull the root's new weights go to the others (ncclBroadcast). The shards see one worker per
// machine, so world_size counts machines, and any number of processes (one per GPU) or threads
// (one per GPU, in one process) may form a group.
//
//   // Every local rank, in its own process or thread, with its own device:
//   auto id = hetps::LocalGroup::IdThroughFile("/tmp/job42.nccl-id", local_rank, deadline);
//   auto group = hetps::LocalGroup::Create(*id, local_rank, local_size, device);
//   options.local_group = *group;   // DeviceClientOptions; client is null unless local_rank == 0
//
// Needs a build with NCCL (FailedPrecondition otherwise).
#ifndef HETPS_WORKER_LOCAL_GROUP_H_
#define HETPS_WORKER_LOCAL_GROUP_H_

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/device_client.h"

namespace hetps {

// NCCL's unique id: made by one rank, handed to the others.
using LocalGroupId = std::array<char, 128>;

class LocalGroup {
 public:
  // A fresh id (on the root).
  static absl::StatusOr<LocalGroupId> NewId();
  // Hands an id from rank 0 to the others through a file all of them can read: rank 0 makes one
  // and writes it (atomically, by rename), the others wait for it until `deadline`. Remove the
  // file when the job ends; a stale one from an earlier run would be read by the others.
  static absl::StatusOr<LocalGroupId> IdThroughFile(const std::string& path, int rank,
                                                    absl::Time deadline);
  // Joins the group; returns when all `size` ranks have joined (DeadlineExceeded if they have
  // not within `timeout`). `cuda_device` is this rank's GPU. FailedPrecondition without NCCL or
  // a GPU; InvalidArgument for an id that NewId() did not make (all zeros).
  static absl::StatusOr<std::shared_ptr<LocalGroup>> Create(
      const LocalGroupId& id, int rank, int size, int cuda_device,
      absl::Duration timeout = absl::Seconds(120));

  virtual ~LocalGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums `count` floats of every rank into the root's `values` (in place), ordered on `stream`.
  virtual absl::Status ReduceToRoot(float* values, size_t count, GpuStream stream) = 0;
  // Copies the root's `count` floats into every other rank's `values`, ordered on `stream`.
  virtual absl::Status Broadcast(float* values, size_t count, GpuStream stream) = 0;
  // Calls between Begin and End are issued together (one NCCL group): a step's tensors.
  virtual absl::Status BeginBatch() = 0;
  virtual absl::Status EndBatch() = 0;
};

}  // namespace hetps

#endif  // HETPS_WORKER_LOCAL_GROUP_H_
