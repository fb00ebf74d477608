// The worker client's control calls (worker/internal/client_impl.h): hyperparameters, reading
// and writing state, barriers, checkpoints, drops, stopping a shard and stats.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/partitioning.h"
#include "common/status_macros.h"
#include "proto/ps.pb.h"
#include "worker/internal/client_impl.h"
#include "worker/internal/rpc.h"
#include "worker/internal/wire_format.h"

namespace hetps::internal {

absl::Status ClientImpl::SetHyperparameters(TensorId tensor, uint64_t from_step,
                                            const std::map<std::string, double>& changes) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  HETPS_RETURN_IF_ERROR(FindTensor(tensor).status());
  hetps::v1::SetOptimizerRequest request;
  request.set_worker_rank(options_.rank);
  request.set_tensor_key(tensor);
  request.set_from_version(from_step);
  for (const auto& [name, value] : changes) (*request.mutable_params())[name] = value;
  std::vector<std::string> headers;
  for (const auto& channel : channels) {
    request.set_shard_incarnation(channel->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  return internal::CallEach(*transport_, channels, hetps::v1::METHOD_SET_OPTIMIZER, headers, {},
                            hetps::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<TensorState> ClientImpl::ReadStateOf(TensorId id, bool backup) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
  const auto num_shards = static_cast<uint32_t>(channel_list->size());
  const uint32_t num_partitions = tensor->layout.num_partitions();
  std::vector<std::shared_ptr<ShardChannel>> targets;
  std::vector<std::string> headers;
  for (uint32_t p = 0; p < num_partitions; ++p) {
    hetps::v1::ReadStateRequest request;
    request.set_worker_rank(options_.rank);
    request.set_tensor_key(id);
    request.set_partition(p);
    request.set_backup(backup);
    // A partition's backup is on the shard after its own.
    targets.push_back((*channel_list)[(ShardOfPartition(id, p, num_shards) + backup) % num_shards]);
    request.set_shard_incarnation(targets.back()->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  HETPS_ASSIGN_OR_RETURN(std::vector<transport::Response> responses,
                         internal::CallEach(*transport_, targets, hetps::v1::METHOD_READ_STATE,
                                            headers, {}, hetps::Now() + options_.call_timeout));
  TensorState state;
  state.weights.resize(tensor->num_elements);
  for (uint32_t p = 0; p < num_partitions; ++p) {
    hetps::v1::ReadStateResponse header;
    if (!header.ParseFromString(responses[p].header)) {
      return absl::InternalError("malformed read-state response");
    }
    if (p == 0) {
      state.version = header.version();
      state.slots.assign(header.state_slots(), std::vector<float>(tensor->num_elements));
    } else if (header.version() != state.version || header.state_slots() != state.slots.size()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "tensor '%s': partition 0 is at version %d, partition %d at %d (a step was being "
          "applied): read between steps",
          tensor->name, state.version, p, header.version()));
    }
    const PartitionRange range = tensor->layout.partition(p);
    const size_t bytes = range.size * sizeof(float);
    if (responses[p].payload.size() != bytes * (1 + state.slots.size())) {
      return absl::InternalError(absl::StrFormat(
          "read-state response of %d bytes for partition %d of %d values and %d slots",
          responses[p].payload.size(), p, range.size, state.slots.size()));
    }
    responses[p].payload.CopyTo(
        0,
        transport::AsWritableBytes(absl::MakeSpan(state.weights).subspan(range.begin, range.size)));
    for (size_t slot = 0; slot < state.slots.size(); ++slot) {
      responses[p].payload.CopyTo(
          (slot + 1) * bytes,
          transport::AsWritableBytes(
              absl::MakeSpan(state.slots[slot]).subspan(range.begin, range.size)));
    }
  }
  return state;
}

absl::Status ClientImpl::WriteState(TensorId id, const TensorState& state) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  HETPS_ASSIGN_OR_RETURN(const DeclaredTensor* tensor, FindTensor(id));
  bool sizes_match = state.weights.size() == tensor->num_elements;
  for (const std::vector<float>& slot : state.slots) {
    sizes_match = sizes_match && slot.size() == tensor->num_elements;
  }
  if (!sizes_match) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s' has %d elements: the weights and every state slot must have as many",
        tensor->name, tensor->num_elements));
  }
  const auto num_shards = static_cast<uint32_t>(channel_list->size());
  std::vector<std::shared_ptr<ShardChannel>> targets;
  std::vector<std::string> headers;
  std::vector<transport::Payload> payloads;
  for (uint32_t p = 0; p < tensor->layout.num_partitions(); ++p) {
    const PartitionRange range = tensor->layout.partition(p);
    hetps::v1::WriteStateRequest request;
    request.set_worker_rank(options_.rank);
    request.set_tensor_key(id);
    request.set_partition(p);
    request.set_version(state.version);
    request.set_state_slots(static_cast<uint32_t>(state.slots.size()));
    transport::Payload payload = transport::Payload::Borrow(
        transport::AsBytes(absl::MakeConstSpan(state.weights).subspan(range.begin, range.size)));
    for (const std::vector<float>& slot : state.slots) {
      payload.Append(transport::Payload::Borrow(
          transport::AsBytes(absl::MakeConstSpan(slot).subspan(range.begin, range.size))));
    }
    targets.push_back((*channel_list)[ShardOfPartition(id, p, num_shards)]);
    request.set_shard_incarnation(targets.back()->shard_incarnation());
    headers.push_back(request.SerializeAsString());
    payloads.push_back(std::move(payload));
  }
  return internal::CallEach(*transport_, targets, hetps::v1::METHOD_WRITE_STATE, headers,
                            std::move(payloads), hetps::Now() + options_.call_timeout)
      .status();
}

