// Reading and writing a partition's whole state (weights, optimizer state, version): what an
// optimizer's state_dict() and load_state_dict() need.
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "common/task_thread.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {
namespace {

// Runs `task(reply)` on `owner` (only a partition's owner thread may touch its state); a shard
// that is stopping answers Unavailable instead.
template <typename Task>
void RunOnOwner(TaskThread& owner, uint32_t shard_index, transport::ReplyCallback reply,
                Task task) {
  auto shared = std::make_shared<transport::ReplyCallback>(std::move(reply));
  if (!owner.Post([shared, task = std::move(task)]() mutable { task(*shared); })) {
    (*shared)(absl::UnavailableError(absl::StrFormat("shard %d is shutting down", shard_index)));
  }
}

}  // namespace

absl::StatusOr<std::pair<TensorRef, Partition*>> Shard::LocateForWorker(uint32_t rank,
                                                                        uint64_t shard_incarnation,
                                                                        uint64_t tensor_key,
                                                                        uint32_t partition,
                                                                        bool backup) const {
  HETPS_RETURN_IF_ERROR(CheckRank(rank));
  HETPS_RETURN_IF_ERROR(CheckStateRun(shard_incarnation));
  if (backup && !replication_on_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d keeps no backup copies: replication is off (ps-server --replicas 1)",
        options_.shard_index));
  }
  HETPS_ASSIGN_OR_RETURN(auto located, LocatePartition(tensor_key, partition, backup));
  if (backup && !located.second->is_backup()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shard %d keeps no backup of partition %d of tensor '%s' (it serves it, or replication "
        "is off)",
        options_.shard_index, partition, located.first->decl.name()));
  }
  return located;
}

void Shard::ReadState(transport::Request request, transport::ReplyCallback reply) {
  const auto read = ParseHeader<hetps::v1::ReadStateRequest>(request.header);
  const auto located = read.ok()
                           ? LocateForWorker(read->worker_rank(), read->shard_incarnation(),
                                             read->tensor_key(), read->partition(), read->backup())
                           : read.status();
  if (!located.ok()) {
    reply(located.status());
    return;
  }
  Partition* partition = located->second;
  RunOnOwner(*owners_[partition->owner()], options_.shard_index, std::move(reply),
             [tensor = located->first, partition](transport::ReplyCallback& reply) {
               transport::Response response;
               uint64_t version = 0;
               response.payload = partition->ReadState(&version);
               hetps::v1::ReadStateResponse header;
               header.set_version(version);
               header.set_state_slots(static_cast<uint32_t>(
                   response.payload.size() / (partition->num_elements() * sizeof(float)) - 1));
               response.header = header.SerializeAsString();
               reply(std::move(response));
             });
}

void Shard::WriteState(transport::Request request, transport::ReplyCallback reply) {
  const auto write = ParseHeader<hetps::v1::WriteStateRequest>(request.header);
  const auto located = write.ok()
                           ? LocateForWorker(write->worker_rank(), write->shard_incarnation(),
                                             write->tensor_key(), write->partition())
                           : write.status();
  if (!located.ok()) {
    reply(located.status());
    return;
  }
  const auto [tensor, partition] = *located;
  if (write->state_slots() != static_cast<uint32_t>(tensor->optimizer->state_slots())) {
    reply(absl::InvalidArgumentError(
        absl::StrFormat("tensor '%s' keeps %d optimizer state slots (%s), the write carries %d",
                        tensor->decl.name(), tensor->optimizer->state_slots(),
                        tensor->decl.optimizer().name(), write->state_slots())));
    return;
  }
  // Answered once the partition (and, replicated, its backup) holds the state.
  auto pending = std::make_shared<PendingRequest>(
      std::vector<hetps::v1::PartitionItem>(1), /*returns_weights=*/false, std::move(reply),
      metrics_, hetps::v1::WriteStateResponse().SerializeAsString());
  pending->SetDeadline(timers_.get(), AnswerBy(request.deadline, hetps::Now()), options_.max_wait);
  const bool posted = owners_[partition->owner()]->Post(
      [pending, tensor = tensor, partition = partition, version = write->version(),
       state = std::move(request.payload)] {
        absl::Status written = partition->WriteState(version, state);
        if (!written.ok()) {
          pending->Fail(written);
          return;
        }
        partition->AckWhenReplicated(0, pending, 0);
      });
  if (!posted) {
    pending->Fail(
        absl::UnavailableError(absl::StrFormat("shard %d is shutting down", options_.shard_index)));
  }
}

}  // namespace hetps::server
