// The shard's control calls besides declaring: barriers, hyperparameter changes, the echo that
// measures the transport, stats, and the state digest tests compare.
#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "optimizer/registry.h"
#include "server/request_util.h"
#include "server/shard.h"

namespace hetps::server {

void Shard::Barrier(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::BarrierRequest> barrier =
      ParseHeader<hetps::v1::BarrierRequest>(request.header);
  absl::Status status = barrier.status();
  if (status.ok()) status = CheckRun(barrier->worker_rank(), barrier->incarnation());
  if (status.ok()) status = CheckStateRun(barrier->shard_incarnation());
  if (status.ok() && barrier->generation() == 0) {
    status = absl::InvalidArgumentError("barrier generations start at 1");
  }
  if (!status.ok()) {
    reply(status);
    return;
  }
  const absl::Time now = hetps::Now();
  const absl::Time deadline = std::min(AnswerBy(request.deadline, now), now + options_.max_wait);
  barrier_.Arrive(barrier->worker_rank(), barrier->generation(), deadline, std::move(reply));
}

void Shard::SetOptimizer(transport::Request request, transport::ReplyCallback reply) {
  absl::StatusOr<hetps::v1::SetOptimizerRequest> change =
      ParseHeader<hetps::v1::SetOptimizerRequest>(request.header);
  absl::Status status = change.status();
  if (status.ok()) status = CheckRank(change->worker_rank());
  if (status.ok()) status = CheckStateRun(change->shard_incarnation());
  TensorRef tensor = status.ok() ? table_.Find(change->tensor_key()) : nullptr;
  if (status.ok() && tensor == nullptr) {
    status = absl::NotFoundError(
        absl::StrFormat("no tensor with key %016x is declared", change->tensor_key()));
  }
  if (status.ok()) status = CheckNotLost(*tensor);
  std::shared_ptr<const Optimizer> optimizer;
  if (status.ok()) {
    // The changes apply on top of the hyperparameters in effect at that version.
    absl::MutexLock lock(&tensor->schedule_mu);
    OptimizerParams params =
        std::prev(tensor->schedule.upper_bound(change->from_version()))->second;
    for (const auto& [name, value] : change->params()) params[name] = value;
    absl::StatusOr<std::unique_ptr<Optimizer>> created =
        CreateOptimizer(tensor->decl.optimizer().name(), params);
    if (!created.ok()) {
      status = created.status();
    } else if ((*created)->state_slots() != tensor->optimizer->state_slots()) {
      status = absl::InvalidArgumentError(absl::StrFormat(
          "tensor '%s': that change would alter the optimizer's state (e.g. turning momentum "
          "or amsgrad on or off), which only a declaration can set",
          tensor->decl.name()));
    } else {
      tensor->schedule[change->from_version()] = (*created)->params();
      optimizer = *std::move(created);
    }
  }
  if (!status.ok()) {
    reply(status);
    return;
  }
  std::vector<Partition*> partitions;
  for (const auto& partition : tensor->partitions) {
    if (partition != nullptr) partitions.push_back(partition.get());
  }
  if (partitions.empty()) {
    reply(HeaderResponse(hetps::v1::SetOptimizerResponse()));
    return;
  }
  auto pending = std::make_shared<PendingRequest>(
      std::vector<hetps::v1::PartitionItem>(partitions.size()), /*returns_weights=*/false,
      std::move(reply), metrics_, hetps::v1::SetOptimizerResponse().SerializeAsString());
  for (size_t slot = 0; slot < partitions.size(); ++slot) {
    Partition* partition = partitions[slot];
    const bool posted = owners_[partition->owner()]->Post(
        [pending, slot, tensor, partition, optimizer, from = change->from_version()] {
          absl::Status rescheduled = partition->Reschedule(from, optimizer);
          if (!rescheduled.ok()) {
            pending->Fail(rescheduled);
            return;
          }
          pending->CompleteItem(slot);
        });
    if (!posted) {
      pending->Fail(absl::UnavailableError("the shard is shutting down"));
      return;
    }
  }
}

absl::StatusOr<transport::Response> Shard::Echo(transport::Request request) {
  HETPS_ASSIGN_OR_RETURN(auto echo, ParseHeader<hetps::v1::EchoRequest>(request.header));
  transport::Response response = HeaderResponse(hetps::v1::EchoResponse());
  if (echo.reply_bytes() == 0) return response;
  if (request.payload.size() >= echo.reply_bytes()) {
    response.payload = request.payload.Subrange(0, echo.reply_bytes());
    return response;
  }
  if (echo.reply_bytes() > options_.max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("an echo of %d bytes exceeds the %d-byte message limit", echo.reply_bytes(),
                        options_.max_message_bytes));
  }
  std::shared_ptr<const std::vector<uint8_t>> zeros;
  {
    absl::MutexLock lock(&zeros_mu_);
    if (zeros_ == nullptr || zeros_->size() < echo.reply_bytes()) {
      zeros_ = std::make_shared<const std::vector<uint8_t>>(echo.reply_bytes());
    }
    zeros = zeros_;
  }
  response.payload =
      transport::Payload::Shared(transport::ByteSpan(zeros->data(), echo.reply_bytes()), zeros);
  return response;
}

