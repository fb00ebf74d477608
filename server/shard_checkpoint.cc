// The shard's side of checkpoints (server/checkpoint.h): what a part says of each tensor,
// restoring a part at start, checkpoints on demand (Client::Checkpoint) and on SIGTERM.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/await.h"
#include "common/clock.h"
#include "common/partitioning.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {

uint64_t Shard::last_checkpoint() const {
  uint64_t newest = 0;
  for (const auto& writer : checkpoints_) {
    if (writer != nullptr) newest = std::max(newest, writer->last_durable());
  }
  return newest;
}

std::vector<uint32_t> Shard::CopiedGroups() const {
  const uint32_t me = options_.shard_index;
  if (!replication_on_) return {me};
  return {me, (me + options_.num_shards - 1) % options_.num_shards};
}

std::map<uint64_t, hetps::v1::TensorImage> Shard::CheckpointCatalog() const {
  std::map<uint64_t, hetps::v1::TensorImage> catalog;
  table_.ForEach([&](const Tensor& tensor) {
    if (tensor.decl.sync_mode() != hetps::v1::SYNC_MODE_BSP) return;
    hetps::v1::TensorImage& image = catalog[tensor.decl.key()];
    *image.mutable_decl() = tensor.decl;
    absl::MutexLock lock(&tensor.schedule_mu);
    for (const auto& [version, params] : tensor.schedule) {
      hetps::v1::ScheduleEntry* entry = image.add_schedule();
      entry->set_from_version(version);
      for (const auto& [name, value] : params) (*entry->mutable_params())[name] = value;
    }
  });
  return catalog;
}

absl::Status Shard::Restore(const CheckpointPartData& part) {
  // Replicated, the backups hold none of it: each partition replicates once the backup has
  // caught up with a copy of it (server/shard_catch_up.cc).
  replica_target_[options_.shard_index].store(-1);
  for (const hetps::v1::TensorImage& image : part.header.tensors()) {
    const hetps::v1::TensorDecl& decl = image.decl();
    auto refuse = [&](const std::string& why) {
      return absl::DataLossError(
          absl::StrFormat("%s: tensor '%s': %s", part.path, decl.name(), why));
    };
    // Its own partitions take the part's values, the copies of the previous shard's its
    // snapshots (they start unreplicated after a restore too).
    absl::StatusOr<std::pair<TensorRef, bool>> created = CreateTensor(decl, CopiedValues::kAll);
    if (!created.ok()) return refuse(std::string(created.status().message()));
    const Tensor& tensor = *created->first;
    // The hyperparameter schedule first: a partition takes changes only up to its version.
    for (const hetps::v1::ScheduleEntry& entry : image.schedule()) {
      const OptimizerParams params(entry.params().begin(), entry.params().end());
      if (entry.from_version() == 0) continue;  // the declared rule
      absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
          CreateOptimizer(decl.optimizer().name(), params);
      if (!optimizer.ok()) return refuse(std::string(optimizer.status().message()));
      std::shared_ptr<const Optimizer> shared = *std::move(optimizer);
      for (const auto& partition : tensor.partitions) {
        if (partition != nullptr) {
          HETPS_RETURN_IF_ERROR(partition->Reschedule(entry.from_version(), shared));
        }
      }
      absl::MutexLock lock(&tensor.schedule_mu);
      tensor.schedule[entry.from_version()] = shared->params();
    }
    size_t restored = 0;
    for (const hetps::v1::PartitionImage& partition_image : image.partitions()) {
      const uint32_t index = partition_image.index();
      if (index >= tensor.partitions.size() || tensor.partitions[index] == nullptr ||
          ShardOfPartition(decl.key(), index, options_.num_shards) != options_.shard_index) {
        return refuse(absl::StrFormat("partition %d is not this shard's", index));
      }
      absl::Status status =
          tensor.partitions[index]->Restore(partition_image, part.Values(partition_image));
      if (!status.ok()) return refuse(std::string(status.message()));
      ++restored;
    }
    // This shard's own (replicated, it also keeps copies of the previous shard's).
    const size_t owned =
        ShareOfShard(tensor.layout, decl.key(), options_.num_shards, options_.shard_index)
            .partitions;
    if (restored != owned) {
      return refuse(
          absl::StrFormat("the part holds %d of this shard's %d partitions", restored, owned));
    }
  }
  resume_step_ = part.header.step();
  return absl::OkStatus();
}

}  // namespace hetps::server

namespace hetps::server {
namespace {

// A reply that may be given from several places (a partition's refusal, the writer, a
// deadline): the first one wins.
class ReplyOnce {
 public:
  // `metrics->checkpoints_waiting` counts it until it replies.
  ReplyOnce(transport::ReplyCallback reply, std::shared_ptr<ShardMetrics> metrics)
      : reply_(std::move(reply)), metrics_(std::move(metrics)) {
    ShardMetrics::Add(metrics_->checkpoints_waiting, 1);
  }
  void operator()(absl::StatusOr<transport::Response> result) {
    if (replied_.exchange(true)) return;
    ShardMetrics::Add(metrics_->checkpoints_waiting, -1);
    transport::ReplyCallback reply = std::move(reply_);
    reply(std::move(result));
  }

