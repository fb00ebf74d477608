// Consistent checkpoints of a BSP job, written by the shards without stopping it.
//
// Every `every` steps each BSP partition hands a copy of itself to its shard's
// CheckpointWriter right after the update that reaches the version (Partition::Config): a
// memory copy on the partition's owner thread, the only pause training sees. Since every
// partition passes every version, the copies of one version are a cut of the whole job. A
// writer is per group (the partitions placed on shard <i>), kept by the shard serving it: after
// a takeover the next shard writes the lost shard's part too. Once a part's copies of step S are
// all in, a background thread writes them to
//
//   DIR/step-<S>/shard-<i>-of-<N>.part      weights, optimizer state, versions, workers' runs
//   DIR/step-<S>/shard-<i>-of-<N>.sum       its size and CRC-32C
//   DIR/step-<S>/MANIFEST                   job, step, shard count, every part's size and CRC
//
// each through a temporary file, fsync and rename. DIR is shared by the job's shards (one
// machine, or a shared file system): the shard that finds the .sum of every shard holding BSP
// partitions (every shard knows every tensor's layout) writes the MANIFEST, so a checkpoint
// exists only once every part is durable. Checkpoints are also taken on demand
// (Client::Checkpoint: CheckpointAt on every partition, then WhenDurable) and on SIGTERM
// (Shard::CheckpointNow: the current state, if every partition is at one step). A shard started
// with --restore DIR loads its part of the newest committed checkpoint (or of DIR itself when
// it is a step-<S> directory) after checking the manifest, the job, the shard count and the
// part's size and checksum; every refusal names the file.
#ifndef HETPS_SERVER_CHECKPOINT_H_
#define HETPS_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/task_thread.h"
#include "proto/checkpoint.pb.h"
#include "server/partition.h"

namespace hetps::server {

struct CheckpointIdentity {
  std::string job_id;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint32_t num_workers = 1;
};

class CheckpointWriter {
 public:
  // What a part says of each tensor besides its partitions: declaration and hyperparameter
  // schedule (TensorImage without partitions), by tensor key.
  using Catalog = std::function<std::map<uint64_t, hetps::v1::TensorImage>()>;

  // `expected_copies`: how many partition copies make this shard's share of a step (its BSP
  // partitions).
  CheckpointWriter(std::string dir, CheckpointIdentity identity, Catalog catalog,
                   std::function<size_t()> expected_copies);
  ~CheckpointWriter();  // finishes the parts being written

  using Copies = std::vector<std::pair<uint64_t, PartitionCopy>>;  // (tensor key, copy)

  // A partition's copy (any thread). REQUIRES: copies of one tensor partition come in version
  // order. A copy of a step that is written or being written already is dropped.
  void Offer(uint64_t tensor_key, PartitionCopy copy);
  // The tensor was dropped: the steps being gathered let go of its copies and no longer wait
  // for them (the shard counts its partitions out of `expected_copies` first). A part being
  // written already leaves it out. Any thread.
  void Forget(uint64_t tensor_key);
  // Whether the periodic checkpoint of `step` is taken: not while an earlier one is still being
  // written (one copy in memory at a time, and a disk slower than the checkpoints are frequent
  // does not pile them up). The first partition to ask decides for all. Any thread.
  bool TakesPeriodic(uint64_t step);
  // Calls `done` (on the writer's thread, or at once) with the outcome of writing this shard's
  // part of `step`.
  void WhenDurable(uint64_t step, std::function<void(absl::Status)> done);
  // Writes `copies` as this shard's part of `step` on the calling thread, unless that step is
  // written or being written already (then OK at once).
  absl::Status WriteNow(uint64_t step, Copies copies);

  // The newest step of which this shard's part is durable (0: none yet).
  uint64_t last_durable() const;
  // When that step became durable (InfinitePast: none yet).
  absl::Time last_durable_time() const;

 private:
  struct Step {
    // Gathering, by (tensor key, partition): a copy offered twice counts once.
    std::map<std::pair<uint64_t, uint32_t>, PartitionCopy> copies;
    bool handed_off = false;  // to Write: later copies are dropped
    bool skipped = false;     // a periodic step not taken (TakesPeriodic)
    bool done = false;
    absl::Status result;
    std::vector<std::function<void(absl::Status)>> waiters;
  };
  // Moves a step's copies to `ready` once it holds as many as expected (and some).
  bool HandOffIfComplete(Step& gathering, Copies& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(uint64_t step, Copies copies);
  absl::Status WritePart(uint64_t step, Copies& copies);
  absl::Status CommitIfComplete(uint64_t step);

  const std::string dir_;
  const CheckpointIdentity identity_;
  const Catalog catalog_;
  const std::function<size_t()> expected_copies_;

  mutable absl::Mutex mu_;
  std::map<uint64_t, Step> steps_ ABSL_GUARDED_BY(mu_);
  uint64_t last_durable_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_durable_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::unique_ptr<TaskThread> writer_;  // last: stopped first
};

// A shard's part of a checkpoint, checked and read whole.
struct CheckpointPartData {
  std::string path;
  hetps::v1::CheckpointPart header;
  std::string file;       // the whole file
  size_t data_start = 0;  // where the data section begins in `file`

  // The values of one partition image (weights, then state slots).
  absl::Span<const float> Values(const hetps::v1::PartitionImage& image) const;
};

// Finds the checkpoint to restore in `dir` (a step-<S> directory, or the newest committed one
// under `dir`), checks it against `identity` and reads this shard's part. NotFound, DataLoss or
// FailedPrecondition, naming the file.
absl::StatusOr<CheckpointPartData> LoadCheckpointPart(const std::string& dir,
                                                      const CheckpointIdentity& identity);

// "step-000000000140": the directory of step `step`'s checkpoint.
std::string CheckpointStepDir(const std::string& dir, uint64_t step);
// "shard-1-of-2.part"
std::string CheckpointPartName(uint32_t shard_index, uint32_t num_shards);

}  // namespace hetps::server

#endif  // HETPS_SERVER_CHECKPOINT_H_