std::vector<Shard::PartitionDigest> Shard::PartitionDigests() {
  std::vector<PartitionDigest> digests;
  absl::Mutex mu;
  int waiting = 0;
  table_.ForEach([&](const Tensor& tensor) {
    for (const auto& partition : tensor.partitions) {
      if (partition == nullptr) continue;
      {
        absl::MutexLock lock(&mu);
        ++waiting;
      }
      const bool posted =
          owners_[partition->owner()]->Post([&, key = tensor.decl.key(), p = partition.get()] {
            const PartitionDigest digest{key, p->index(), p->is_backup(), p->Digest()};
            absl::MutexLock lock(&mu);
            digests.push_back(digest);
            --waiting;
          });
      if (!posted) {
        absl::MutexLock lock(&mu);
        --waiting;
      }
    }
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](int* left) { return *left == 0; }, &waiting));
  std::sort(digests.begin(), digests.end());
  return digests;
}

uint64_t Shard::StateDigest() {
  std::vector<std::pair<uint64_t, uint64_t>> parts;  // (tensor key, hash), sorted below
  table_.ForEach([&](const Tensor& tensor) {
    parts.emplace_back(tensor.decl.key(),
                       std::hash<std::string>()(tensor.decl.SerializeAsString()));
  });
  for (const PartitionDigest& partition : PartitionDigests()) {
    parts.emplace_back(partition.tensor_key,
                       partition.digest ^ (uint64_t{partition.partition} << 32));
  }
  std::sort(parts.begin(), parts.end());
  uint64_t hash = 0;
  for (const auto& [key, digest] : parts) hash = hash * 1099511628211ull + (key ^ digest);
  return hash;
}

hetps::v1::StatsResponse Shard::Stats() const {
  hetps::v1::StatsResponse stats;
  stats.set_shard_index(options_.shard_index);
  uint64_t min_version = UINT64_MAX;
  uint64_t max_version = 0;
  table_.ForEach([&](const Tensor& tensor) {
    stats.set_num_tensors(stats.num_tensors() + 1);
    for (const auto& partition : tensor.partitions) {
      if (partition == nullptr) continue;
      if (partition->is_backup()) {
        stats.set_backup_partitions(stats.backup_partitions() + 1);
        continue;
      }
      stats.set_num_partitions(stats.num_partitions() + 1);
      stats.set_parameter_bytes(stats.parameter_bytes() + partition->parameter_bytes());
      stats.set_optimizer_state_bytes(stats.optimizer_state_bytes() + partition->state_bytes());
      min_version = std::min(min_version, partition->version());
      max_version = std::max(max_version, partition->version());
    }
  });
  stats.set_min_version(stats.num_partitions() == 0 ? 0 : min_version);
  stats.set_max_version(max_version);
  stats.set_data_requests(metrics_->data_requests.load());
  stats.set_push_items(metrics_->push_items.load());
  stats.set_pull_items(metrics_->pull_items.load());
  stats.set_payload_bytes_received(metrics_->payload_bytes_received.load());
  stats.set_payload_bytes_sent(metrics_->payload_bytes_sent.load());
  stats.set_failed_requests(metrics_->failed_requests.load());
  stats.set_pushes_refused(metrics_->pushes_refused.load());
  stats.set_tensors_dropped(metrics_->tensors_dropped.load());
  stats.set_requests_waiting(
      static_cast<uint64_t>(std::max<int64_t>(0, metrics_->requests_waiting.load())));
  stats.set_checkpoints_waiting(
      static_cast<uint64_t>(std::max<int64_t>(0, metrics_->checkpoints_waiting.load())));
  stats.set_last_checkpoint(last_checkpoint());
  {
    absl::MutexLock lock(&replicators_mu_);
    uint64_t resends = 0;
    for (const auto& [backup, replicator] : replicators_) resends += replicator->resends();
    for (const auto& replicator : retired_replicators_) resends += replicator->resends();
    stats.set_replication_resends(resends);
  }
  return stats;
}

}  // namespace hetps::server