 private:
  std::atomic<bool> replied_{false};
  transport::ReplyCallback reply_;
  const std::shared_ptr<ShardMetrics> metrics_;
};

}  // namespace

std::vector<std::pair<TensorRef, Partition*>> Shard::CheckpointedPartitions() const {
  std::vector<std::pair<TensorRef, Partition*>> partitions;
  table_.ForEach([&](const Tensor& tensor) {
    if (tensor.decl.sync_mode() != hetps::v1::SYNC_MODE_BSP) return;
    for (const auto& partition : tensor.partitions) {
      if (partition != nullptr && !partition->is_backup()) {
        partitions.emplace_back(tensor.shared_from_this(), partition.get());
      }
    }
  });
  return partitions;
}

void Shard::Checkpoint(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::CheckpointRequest> checkpoint =
      ParseHeader<hetps::v1::CheckpointRequest>(request.header);
  absl::Status status = checkpoint.status();
  if (status.ok()) status = CheckRank(checkpoint->worker_rank());
  if (status.ok()) status = CheckStateRun(checkpoint->shard_incarnation());
  if (status.ok() && checkpoints_.empty()) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "shard %d keeps no checkpoints: start it with --checkpoint_dir", options_.shard_index));
  }
  if (status.ok() && checkpoint->step() == 0) {
    status = absl::InvalidArgumentError("checkpoints are of steps from 1 on");
  }
  if (!status.ok()) {
    reply(status);
    return;
  }
  const std::vector<std::pair<TensorRef, Partition*>> partitions = CheckpointedPartitions();
  // The parts this shard writes: of the groups it serves (two after a takeover).
  std::set<uint32_t> groups;
  for (const auto& [tensor, partition] : partitions) {
    groups.insert(ShardOfPartition(tensor->decl.key(), partition->index(), options_.num_shards));
  }
  std::erase_if(groups, [this](uint32_t group) { return checkpoints_[group] == nullptr; });
  if (groups.empty()) {  // this shard has no part to write
    reply(HeaderResponse(hetps::v1::CheckpointResponse()));
    return;
  }
  const uint64_t step = checkpoint->step();
  auto once = std::make_shared<ReplyOnce>(std::move(reply), metrics_);
  const absl::Time now = hetps::Now();
  const absl::Time answer_by = std::min(AnswerBy(request.deadline, now), now + options_.max_wait);
  const TimerQueue::TimerId timer =
      timers_->Schedule(answer_by, [once, step, shard = options_.shard_index] {
        (*once)(absl::DeadlineExceededError(absl::StrFormat(
            "shard %d: the checkpoint of step %d is not durable yet (every partition must reach "
            "that step: do all workers push it?)",
            shard, step)));
      });
  auto parts_left = std::make_shared<std::atomic<size_t>>(groups.size());
  for (uint32_t group : groups) {
    checkpoints_[group]->WhenDurable(
        step, [once, timer, parts_left, timers = timers_.get()](absl::Status durable) {
          if (durable.ok() && parts_left->fetch_sub(1) > 1) return;  // another part to come
          timers->Cancel(timer);
          if (durable.ok()) {
            (*once)(HeaderResponse(hetps::v1::CheckpointResponse()));
          } else {
            (*once)(durable);
          }
        });
  }
  for (const auto& [tensor, partition] : partitions) {
    owners_[partition->owner()]->Post([tensor = tensor, partition = partition, step, once] {
      absl::Status asked = partition->CheckpointAt(step);
      if (!asked.ok()) (*once)(asked);
    });
  }
}

absl::Status Shard::CheckpointNow(absl::Time deadline) {
  if (checkpoints_.empty()) return absl::OkStatus();
  const std::vector<std::pair<TensorRef, Partition*>> partitions = CheckpointedPartitions();
  if (partitions.empty()) return absl::OkStatus();
  struct Gathered {
    absl::Mutex mu;
    CheckpointWriter::Copies copies ABSL_GUARDED_BY(mu);
    size_t answered ABSL_GUARDED_BY(mu) = 0;
  };
  auto gathered = std::make_shared<Gathered>();
  for (const auto& [tensor, partition] : partitions) {
    owners_[partition->owner()]->Post([gathered, tensor = tensor, partition = partition] {
      // A partition of a tensor dropped meanwhile is left out.
      std::optional<PartitionCopy> copy;
      if (!partition->retired()) copy = partition->Capture();
      absl::MutexLock lock(&gathered->mu);
      ++gathered->answered;
      if (copy.has_value()) gathered->copies.emplace_back(tensor->decl.key(), *std::move(copy));
    });
  }
  CheckpointWriter::Copies copies;
  {
    absl::MutexLock lock(&gathered->mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gathered->mu) {
      return gathered->answered == partitions.size();
    };
    if (!AwaitUntil(gathered->mu, absl::Condition(&all), deadline)) {
      return absl::DeadlineExceededError("the partitions' owner threads did not answer in time");
    }
    copies = std::move(gathered->copies);
  }
  uint64_t lowest = ~uint64_t{0}, highest = 0;
  for (const auto& [key, copy] : copies) {
    lowest = std::min(lowest, copy.version);
    highest = std::max(highest, copy.version);
  }
  if (lowest != highest) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the partitions are at versions %d to %d, in the middle of a step: no checkpoint of "
        "the current state (the newest stays step %d)",
        lowest, highest, last_checkpoint()));
  }
  if (copies.empty() || highest == 0) return absl::OkStatus();  // nothing (trained) to keep
  // A part per group served (two after a takeover).
  std::map<uint32_t, CheckpointWriter::Copies> parts;
  for (auto& [key, copy] : copies) {
    const uint32_t group = ShardOfPartition(key, copy.index, options_.num_shards);
    parts[group].emplace_back(key, std::move(copy));
  }
  for (auto& [group, part] : parts) {
    if (checkpoints_[group] == nullptr) continue;  // not a group this shard keeps copies of
    HETPS_RETURN_IF_ERROR(checkpoints_[group]->WriteNow(highest, std::move(part)));
  }
  return absl::OkStatus();
}

}  // namespace hetps::server