absl::Status ClientImpl::Barrier() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  hetps::v1::BarrierRequest request;
  request.set_worker_rank(options_.rank);
  request.set_incarnation(incarnation_);
  request.set_shard_incarnation(channels[0]->shard_incarnation());
  {
    absl::MutexLock lock(&mu_);
    request.set_generation(barrier_generation_ + 1);
  }
  // Shard 0 coordinates barriers.
  HETPS_RETURN_IF_ERROR(internal::CallEach(*transport_, {channels[0]}, hetps::v1::METHOD_BARRIER,
                                           {request.SerializeAsString()}, {},
                                           hetps::Now() + options_.call_timeout)
                            .status());
  // Only a barrier that completed counts: after a failure, calling again retries the same one.
  absl::MutexLock lock(&mu_);
  barrier_generation_ = std::max(barrier_generation_, request.generation());
  return absl::OkStatus();
}

absl::Status ClientImpl::Checkpoint(uint64_t step) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  hetps::v1::CheckpointRequest request;
  request.set_worker_rank(options_.rank);
  request.set_step(step);
  std::vector<std::string> headers;
  for (const auto& channel : *channel_list) {
    request.set_shard_incarnation(channel->shard_incarnation());
    headers.push_back(request.SerializeAsString());
  }
  return internal::CallEach(*transport_, *channel_list, hetps::v1::METHOD_CHECKPOINT, headers, {},
                            hetps::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<DropResult> ClientImpl::Drop(absl::Span<const std::string> names) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  if (names.empty()) return absl::InvalidArgumentError("the drop names no tensor");
  hetps::v1::DropRequest request;
  for (const std::string& name : names) {
    if (name.empty()) return absl::InvalidArgumentError("a tensor needs a name");
    request.add_tensor_keys(TensorKeyFromName(name));
  }
  HETPS_ASSIGN_OR_RETURN(DropResult result,
                         internal::DropOnEach(*transport_, *channel_list, request,
                                              hetps::Now() + options_.call_timeout));
  absl::MutexLock lock(&mu_);
  for (uint64_t key : request.tensor_keys()) {
    auto it = tensors_.find(key);
    if (it == tensors_.end()) continue;
    dropped_tensors_.push_back(std::move(it->second));
    tensors_.erase(it);
  }
  return result;
}

absl::StatusOr<DropResult> ClientImpl::DropAll() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  hetps::v1::DropRequest request;
  request.set_all(true);
  HETPS_ASSIGN_OR_RETURN(DropResult result,
                         internal::DropOnEach(*transport_, *channel_list, request,
                                              hetps::Now() + options_.call_timeout));
  absl::MutexLock lock(&mu_);
  for (auto& [key, tensor] : tensors_) dropped_tensors_.push_back(std::move(tensor));
  tensors_.clear();
  return result;
}

absl::Status ClientImpl::StopShard(uint32_t shard) {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  if (shard >= channel_list->size()) {
    return absl::OutOfRangeError(
        absl::StrFormat("shard %d: the cluster has %d shards", shard, channel_list->size()));
  }
  return internal::CallEach(*transport_, {(*channel_list)[shard]}, hetps::v1::METHOD_STOP,
                            {hetps::v1::StopRequest().SerializeAsString()}, {},
                            hetps::Now() + options_.call_timeout)
      .status();
}

absl::StatusOr<std::vector<ShardStats>> ClientImpl::Stats() {
  HETPS_ASSIGN_OR_RETURN(std::shared_ptr<const ChannelList> channel_list, Channels());
  const ChannelList& channels = *channel_list;
  std::vector<std::string> headers(channels.size(), hetps::v1::StatsRequest().SerializeAsString());
  HETPS_ASSIGN_OR_RETURN(std::vector<transport::Response> responses,
                         internal::CallEach(*transport_, channels, hetps::v1::METHOD_STATS, headers,
                                            {}, hetps::Now() + options_.call_timeout));
  std::vector<ShardStats> stats;
  for (const transport::Response& response : responses) {
    hetps::v1::StatsResponse proto;
    if (!proto.ParseFromString(response.header)) {
      return absl::InternalError("malformed stats response");
    }
    stats.push_back(StatsFromProto(proto));
  }
  return stats;
}

}  // namespace hetps::internal
